"""Power of the witnesses of `mixing_lower_bound` on real MLMs: how often each certifies t_mix(1/4) > t.

For each model and temperature, `--pairs` maximally coupled pairs run `--steps` steps from the natural start (chain
X: the bundled heavy chain's 16 residues around CDR-H3 for AntiBERTy, a neutral English sentence's words for the
English MLM) and from an independent uniformly random filling of the same sites (chain Y). Their states at
`--times` are tested with each witness, the bound simultaneous over the times at 95 %:

  nearer_start              1[Hamming(x, start) < Hamming(x, its pair's random filling)]
  nearer_start_embedding    the same in the model's hidden-state space (pooled over the sites)
  agreement                 share of sites equal to the start (betting limits)
  within_radius             inside the start's basin: cosine distance <= half the start-to-random-filling scale
  energy_below              PLL energy below the midpoint of the start's and the random fillings' mean energy
  learned                   the learned witness (agreement profile) fitted on half the pairs, tested on the rest
  token_profile             the token-profile classifier, fitted and tested the same way

Every witness is fixed from the starts and from random fillings drawn apart from the tested chains (the scale and
the energy threshold), never from the tested states. Power: the pairs are cut into disjoint groups of `--group`
pairs, and each group's bound is computed alone; a group certifies when its `mixing_time_exceeds` is the last
time. The table gives, per witness, certified groups / groups, unpaired and paired, and the bound on all pairs.

Usage:
    python benchmarks/witness_power.py --model antiberty --pairs 32 --group 16      # about 12 minutes on 2 cores
    python benchmarks/witness_power.py --model english --pairs 32 --group 16
    python benchmarks/witness_power.py --smoke
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from mlm_dynamics import GlauberSampler, mixing_lower_bound
from mlm_dynamics.diagnostics.witness import (
    MixingLowerBound,
    Witness,
    agreement,
    energy_below,
    nearer_start,
    token_profile,
    within_radius,
    witness_bound,
)
from mlm_dynamics.embedders.base import HiddenStateEmbedder, cosine_distance
from mlm_dynamics.experiments.semantics import NEUTRAL_STARTS
from mlm_dynamics.models.pretrained import EXAMPLE_ANTIBODIES, load_antiberty, load_english_mlm
from mlm_dynamics.sampling.coupling import CoupledGlauberChains, randomize_sites
from mlm_dynamics.sampling.energy import PseudoLogLikelihoodEnergy


def setup(model: str, smoke: bool):
    if model == "antiberty":
        denoiser, codec = load_antiberty(num_layers=1 if smoke else None)
        start = codec.batch_encode([EXAMPLE_ANTIBODIES[0]])
        sites = denoiser.resampleable_sites(start)[:, 93:109]
    else:
        denoiser, codec = load_english_mlm()
        start = torch.tensor([codec.encode(NEUTRAL_STARTS[0])])
        sites = denoiser.resampleable_sites(start)
    return denoiser, start, sites


def witnesses(denoiser, start, sites, generator) -> list[Witness]:
    mask = torch.zeros_like(start, dtype=torch.bool)
    mask[0, sites[0]] = True
    hidden = HiddenStateEmbedder(denoiser)

    def embed(tokens):
        return hidden(tokens, mask.expand(tokens.shape[0], -1))

    reference = randomize_sites(denoiser, start.expand(16, -1), sites.expand(16, -1), generator)  # not tested
    scale = float(cosine_distance(embed(reference), embed(start)).median())
    energy = PseudoLogLikelihoodEnergy(denoiser, sites=sites[0])
    threshold = (float(energy(start)[0]) + float(energy(reference).mean())) / 2
    stated = [agreement(start[0], sites=sites[0]), within_radius(embed, embed(start)[0], scale / 2),
              energy_below(energy, threshold)]
    return stated, embed


def bound(xa: torch.Tensor, xb: torch.Tensor, values: list[torch.Tensor] | None, witness: Witness | None,
          times: list[int], rows: slice, paired: bool, name: str) -> MixingLowerBound:
    """The bound on ``rows`` of the pairs: from the witness values computed once, or a witness learned on their
    first half (the token profile for ``name`` ``token_profile``)."""
    if name == "token_profile":
        return token_profile_bound(xa, xb, times, rows, paired)
    if values is None or witness is None:
        return mixing_lower_bound(xa[:, rows], xb[:, rows], times=times, paired=paired)
    return witness_bound(values[0][..., rows], values[1][..., rows], times=times, binary=[witness.binary],
                         names=[witness.name], paired=paired)


def token_profile_bound(xa: torch.Tensor, xb: torch.Tensor, times: list[int], rows: slice,
                        paired: bool) -> MixingLowerBound:
    """The bound on ``rows`` of the pairs with the token profile fitted on their first half, tested on the rest."""
    a, b = xa[:, rows], xb[:, rows]
    half = a.shape[1] // 2
    fitted = [token_profile(a[t, :half], b[t, :half]) for t in range(len(times))]
    values = [torch.stack([f(side[t, half:]) for t, f in enumerate(fitted)])[:, None] for side in (a, b)]
    return witness_bound(values[0], values[1], times=times, binary=[True], names=["token_profile"], paired=paired,
                         learned=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=["antiberty", "english"], default="antiberty")
    parser.add_argument("--temperatures", default="0.5,1")
    parser.add_argument("--pairs", type=int, default=32)
    parser.add_argument("--group", type=int, default=16)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--times", default="50,100,200")
    parser.add_argument("--out", type=Path, default=None, help="write the table's numbers as JSON here")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.pairs, args.group, args.steps, args.times, args.temperatures = 8, 4, 8, "4,8", "1"
    times = [int(t) for t in args.times.split(",")]
    torch.set_num_threads(max(torch.get_num_threads(), 1))
    denoiser, start, sites = setup(args.model, args.smoke)
    generator = torch.Generator().manual_seed(0)
    stated, embed = witnesses(denoiser, start, sites, generator)
    results = []
    for tau in [float(t) for t in args.temperatures.split(",")]:
        began = time.perf_counter()
        x0 = start.expand(args.pairs, -1).clone()
        row_sites = sites.expand(args.pairs, -1)
        y0 = randomize_sites(denoiser, x0, row_sites, generator)
        pairs = CoupledGlauberChains(GlauberSampler(denoiser, tau))
        state = pairs.init_state(x0, y0, generator=torch.Generator().manual_seed(int(tau * 1000)), sites=row_sites)
        xs, ys = [], []
        for target in times:
            while state.x.step < target:
                pairs.step(state)
            xs.append(state.x.tokens.clone())
            ys.append(state.y.clone())
        xa, xb = torch.stack(xs), torch.stack(ys)
        seconds = time.perf_counter() - began
        family: list[tuple[str, Witness | None]] = [("nearer_start", nearer_start(x0, y0)),
                                                     ("nearer_start_embedding", nearer_start(x0, y0, embed=embed)),
                                                     *((w.name, w) for w in stated), ("learned", None),
                                                     ("token_profile", None)]
        for name, witness in family:
            # each witness once on every state (row-aligned witnesses restrict to a group by slicing its rows)
            values = None if witness is None else [torch.stack([witness(s) for s in side])[:, None]
                                                   for side in (xa, xb)]
            row = {"model": args.model, "temperature": tau, "witness": name, "pairs": args.pairs,
                   "chain_seconds": round(seconds, 1)}
            for paired in (False, True):
                groups = range(0, args.pairs - args.group + 1, args.group)
                certified = sum(bound(xa, xb, values, witness, times, slice(g, g + args.group), paired, name)
                                .mixing_time_exceeds == times[-1] for g in groups)
                whole = bound(xa, xb, values, witness, times, slice(None), paired, name)
                key = "paired" if paired else "unpaired"
                row[f"{key}_certified_groups"] = f"{certified}/{len(groups)}"
                row[f"{key}_tv_lower"] = [round(float(v), 3) for v in whole.tv_lower]
            row["gap"] = [round(float(v), 3) for v in whole.gap]
            results.append(row)
            print(json.dumps(row), flush=True)
    print(f"\n| model | tau | witness | groups of {args.group} certified (unpaired / paired) | tv_lower at "
          f"t = {times} on {args.pairs} pairs (unpaired) | observed gap |")
    print("|---|---|---|---|---|---|")
    for row in results:
        print(f"| {row['model']} | {row['temperature']:g} | {row['witness']} | {row['unpaired_certified_groups']} / "
              f"{row['paired_certified_groups']} | {row['unpaired_tv_lower']} | {row['gap']} |")
    if args.out is not None:  # docs/data/witness-power-*.json: docs/generate.py renders the table from it
        command = "python benchmarks/witness_power.py " + " ".join(sys.argv[1:])
        report = {"environment": {"command": command}, "witness_power": results}
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
