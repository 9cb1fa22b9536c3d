"""A sweep split into shards by cell, the shards' results passed through files and merged.

Shard ``r`` of ``W`` holds the cells ``r, r + W, ...`` of the grid. Every pair draws from a stream keyed by its cell
(:mod:`mlm_dynamics.sampling.grid`), so a cell gives the same meeting times in any shard as in one process (bit for
bit on the toy models). :func:`run_shard` runs :func:`~.sweep.run_sweep` on a shard's cells (checkpointing into
``OUT/shards/rank{r}``, so ``--resume`` continues every shard) and writes its cells to
``OUT/shards/rank{r}/cells.pt`` (atomic, hashed, unpickled with ``weights_only``); :func:`merge_shards` reads every
shard and recomputes summaries, fits, boundary and claims on the whole grid, with the rectangle test and the
influence estimate from shard 0. Nothing travels through a pipe. Starting the processes is the launcher's
(:mod:`mlm_dynamics.launch`, Lightning Fabric); this module knows nothing of it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ..diagnostics.influence import InfluenceEstimate
from ..diagnostics.rectangle import RectangleReport
from ..diagnostics.sweep import SweepCell
from ..models.cost import CostLedger
from .checkpoint import fingerprint, load_checkpoint, save_checkpoint
from .config import SweepConfig, to_dict
from .sweep import SweepResult, finish, run_sweep


def shard_cells(config: SweepConfig, rank: int, world: int) -> list[tuple[float, int]]:
    """The cells of shard ``rank`` of ``world``: every ``world``-th cell of the grid from the ``rank``-th."""
    return [(t, n) for t in config.grid.temperatures for n in config.grid.lengths][rank::world]


def run_shard(config: SweepConfig, out_dir: Path, *, rank: int, world: int, device: str | None = None,
              resume: bool = False, progress: bool = False) -> None:
    """Run shard ``rank`` of ``world`` (its cells, if any) on ``device`` (default: the config's) and write its cells
    to ``OUT/shards/rank{rank}/cells.pt``; ``resume`` continues the shard's own checkpoint where there is one."""
    cells = shard_cells(config, rank, world)
    if not cells:
        return
    own = config if device is None else dataclasses.replace(config, model=dataclasses.replace(config.model,
                                                                                              device=device))
    shard_dir = out_dir / "shards" / f"rank{rank}"
    piece = run_sweep(own, shard_dir, resume=resume and (shard_dir / "sweep-checkpoint.pt").exists(),
                      progress=progress and rank == 0, cells=cells, extras=rank == 0)
    save_checkpoint(shard_dir / "cells.pt", _shard_payload(piece), fingerprints=_fingerprints(config, cells), step=0)


def merge_shards(config: SweepConfig, out_dir: Path, world: int) -> SweepResult:
    """The merged result of the ``world`` shards written under ``out_dir`` (shards without cells are skipped)."""
    return merge(config, [_read_shard(config, out_dir, rank, world) for rank in range(world)
                          if shard_cells(config, rank, world)])


def _fingerprints(config: SweepConfig, cells: list[tuple[float, int]]) -> dict[str, str]:
    return {"config": fingerprint(to_dict(config)), "cells": fingerprint([list(c) for c in cells])}


def _shard_payload(result: SweepResult) -> dict[str, Any]:
    return {"cells": [cell.state_dict() for cell in result.cells],
            "influence": None if result.influence is None else dataclasses.asdict(result.influence),
            "rectangles": None if result.rectangles is None else dataclasses.asdict(result.rectangles),
            "timings": result.timings, "rows": result.rows, "environment": result.environment,
            "notes": result.notes, "cost": None if result.cost is None else result.cost.record()}


def _read_shard(config: SweepConfig, out_dir: Path, rank: int, world: int) -> dict[str, Any]:
    path = out_dir / "shards" / f"rank{rank}" / "cells.pt"
    payload, _ = load_checkpoint(path, fingerprints=_fingerprints(config, shard_cells(config, rank, world)))
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
                  notes=[*first["notes"], f"cells sharded over {len(pieces)} processes"],
                  cost=CostLedger.merged(records) if (records := [p["cost"] for p in pieces if p.get("cost")]) else
                  None)


__all__ = ["merge", "merge_shards", "run_shard", "shard_cells"]
