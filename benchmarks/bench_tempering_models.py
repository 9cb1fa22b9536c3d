"""Do tempering and trap-triggered interventions help a real masked LM's stuck chains? Equal forward budgets.

The pretrained AntiBERTy (``--model antiberty``: the CDR-H3 window of the bundled heavy chain, 16 sites) or the
bundled English MLM (``--model english``: every word of a neutral sentence) at a low temperature ``--temperature``.
Every method gets the same number of forward rows, ``--budget`` per chain, counted at the model (every row the
sampler, the swap energies and the interventions' margins ask for):

- plain Glauber chains;
- replica exchange over ``--ladder`` in heuristic mode (raw Glauber replicas, swaps by the pseudo-log-likelihood
  every ``n`` steps, which costs ``n`` rows per replica per swap, about one row per replica and step); observed at its
  lowest temperature. (Exact mode, MH-corrected towards ``exp(-PLL / tau)``, costs ``n + 1`` rows per update and is
  not run here.) It preserves no known law: the conditionals are incompatible;
- trap-triggered interventions on plain chains: a temperature bump (x4 for 20 steps), a block move of the 4
  lowest-margin sites, a restart from uniformly random tokens on the sites.

Observed every ``--every`` forward rows per chain, in the model's own hidden states pooled over the sites, with the
radii of the run job (fractions of the distance from the start to random fillings): drift, traps (``--dwell`` rows
within 0.15 scale), distinct basins (trap anchors more than 0.3 scale apart), escape (dwell) times, and the bulk ESS
of the drift and Hamming projections across chains per 1000 forward rows. Meeting times of coupled plain chains at
each ladder temperature (censored at the budget) say how fast each temperature forgets its start; the coupling of a
tempered ensemble or of an intervened chain is not defined here.

Usage: python benchmarks/bench_tempering_models.py [--model antiberty --chains 8 --budget 1500 --out runs/bench]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from torch import Tensor

from mlm_dynamics import GlauberSampler
from mlm_dynamics.diagnostics import MeetingTimes, ess
from mlm_dynamics.diagnostics.tempering import tempering_summary
from mlm_dynamics.embedders import Embedder, HiddenStateEmbedder
from mlm_dynamics.experiments.common import start_tokens, window_sites
from mlm_dynamics.experiments.semantics import NEUTRAL_STARTS
from mlm_dynamics.models import Denoiser, MaskedLMDenoiser
from mlm_dynamics.models.pretrained import load_antiberty, load_english_mlm
from mlm_dynamics.report.figures import ladder_survival
from mlm_dynamics.report.html import figure_png
from mlm_dynamics.sampling import CoupledGlauberChains, ReplicaExchange
from mlm_dynamics.sampling.coupling import randomize_sites
from mlm_dynamics.tracking import ChainMonitor, TrapIntervention, TrapTracker
from mlm_dynamics.tracking.drift import random_fill_distances, random_fill_scale


class CountingDenoiser(Denoiser):
    """``inner`` with a count of the forward rows asked of it."""

    def __init__(self, inner: Denoiser) -> None:
        super().__init__()
        self.inner, self.vocab, self.rows = inner, inner.vocab, 0

    def _masked_logits(self, tokens: Tensor, positions: Tensor) -> Tensor:
        self.rows += tokens.shape[0]
        return self.inner.conditional_logits(tokens, positions)


class Observer:
    """A trap-detecting :class:`ChainMonitor` on the clock of forward rows per chain."""

    def __init__(self, embedder: Embedder, scale: float, start: Tensor,
                 args: argparse.Namespace) -> None:
        self.monitor = ChainMonitor(embedder, every=1, thresholds=[0.5 * scale],
                                    traps=TrapTracker(radius=0.15 * scale, dwell=args.dwell,
                                                      basin_radius=0.3 * scale))
        self.monitor.start(start, step=0)
        self.every, self.next = args.every, args.every
        self.curve: list[tuple[int, float]] = []

    def due(self, clock: int) -> bool:
        return clock >= self.next

    def observe(self, tokens: Tensor, clock: int) -> None:
        metrics = self.monitor.observe(tokens, step=clock)
        assert metrics is not None
        self.curve.append((clock, metrics["chains/drift_mean"]))
        self.next = clock - clock % self.every + self.every

    def result(self, rows: int) -> dict[str, Any]:
        traps = self.monitor.traps
        assert traps is not None
        dwell = traps.dwell_times(include_open=True)
        closed = [e for e in traps.events if e.exit_step is not None]
        out: dict[str, Any] = {"forward_rows": rows, "basins": len(traps.basin_visits),
                               "recurrent_basins": len(traps.recurrent_basins), "traps": len(traps.events),
                               "escaped": len(closed),
                               "dwell_median": float(dwell.median()) if dwell.numel() else float("nan"),
                               "drift_final": self.curve[-1][1], "drift_curve": self.curve}
        for name, values in self.monitor.projections.items():
            out[f"ess_{name}_per_1k_rows"] = 1000 * float(ess(torch.stack(values, 1))) / rows
        return out


def load(args: argparse.Namespace) -> tuple[MaskedLMDenoiser, Tensor, Tensor]:
    if args.model == "antiberty":
        denoiser, codec = load_antiberty()
        tokens = start_tokens(None, args.chains, codec)
        return denoiser, tokens, window_sites(denoiser, tokens, [93, 109])
    english, text_codec = load_english_mlm()
    tokens = start_tokens([NEUTRAL_STARTS[0]], args.chains, text_codec)
    return english, tokens, english.resampleable_sites(tokens)


def run_plain(model: CountingDenoiser, tokens: Tensor, sites: Tensor, make_observer: Callable[[], Observer],
              args: argparse.Namespace, kind: str | None = None) -> dict[str, Any]:
    """Plain chains, or (``kind``) plain chains under a trap-triggered intervention."""
    model.rows = 0
    sampler = GlauberSampler(model, args.temperature)
    state = sampler.init_state(tokens, generator=args.seed, sites=sites)
    observer = make_observer()
    intervention = None
    if kind is not None:
        intervention = TrapIntervention(observer.monitor, sampler, kind, duration=20, factor=4.0, block=4,
                                        generator=args.seed)
    while model.rows < args.budget * args.chains:
        if intervention is not None:
            intervention.before_step(state)
        sampler.step(state)
        clock = model.rows // args.chains
        if observer.due(clock):
            observer.observe(state.tokens, clock)
            if intervention is not None:
                intervention.after_observe(state)
    out = observer.result(model.rows)
    if intervention is not None:
        out |= intervention.summary()
    return out


def run_tempering(model: CountingDenoiser, tokens: Tensor, sites: Tensor, make_observer: Callable[[], Observer],
                  args: argparse.Namespace) -> dict[str, Any]:
    model.rows = 0
    exchange = ReplicaExchange(model, args.ladder, mode="heuristic", swap_every=sites.shape[1])
    state = exchange.init_state(tokens, generator=args.seed, sites=sites)
    observer = make_observer()
    while model.rows < args.budget * args.chains:
        exchange.step(state)
        clock = model.rows // args.chains
        if observer.due(clock):
            observer.observe(exchange.replica(state, 0), clock)
    summary = tempering_summary(state)
    return observer.result(model.rows) | {k: summary[k] for k in ("swap_acceptance_min", "round_trips")}


def meeting_times(model: CountingDenoiser, tokens: Tensor, sites: Tensor, args: argparse.Namespace
                  ) -> dict[float, MeetingTimes]:
    """Coupled plain chains, ``--pairs`` per ladder temperature: the start against random tokens on the sites."""
    pairs = args.pairs
    x0 = tokens[:1].expand(pairs * len(args.ladder), -1).clone()
    pair_sites = sites[:1].expand(len(x0), -1)
    y0 = randomize_sites(model, x0, pair_sites, torch.Generator().manual_seed(args.seed + 1))
    ladder = torch.tensor(args.ladder, dtype=torch.float64).repeat_interleave(pairs)
    chains = CoupledGlauberChains(GlauberSampler(model, ladder), freeze_met=True)
    state = chains.init_state(x0, y0, generator=args.seed, sites=pair_sites)
    pooled = chains.run(state, args.budget)
    return {tau: MeetingTimes(times=pooled.times[k * pairs:(k + 1) * pairs],
                         censored=pooled.censored[k * pairs:(k + 1) * pairs], max_steps=pooled.max_steps)
            for k, tau in enumerate(args.ladder)}


def drift_figure(results: dict[str, dict[str, Any]], scale: float, args: argparse.Namespace) -> Figure:
    """Mean drift (in scales) of the observed chains against forward rows per chain, one line per method."""
    figure = Figure(figsize=(6.4, 4.2), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for name, result in results.items():
        rows, drift = zip(*result["drift_curve"], strict=True)
        axes.plot(rows, [d / scale for d in drift], label=name)
    axes.set(xlabel="forward rows per chain", ylabel="mean drift from the start (scales)",
             title=f"{args.model}, tau = {args.temperature:g}: equal forward budgets")
    axes.legend(fontsize="small")
    return figure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=("antiberty", "english"), default="antiberty")
    parser.add_argument("--temperature", type=float, default=0.5)
    parser.add_argument("--ladder", type=float, nargs="+", default=[0.5, 0.8, 1.3, 2.0])
    parser.add_argument("--chains", type=int, default=8)
    parser.add_argument("--budget", type=int, default=1500, help="forward rows per chain")
    parser.add_argument("--every", type=int, default=10, help="observation interval (forward rows per chain)")
    parser.add_argument("--dwell", type=int, default=60, help="rows within the trap radius that make a trap")
    parser.add_argument("--pairs", type=int, default=4, help="coupled pairs per ladder temperature")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="write results.json and figures here")
    args = parser.parse_args()
    if args.ladder[0] != args.temperature:
        parser.error(f"--ladder must start at --temperature {args.temperature}, got {args.ladder}")
    denoiser, tokens, sites = load(args)
    model = CountingDenoiser(denoiser)
    mask = torch.zeros_like(tokens, dtype=torch.bool).scatter(1, sites, True)
    hidden = HiddenStateEmbedder(denoiser)

    def embedder(tokens: Tensor) -> Tensor:
        return hidden(tokens, mask)

    scale = float(random_fill_scale(random_fill_distances(embedder, denoiser, tokens, sites, samples=16,
                                                          generator=torch.Generator().manual_seed(args.seed + 2))))
    print(f"{args.model}: {sites.shape[1]} sites, tau={args.temperature}, {args.chains} chains, {args.budget} forward "
          f"rows each; drift scale {scale:.3f}")
    print(f"{'method':>30} | basins | traps | escaped | dwell med | drift | ESS drift/1k | ESS hamming/1k | s")

    def make_observer() -> Observer:
        return Observer(embedder, scale, tokens, args)

    results: dict[str, dict[str, Any]] = {}
    methods: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("plain Glauber", lambda: run_plain(model, tokens, sites, make_observer, args)),
        (f"replica exchange (R={len(args.ladder)})", lambda: run_tempering(model, tokens, sites, make_observer, args)),
        *[(f"intervention: {kind}", lambda kind=kind: run_plain(model, tokens, sites, make_observer, args, kind))
          for kind in ("bump", "block", "restart")]]
    for name, method in methods:
        started = time.perf_counter()
        result = method()
        result["seconds"] = round(time.perf_counter() - started, 1)
        results[name] = result
        extra = "".join(f"  {k} {result[k]:.2f}" for k in ("swap_acceptance_min", "round_trips", "interventions",
                                                             "escaped_fraction") if k in result)
        print(f"{name:>30} | {result['basins']:6d} | {result['traps']:5d} | {result['escaped']:7d} | "
              f"{result['dwell_median']:9.0f} | {result['drift_final'] / scale:5.2f} | "
              f"{result['ess_drift_per_1k_rows']:12.3f} | {result['ess_hamming_per_1k_rows']:14.3f} | "
              f"{result['seconds']:5.1f}{extra}")
    times = meeting_times(model, tokens, sites, args)
    print("coupled plain pairs, median meeting time in steps (the budget where censored): " + ", ".join(
        f"tau={tau:g}: {t.summary()['meeting_time_median']:.0f} ({int(t.censored.sum())}/{len(t.times)} censored)"
        for tau, t in times.items()))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(
            {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}, "scale": scale,
             "methods": results, "meeting_times": {str(tau): t.summary() for tau, t in times.items()}}, indent=1))
        (args.out / "meeting_times.png").write_bytes(figure_png(ladder_survival(times)))
        (args.out / "drift.png").write_bytes(figure_png(drift_figure(results, scale, args)))
        print(f"wrote {args.out / 'results.json'}")


if __name__ == "__main__":
    main()
