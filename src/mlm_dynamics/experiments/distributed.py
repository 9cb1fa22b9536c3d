"""Spreading a sweep over processes (GPUs or CPU cores) with Lightning Fabric.

``run_sweep_sharded(config, out_dir, devices=N)`` starts N processes (``ddp_spawn``; gloo on CPU, NCCL on CUDA),
gives rank ``r`` the cells ``r, r + N, r + 2N, ...`` of the grid, runs :func:`~.sweep.run_sweep` on them (each rank
checkpoints into ``out_dir/shards/rank{r}`` and resumes from there) and gathers the cells on rank 0, which fits
``C(tau)`` and the boundary on the whole grid. The Dobrushin estimate runs on rank 0 only. Cells get their start
pairs and seeds from their shard, so a sharded sweep is a statistically equivalent, not bit-identical, replay of a
single-process one.
"""

from __future__ import annotations

import dataclasses
import pickle
from functools import partial
from pathlib import Path
from typing import Any

import torch

from .sweep import SweepConfig, SweepResult, analyse, run_sweep


def run_sweep_sharded(config: SweepConfig, out_dir: Path, *, devices: int, resume: bool = False,
                      progress: bool = False) -> SweepResult:
    """Run the sweep's cells on ``devices`` processes and return the merged result (see the module docstring)."""
    from lightning.fabric import Fabric

    config.validate()
    if devices < 1:
        raise ValueError(f"--devices must be >= 1, got {devices}")
    cuda = torch.device(config.model.device).type == "cuda"
    fabric = Fabric(accelerator="cuda" if cuda else "cpu", devices=devices, strategy="ddp_spawn")
    payload = fabric.launch(partial(_worker, config=config, out_dir=out_dir, resume=resume, progress=progress))
    # rank 0 pickled its merged result: tensors travel as bytes, not as shared memory of a process that has exited
    result: SweepResult = pickle.loads(payload)
    return result


def _worker(fabric: Any, *, config: SweepConfig, out_dir: Path, resume: bool, progress: bool) -> bytes | None:
    rank, world = fabric.global_rank, fabric.world_size
    torch.set_num_threads(max(1, torch.get_num_threads() // world))
    cells = [(t, n) for t in config.grid.temperatures for n in config.grid.lengths][rank::world]
    own = dataclasses.replace(config, influence=dataclasses.replace(config.influence,
                                                                    enabled=config.influence.enabled and rank == 0))
    if config.model.device.startswith("cuda"):
        own = dataclasses.replace(own, model=dataclasses.replace(config.model, device=str(fabric.device)))
    shard_dir = out_dir / "shards" / f"rank{rank}"
    piece = run_sweep(own, shard_dir, resume=resume and (shard_dir / "sweep-checkpoint.pt").exists(),
                      progress=progress and rank == 0, cells=cells)
    gathered: list[Any] = [None] * world
    torch.distributed.all_gather_object(gathered, piece)
    if rank != 0:
        return None
    return pickle.dumps(merge(config, gathered))


def merge(config: SweepConfig, pieces: list[SweepResult]) -> SweepResult:
    """One result from shard results: cells in grid order, fits and boundary recomputed on all of them."""
    grid = [(t, n) for t in config.grid.temperatures for n in config.grid.lengths]
    order = {cell: k for k, cell in enumerate(grid)}
    cells = sorted((c for piece in pieces for c in piece.cells), key=lambda c: order[(c.temperature, c.num_sites)])
    fits, hitting_fits, boundary = analyse(cells, config)
    spent = sum(p.rows["pair_rows_spent"] for p in pieces)
    uncompacted = sum(p.rows["pair_rows_uncompacted"] for p in pieces)
    timings = {key: max(p.timings[key] for p in pieces) for key in pieces[0].timings}
    first = pieces[0]
    return SweepResult(config=config, cells=cells, fits=fits, hitting_fits=hitting_fits, boundary=boundary,
                       influence=first.influence, timings=timings,
                       rows={"pair_rows_spent": spent, "pair_rows_uncompacted": uncompacted,
                             "rows_saved_fraction": 1 - spent / uncompacted if uncompacted else 0.0},
                       environment={**first.environment, "processes": str(len(pieces))},
                       notes=[*first.notes, f"cells sharded over {len(pieces)} processes"])
