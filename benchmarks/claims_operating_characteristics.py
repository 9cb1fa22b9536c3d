"""Operating characteristics of the claims' rules on models whose truth is known: how often each says what.

- ``fast_mixing`` on synthetic meeting times ``law(n) * G`` (``G`` exponential, as escape times over a barrier), and
  the slow-side rules ``metastable`` and ``faster_than_n3`` on synthetic chains whose pairs separate until such an
  escape time and meet then (:func:`escape_evidence`: a witness certifies ``t_mix(1/4)`` from below at a ladder of
  horizons, the meeting times bound it from above), at the shipped designs and a long one, for laws of known growth:
  ``n log n``, ``n^1.5``, ``n^2``, ``n^4``, ``n^7`` and two wells with escape ``e^{r n} n log n`` for several ``r``;
  each cell gives how often the rule says holds and does not hold over independent replicates (the design's power
  and size, not one sample's bootstrap). Beside them, ``blind``: the same slow meeting times with a witness that
  separates nothing (a fast chain whose coupling meets slowly), which no slow-side rule may call slow;
- every growth claim on the 1-D Ising chain (no transition) and the Curie-Weiss model (transition at tau = J), from
  the shipped presets: the verdict of one run.

Run: ``python benchmarks/claims_operating_characteristics.py [--replicates 200] [--write]``; prints a Markdown table,
and with ``--write`` stores it in ``docs/concepts/verdicts-table.md``, which ``docs/concepts/verdicts.md`` includes.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import torch

from mlm_dynamics.diagnostics.claims import FAILS, HOLDS, Evidence, fast_mixing, faster_than_cubic, metastability
from mlm_dynamics.diagnostics.meeting import MeetingTimes
from mlm_dynamics.diagnostics.witness import PairedWitness
from mlm_dynamics.experiments.config import SweepConfig, load_config
from mlm_dynamics.experiments.sweep import run_sweep

DESIGNS = {"sweep-ising (64 pairs, n = 4-32)": (64, (4, 8, 16, 32)),
           "sweep-curie-weiss (64 pairs, n = 4-12)": (64, (4, 8, 12)),
           "64 pairs, n = 4-128": (64, (4, 8, 16, 32, 64, 128))}
LAWS = {"n log n": lambda n: 20 * n * math.log(n), "n^1.5": lambda n: 20 * n**1.5, "n^2": lambda n: 5.0 * n * n,
        "n^4": lambda n: 0.1 * n**4, "n^7": lambda n: 0.01 * n**7,
        **{f"e^({r} n) n log n": (lambda n, r=r: 20 * math.exp(r * n) * n * math.log(n)) for r in (0.04, 0.2, 0.57)}}
RULES = {"fast_mixing": fast_mixing, "metastable": metastability, "faster_than_n3": faster_than_cubic}
SLOW_SIDE = ("metastable", "faster_than_n3")
HORIZONS = [round(10 ** (k / 2)) for k in range(2, 15)]  # 10, 32, 100, ..., 10^7: the witness's ladder
BUDGET = 10**8
TABLE = Path(__file__).resolve().parents[1] / "docs" / "concepts" / "verdicts-table.md"


def escape_evidence(law, design, generator: np.random.Generator, *, horizons=HORIZONS, budget: int = BUDGET,
                    blind: bool = False) -> Evidence:
    """A chain whose pairs separate until an escape time ``E ~ law(n) Exp(1)`` and meet then, per cell: the meeting
    times (censored at ``budget``), the same pairs as the start pairs, and a witness that separates pair ``i`` at
    horizon ``h`` exactly while ``E_i > h`` (so ``TV(a P^h, b P^h) = P(E > h)``), or none (``blind``)."""
    pairs, lengths = design
    times, witness = {}, {}
    steps = torch.tensor(horizons)
    for n in lengths:
        escape = torch.from_numpy(law(n) * generator.exponential(1.0, pairs)).ceil()
        times[(4.0, n)] = MeetingTimes(escape.clamp_max(budget), escape > budget, max_steps=budget)
        separated = torch.zeros(len(horizons), pairs, dtype=torch.float64) if blind else \
            (escape[None] > steps[:, None]).double()
        witness[(4.0, n)] = PairedWitness(steps, separated, torch.zeros(len(horizons), pairs, dtype=torch.float64))
    return Evidence(times=times, witness=witness, start_pairs=times, power_resamples=0)


def rates(rule, law, design, replicates: int, seed: int = 0, blind: bool = False) -> tuple[float, float]:
    """``(P(holds), P(does not hold))`` over independent replicates of the design: meeting times alone for
    ``fast_mixing``, :func:`escape_evidence` for the slow-side rules."""
    pairs, lengths = design
    generator = np.random.default_rng(seed)
    found = []
    for _ in range(replicates):
        if rule in (metastability, faster_than_cubic):
            evidence = escape_evidence(law, design, generator, blind=blind)
        else:
            evidence = Evidence(times={(4.0, n): MeetingTimes(torch.from_numpy(law(n) * generator.gamma(1.0, 1.0,
                                                                                                      pairs)),
                                                              torch.zeros(pairs, dtype=torch.bool))
                                       for n in lengths}, power_resamples=0)
        found.append(rule(evidence).verdict)
    return found.count(HOLDS) / replicates, found.count(FAILS) / replicates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=200)
    parser.add_argument("--write", action="store_true", help=f"store the table in {TABLE}")
    args = parser.parse_args()
    lines = [f"| rule | design | law | P(holds), P(does not hold) over {args.replicates} replicates |",
             "|---|---|---|---|"]
    for rule_name, rule in RULES.items():
        for design_name, design in DESIGNS.items():
            for law_name, law in LAWS.items():
                if rule_name == "fast_mixing" and law(design[1][-1]) > 1e12:
                    continue  # an exponential law far beyond any budget at n = 128
                held, failed = rates(rule, law, design, args.replicates)
                lines.append(f"| {rule_name} | {design_name} | {law_name} | {held:.3f}, {failed:.3f} |")
                print(lines[-1], flush=True)
                if rule_name in SLOW_SIDE and law_name in ("n^7", "e^(0.57 n) n log n"):
                    held, failed = rates(rule, law, design, args.replicates, blind=True)
                    lines.append(f"| {rule_name} | {design_name} | {law_name}, blind witness | {held:.3f}, "
                                 f"{failed:.3f} |")
                    print(lines[-1], flush=True)
    lines += ["", "| rule | preset | truth | verdict of one run |", "|---|---|---|---|"]
    for preset, truth in (("sweep-ising", "no transition"), ("sweep-curie-weiss", "transition at tau = J")):
        result = run_sweep(load_config(SweepConfig, preset, ["checkpoint_every=null"]))
        for claim in result.claims.claims:
            if claim.name in RULES or claim.name == "boundary_moves_up":
                lines.append(f"| {claim.name} | {preset} | {truth} | {claim.verdict} |")
                print(lines[-1], flush=True)
    if args.write:
        TABLE.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
