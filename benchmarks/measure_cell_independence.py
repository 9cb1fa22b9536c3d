"""How often a pair's meeting time on a masked LM changes between its cell run alone and inside a grid.

Every pair draws from its own stream (keyed by its cell and index), so on the toy models a cell's meeting times are
bit-identical alone and in any grid (``tests/test_sweep.py``). A masked LM's forward pass can differ in the last bits
with the shape of the batch (other rows, other padding of the sites); a conditional that differs by one ulp moves an
inverse-CDF draw only when the uniform falls within that ulp of a boundary, and a pair's path changes from there on.
This script counts it: the cells of a (temperature x length) grid on AntiBERTy (``--layers`` of its 8 layers, the
whole context, windows centred on CDR-H3), run together and each alone, pair by pair.

Usage: python benchmarks/measure_cell_independence.py [--layers 2 --pairs 4 --max-steps 200]
"""

from __future__ import annotations

import argparse
import time

from mlm_dynamics.experiments import load_config
from mlm_dynamics.experiments.config import SweepConfig
from mlm_dynamics.experiments.sweep import run_sweep


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--temperatures", type=float, nargs="+", default=[1.0, 2.0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[4, 8, 16])
    args = parser.parse_args()
    common = ["model.source=antiberty", f"model.num_layers={args.layers}", f"grid.pairs={args.pairs}",
              f"grid.max_steps={args.max_steps}", "context.window_center=100", "drift.enabled=false",
              "influence.enabled=false", "rectangle.enabled=false", "checkpoint_every=null"]
    grid_overrides = [f"grid.temperatures={args.temperatures}", f"grid.lengths={args.lengths}"]
    started = time.perf_counter()
    together = run_sweep(load_config(SweepConfig, None, [*common, *grid_overrides]))
    changed = total = differing_cells = 0
    for tau in args.temperatures:
        for n in args.lengths:
            alone = run_sweep(load_config(SweepConfig, None, [*common, f"grid.temperatures=[{tau}]",
                                                             f"grid.lengths=[{n}]"])).cell(tau, n)
            inside = together.cell(tau, n)
            assert alone.sites == inside.sites
            mine, theirs = alone.meeting, inside.meeting
            differs = (mine.times != theirs.times) | (mine.censored != theirs.censored)
            changed += int(differs.sum())
            total += differs.numel()
            differing_cells += int(bool(differs.any()))
    print(f"AntiBERTy ({args.layers} layers, whole context), {len(args.temperatures)} x {len(args.lengths)} cells x "
          f"{args.pairs} pairs, {args.max_steps} steps ({time.perf_counter() - started:.0f} s): {changed} of {total} "
          f"pairs met at another step alone than in the grid ({differing_cells} of "
          f"{len(args.temperatures) * len(args.lengths)} cells differ); the resampled positions were the same")


if __name__ == "__main__":
    main()
