"""Spreading a sweep over processes (GPUs or CPU cores) with Lightning Fabric, the results passed through files.

``run_sweep_sharded(config, out_dir, devices=N)`` gives rank ``r`` of ``W`` processes the cells ``r, r + W, ...`` of
the grid. Every pair draws from a stream keyed by its cell (:mod:`mlm_dynamics.sampling.grid`), so a cell gives the
same meeting times in any shard as in one process (bit for bit on the toy models). Each rank runs
:func:`~.sweep.run_sweep` on its cells (checkpointing into ``OUT/shards/rank{r}``, so ``--resume`` continues every
shard), writes its cells to ``OUT/shards/rank{r}/cells.pt`` (atomic, hashed, unpickled with ``weights_only``) and
waits at a barrier; then one process reads every shard and merges: summaries, fits, boundary and claims on the whole
grid, the rectangle test and the influence estimate from rank 0's shard. Nothing travels through a pipe.

On one node the workers are spawned (``ddp_spawn``: gloo on CPU, NCCL on CUDA) and the launching process merges;
each worker exits when the launching process does, so an interrupted sweep leaves no process behind. Across nodes
the cluster starts the processes and Fabric reads their ranks from the environment (SLURM, torchrun); global rank 0
merges into the shared ``OUT``::

    srun --nodes 4 --ntasks-per-node 8 --gpus-per-node 8 \\
        mlm-dynamics sweep --config configs/sweep-bert-gpu.yaml --out /shared/sweep --devices 8 --num-nodes 4
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import torch

from ..diagnostics.influence import InfluenceEstimate
from ..diagnostics.rectangle import RectangleReport
from ..diagnostics.sweep import SweepCell
from .checkpoint import RunInterrupted, fingerprint, load_checkpoint, save_checkpoint
from .config import SweepConfig, to_dict
from .sweep import SweepResult, finish, run_sweep


def run_sweep_sharded(config: SweepConfig, out_dir: Path, *, devices: int, num_nodes: int = 1, resume: bool = False,
                      progress: bool = False) -> SweepResult | None:
    """Run the sweep's cells on ``devices`` processes per node (``num_nodes`` nodes); the merged result on the process
    that merges, ``None`` on the others (see the module docstring)."""
    from lightning.fabric import Fabric

    config.validate()
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise ValueError(f"--devices must be an integer >= 1, got {devices!r}")
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1:
        raise ValueError(f"--num-nodes must be an integer >= 1, got {num_nodes!r}")
    cuda = torch.device(config.model.device).type == "cuda"
    fabric = Fabric(accelerator="cuda" if cuda else "cpu", devices=devices, num_nodes=num_nodes,
                    strategy="ddp_spawn" if num_nodes == 1 else "ddp")
    try:
        fabric.launch(partial(_worker, config=config, out_dir=out_dir, resume=resume, progress=progress,
                              devices=devices, parent=os.getpid()))
    except KeyboardInterrupt:
        raise RunInterrupted(" while the shards ran") from None
    if fabric.global_rank != 0:
        return None
    world = fabric.world_size
    return merge(config, [_read_shard(config, out_dir, rank, world) for rank in range(world)
                          if _shard_cells(config, rank, world)])


def _shard_cells(config: SweepConfig, rank: int, world: int) -> list[tuple[float, int]]:
    return [(t, n) for t in config.grid.temperatures for n in config.grid.lengths][rank::world]


def _worker(fabric: Any, *, config: SweepConfig, out_dir: Path, resume: bool, progress: bool, devices: int,
            parent: int) -> None:
    if os.getpid() != parent:  # a spawned worker ends with the process that launched it
        threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()
    rank, world = fabric.global_rank, fabric.world_size
    torch.set_num_threads(max(1, torch.get_num_threads() // devices))  # the node's cores shared by its processes
    cells = _shard_cells(config, rank, world)
    if cells:
        own = config
        if config.model.device.startswith("cuda"):
            own = dataclasses.replace(config, model=dataclasses.replace(config.model, device=str(fabric.device)))
        shard_dir = out_dir / "shards" / f"rank{rank}"
        piece = run_sweep(own, shard_dir, resume=resume and (shard_dir / "sweep-checkpoint.pt").exists(),
                          progress=progress and rank == 0, cells=cells, extras=rank == 0)
        save_checkpoint(shard_dir / "cells.pt", _shard_payload(piece), fingerprints=_fingerprints(config, cells),
                        step=0)
    fabric.barrier()


def _exit_with(parent: int) -> None:
    """Exit this process once ``parent`` is gone (it was interrupted or killed)."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(130)


def _fingerprints(config: SweepConfig, cells: list[tuple[float, int]]) -> dict[str, str]:
    return {"config": fingerprint(to_dict(config)), "cells": fingerprint([list(c) for c in cells])}


def _shard_payload(result: SweepResult) -> dict[str, Any]:
    return {"cells": [cell.state_dict() for cell in result.cells],
            "influence": None if result.influence is None else dataclasses.asdict(result.influence),
            "rectangles": None if result.rectangles is None else dataclasses.asdict(result.rectangles),
            "timings": result.timings, "rows": result.rows, "environment": result.environment,
            "notes": result.notes}


def _read_shard(config: SweepConfig, out_dir: Path, rank: int, world: int) -> dict[str, Any]:
    path = out_dir / "shards" / f"rank{rank}" / "cells.pt"
    payload, _ = load_checkpoint(path, fingerprints=_fingerprints(config, _shard_cells(config, rank, world)))
    return payload


def merge(config: SweepConfig, pieces: list[dict[str, Any]]) -> SweepResult:
    """One result from the shards' payloads: every cell, the analysis and claims recomputed on all of them."""
    cells = [SweepCell.from_state_dict(cell) for piece in pieces for cell in piece["cells"]]
    first = pieces[0]
    timings = {key: max(p["timings"][key] for p in pieces) for key in first["timings"]}
    rows = {key: sum(p["rows"][key] for p in pieces) for key in ("pair_rows_spent", "pair_rows_uncompacted")}
    influence = None if first["influence"] is None else InfluenceEstimate(**first["influence"])
    rectangles = None if first["rectangles"] is None else RectangleReport(**first["rectangles"])
    return finish(config, cells, influence=influence, rectangles=rectangles, timings=timings, rows=rows,
                  environment={**first["environment"], "processes": str(len(pieces))},
                  notes=[*first["notes"], f"cells sharded over {len(pieces)} processes"])
