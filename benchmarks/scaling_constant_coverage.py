"""How often ``C(tau)`` and its extrapolation ``C_inf`` cover the 1-D Ising chain's exact ``n log n`` constant.

On the free Ising path (J = 1) maximally coupled Glauber pairs meet after ``C n log n (1 + o(1))`` steps with
``C = 1 / (1 - tanh(2J / tau))``. Each replicate is one run of the ``sweep-ising`` design (64 pairs per cell, n = 4,
8, 16, 32, starts alternating natural-random and random-random) on its own seed, through the project's own chains
and :func:`~mlm_dynamics.diagnostics.scaling.fit_scaling`, with the step budget raised so that no pair is censored
(a fit is only made when every pair met; a preset budget that censors would select the replicates). Per
temperature: the mean of ``C`` (the fit on the lengths used) and of ``C_inf`` (with the finite-size term ``D / n``),
the mean width of their intervals, and the fraction of replicates whose interval holds the exact constant (over the
replicates with a fit: none where the growth is confidently faster than ``n^2`` at these lengths).

Run: ``python benchmarks/scaling_constant_coverage.py [--replicates 100] [--write]``; prints a Markdown table, and
with ``--write`` stores it in ``docs/concepts/scaling-constant-table.md``, which ``docs/concepts/verdicts.md``
includes.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from mlm_dynamics.experiments.config import SweepConfig, load_config
from mlm_dynamics.experiments.sweep import run_sweep

TEMPERATURES = (4.0, 2.0, 1.4, 1.0)
TABLE = Path(__file__).resolve().parents[1] / "docs" / "concepts" / "scaling-constant-table.md"


def exact_constant(tau: float, coupling: float = 1.0) -> float:
    """``1 / (1 - tanh(2J / tau))``: the 1-D Ising chain's ``n log n`` constant."""
    return 1 / (1 - math.tanh(2 * coupling / tau))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=100)
    parser.add_argument("--write", action="store_true", help=f"store the table in {TABLE}")
    args = parser.parse_args()
    found: dict[float, list[tuple[float, ...]]] = {tau: [] for tau in TEMPERATURES}
    for seed in range(args.replicates):
        config = load_config(SweepConfig, "sweep-ising",
                             [f"grid.temperatures={list(TEMPERATURES)}", f"grid.seed={seed}", "grid.max_steps=40000",
                              "drift.enabled=false", "lag.enabled=false", "influence.enabled=false"])
        for tau, fit in run_sweep(config).analysis.fits.items():
            found[tau].append((fit.C, fit.C_low, fit.C_high, fit.C_inf, fit.C_inf_low, fit.C_inf_high))
    lines = [f"| tau | exact C | C: mean, interval width, coverage | C_inf: mean, interval width, coverage | "
             f"replicates fitted (of {args.replicates}) |", "|---|---|---|---|---|"]
    for tau in TEMPERATURES:
        exact = exact_constant(tau)
        values = np.array([row for row in found[tau] if all(math.isfinite(v) for v in row)]).reshape(-1, 6)
        if not len(values):
            lines.append(f"| {tau:g} | {exact:.2f} | no fit | no fit | 0 |")
            continue
        cells = []
        for start in (0, 3):
            estimate, low, high = values[:, start], values[:, start + 1], values[:, start + 2]
            cover = float(((low <= exact) & (exact <= high)).mean())
            cells.append(f"{estimate.mean():.2f}, {(high - low).mean():.2f}, {cover:.2f}")
        lines.append(f"| {tau:g} | {exact:.2f} | {cells[0]} | {cells[1]} | {len(values)} |")
    table = "\n".join(lines) + "\n"
    print(table)
    if args.write:
        TABLE.write_text(table)
        print(f"wrote {TABLE}")


if __name__ == "__main__":
    main()
