"""Operating characteristics of the claims' rules on models whose truth is known: how often each says "holds".

- ``fast_mixing`` on synthetic meeting times ``law(n) * G`` (``G`` Gamma with mean 1 and coefficient of variation
  ``spread``) at the shipped designs, for ``n log n`` growth (the claim true), ``n log n`` with a negative ``O(n)``
  term like the 1-D Ising chain's, and ``n^2`` (false);
- ``metastable`` and ``boundary_moves_up`` on the 1-D Ising chain (no transition: false) and the Curie-Weiss model
  (transition at tau = J: true), from the shipped presets, with the plug-in power of each verdict.

Run: ``python benchmarks/claims_operating_characteristics.py [--replicates 200] [--write]``; prints a Markdown table,
and with ``--write`` stores it in ``docs/concepts/verdicts-table.md``, which ``docs/concepts/verdicts.md`` includes.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import torch

from mlm_dynamics.diagnostics.claims import HOLDS, Evidence, fast_mixing
from mlm_dynamics.diagnostics.meeting import MeetingTimes
from mlm_dynamics.experiments.config import SweepConfig, load_config
from mlm_dynamics.experiments.sweep import run_sweep

DESIGNS = {"sweep-ising (64 pairs, n = 4-32)": (64, (4, 8, 16, 32)),
           "sweep-antiberty (4 pairs, n = 4-16)": (4, (4, 8, 16)),
           "32 pairs, n = 4-16": (32, (4, 8, 16))}
LAWS = {"n log n (true)": lambda n: 2.0 * n * math.log(n),
        "n (2 log n - 1) (true)": lambda n: n * (2.0 * math.log(n) - 1.0),
        "n^2 (false)": lambda n: 0.5 * n * n}


def holds_rate(law, design, spread: float, replicates: int, seed: int = 0) -> float:
    pairs, lengths = design
    shape = 1 / spread**2
    generator = np.random.default_rng(seed)
    count = 0
    for _ in range(replicates):
        times = {(4.0, n): MeetingTimes(torch.from_numpy(law(n) * generator.gamma(shape, 1 / shape, pairs)),
                                        torch.zeros(pairs, dtype=torch.bool)) for n in lengths}
        count += fast_mixing(Evidence(times=times, power_resamples=0)).verdict == HOLDS
    return count / replicates


TABLE = Path(__file__).resolve().parents[1] / "docs" / "concepts" / "verdicts-table.md"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=200)
    parser.add_argument("--write", action="store_true", help=f"store the table in {TABLE}")
    args = parser.parse_args()
    lines = [f"| rule | design | truth | P(holds) over {args.replicates} replicates, or the verdict |",
             "|---|---|---|---|"]
    for design_name, design in DESIGNS.items():
        for law_name, law in LAWS.items():
            rates = ", ".join(f"{holds_rate(law, design, spread, args.replicates):.2f} (CV {spread})"
                              for spread in (0.4, 0.8))
            lines.append(f"| fast_mixing | {design_name} | {law_name} | {rates} |")
            print(lines[-1], flush=True)
    for preset, truth in (("sweep-ising", "no transition"), ("sweep-curie-weiss", "transition at tau = J")):
        result = run_sweep(load_config(SweepConfig, preset, ["checkpoint_every=null"]))
        for claim in result.claims.claims:
            if claim.name in ("metastable", "boundary_moves_up", "fast_mixing"):
                lines.append(f"| {claim.name} | {preset} | {truth} | {claim.verdict} (plug-in power "
                             f"{claim.power:.2f}) |")
                print(lines[-1], flush=True)
    if args.write:
        TABLE.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
