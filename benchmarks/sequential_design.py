"""What the sequential design saves: the forward rows the fixed design and the sequential one spend on the same grid
to reach their decisions, and the cells each decides at equal rows, measured in one run.

For each preset, on the natural-random pairs only (the pairs both sides are decided on) and a witness step:

(a) **fixed**: every cell runs ``N_K`` pairs (the sequential design's last look) to the budget, decided once at the
    end, each side at 95 % (one look);
(b) **sequential**: the first round of ``N_1`` pairs, then rounds only for the cells whose look failed on both sides,
    up to ``N_K``; a decided cell stops (each side at 95 % over its looks);
(c) **at equal rows**: the fixed design with ``--equal`` pairs per cell (default: the middle look), and the
    sequential one given exactly the rows that fixed design spent (``max_rows``): the cells each decides.

Printed per preset: the rows of (a) and (b) and their ratio, the cells each decided and on which side, and for (c)
the share of cells decided by each. Ratios are measured in this run; rows, not seconds, are the unit (the same on
any machine).

Usage: python benchmarks/sequential_design.py [--presets ising curie-weiss antiberty] [--looks 12 15 18 22 28 36]
AntiBERTy runs the real MLM, two cells of 16 residues (tau = 0.5 and 4) followed 120 steps: about 25 minutes on 2
cores with ``--looks 12 15 18 22``; the toy presets take a minute each.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from mlm_dynamics.experiments.config import SweepConfig, load_config
from mlm_dynamics.experiments.sweep import run_sweep

PRESETS: dict[str, tuple[str, list[str]]] = {
    "ising": ("sweep-ising", ["grid.temperatures=[0.35, 0.7, 1.4, 4.0]", "grid.lengths=[4, 8, 16]",
                              "grid.max_steps=2000", "grid.witness_steps=[200]"]),
    "curie-weiss": ("sweep-curie-weiss", ["grid.temperatures=[0.5, 0.7, 1.5, 4.0]", "grid.lengths=[4, 8, 12]",
                                          "grid.max_steps=3000", "grid.witness_steps=[300]"]),
    "antiberty": ("sweep-antiberty", ["grid.temperatures=[0.5, 4.0]", "grid.lengths=[16]", "grid.max_steps=120",
                                      "grid.witness_steps=[80]"]),
}
COMMON = ["grid.starts=[natural-random]", "drift.enabled=false", "lag.enabled=false", "influence.enabled=false",
          "rectangle.enabled=false", "checkpoint_every=null"]


def measure(preset: str, overrides: list[str]) -> dict[str, Any]:
    start = time.perf_counter()
    result = run_sweep(load_config(SweepConfig, preset, [*COMMON, *overrides]))
    verdicts = [cell.bracket.verdict for cell in result.cells if cell.bracket is not None]
    return {"rows": int(result.rows["pair_rows_spent"]), "seconds": time.perf_counter() - start,
            "slow": verdicts.count("slow"), "fast": verdicts.count("fast"), "cells": len(verdicts)}


def describe(name: str, row: dict[str, Any]) -> str:
    decided = row["slow"] + row["fast"]
    return (f"  {name:<34} {row['rows']:>9} rows  {decided:>2}/{row['cells']} decided ({row['slow']} slow, "
            f"{row['fast']} fast)  {row['seconds']:.0f} s")


def main() -> None:
    arguments = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    arguments.add_argument("--presets", nargs="+", default=["ising", "curie-weiss"], choices=list(PRESETS))
    arguments.add_argument("--looks", nargs="+", type=int, default=[12, 15, 18, 22, 28, 36])
    arguments.add_argument("--learn", type=int, default=4, help="learning pairs of the first round per cell")
    arguments.add_argument("--equal", type=int, default=None, help="tested pairs a cell of the fixed design of (c)")
    args = arguments.parse_args()
    first, last = args.looks[0] + args.learn, args.looks[-1] + args.learn
    middle = (args.looks[len(args.looks) // 2] if args.equal is None else args.equal) + args.learn
    later = [n + args.learn for n in args.looks[1:]]
    for name in args.presets:
        preset, overrides = PRESETS[name]
        learn = [f"grid.learn_pairs={args.learn}"]
        one_look = ["grid.looks=[]", "grid.max_rows=null"]
        fixed = measure(preset, [*overrides, *learn, *one_look, f"grid.pairs={last}"])
        sequential = measure(preset, [*overrides, *learn, "grid.max_rows=null", f"grid.pairs={first}",
                                      f"grid.looks={later}"])
        small = measure(preset, [*overrides, *learn, *one_look, f"grid.pairs={middle}"])
        equal = measure(preset, [*overrides, *learn, f"grid.pairs={first}", f"grid.looks={later}",
                                 f"grid.max_rows={small['rows']}"])
        print(f"{name} ({preset}; looks {args.looks} tested pairs + {args.learn} learning):")
        print(describe(f"(a) fixed, {last} pairs a cell", fixed))
        print(describe(f"(b) sequential, {first} to {last}", sequential))
        print(f"  rows (b) / (a): {sequential['rows'] / fixed['rows']:.2f}")
        print(describe(f"(c) fixed, {middle} pairs a cell", small))
        print(describe("(c) sequential at those rows", equal))
        share = [(row["slow"] + row["fast"]) / row["cells"] for row in (small, equal)]
        print(f"  cells decided at equal rows: fixed {share[0]:.0%}, sequential {share[1]:.0%}")


if __name__ == "__main__":
    main()
