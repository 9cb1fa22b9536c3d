"""Do tempering and trap-triggered interventions help stuck chains? Measured at equal forward budgets.

Metastable toy: an Ising chain of ``--sites`` spins (coupling ``--coupling``) at ``--temperature`` (low: two basins,
all-0 and all-1, and an exponentially slow escape). Every method gets the same number of forward rows per chain,
``--budget``: plain Glauber chains run ``budget`` steps; replica exchange with ``R`` replicas (exact mode, the toy's
energy, ladder ``--ladder``) runs ``budget / R`` steps and is read at its lowest replica; the interventions
(temperature bump x20 for 20 steps, a block move of all sites, a restart) run ``budget`` steps with a trap monitor.

Per method: basin switches per 1000 forward rows (the majority spin of the observed chain changing), the fraction of
chains that reached the other basin and the median forward rows until they did, and the total variation between the
final states and the exact law at ``--temperature`` (computed from the joint). Interventions do not preserve the law;
the TV column says what that costs.

Usage: python benchmarks/bench_tempering.py [--chains 400 --budget 4000]
"""

from __future__ import annotations

import argparse
import time

import torch

from mlm_dynamics import GlauberSampler, PairwiseMRFDenoiser
from mlm_dynamics.diagnostics.tempering import tempering_summary
from mlm_dynamics.embedders import FunctionEmbedder
from mlm_dynamics.sampling import ReplicaExchange
from mlm_dynamics.sampling.exact import state_index
from mlm_dynamics.tracking import ChainMonitor, TrapIntervention, TrapTracker


class Tally:
    """Basin switches and first arrivals in the other basin, from the start's basin (all 0)."""

    def __init__(self, chains: int, sites: int) -> None:
        self.sites = sites
        self.basin = torch.zeros(chains, dtype=torch.long)
        self.switches = 0
        self.arrived = torch.full((chains,), -1)

    def update(self, tokens: torch.Tensor, rows: int) -> None:
        ones = tokens.sum(1)
        basin = torch.where(ones * 4 >= 3 * self.sites, 1, torch.where(ones * 4 <= self.sites, 0, self.basin))
        self.switches += int((basin != self.basin).sum())
        self.arrived[(basin == 1) & (self.arrived < 0)] = rows
        self.basin = basin


def tv_to_exact(model: PairwiseMRFDenoiser, tokens: torch.Tensor, temperature: float) -> float:
    log_joint = model.log_joint() / temperature
    exact = (log_joint - log_joint.logsumexp(0)).exp()
    empirical = torch.bincount(state_index(tokens, 2), minlength=len(exact)).double() / len(tokens)
    return float(0.5 * (empirical - exact).abs().sum())


def row(name: str, tally: Tally, final: torch.Tensor, model: PairwiseMRFDenoiser, args: argparse.Namespace,
        seconds: float) -> str:
    reached = tally.arrived >= 0
    median = f"{float(tally.arrived[reached].double().median()):8.0f}" if reached.any() else "       -"
    rate = 1000 * tally.switches / (len(final) * args.budget)
    return (f"{name:>28} | {rate:9.3f} | {float(reached.double().mean()):7.2f} | {median} | "
            f"{tv_to_exact(model, final, args.temperature):6.3f} | {seconds:5.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sites", type=int, default=8)
    parser.add_argument("--coupling", type=float, default=1.0)
    parser.add_argument("--temperature", type=float, default=0.4)
    parser.add_argument("--ladder", type=float, nargs="+", default=[0.4, 0.7, 1.2, 2.0])
    parser.add_argument("--chains", type=int, default=400)
    parser.add_argument("--budget", type=int, default=4000, help="forward rows per chain")
    parser.add_argument("--every", type=int, default=10, help="observation interval (steps)")
    args = parser.parse_args()
    model = PairwiseMRFDenoiser.ising_chain(args.sites, args.coupling)
    start = torch.zeros(args.chains, args.sites, dtype=torch.long)
    print(f"Ising chain n={args.sites}, J={args.coupling}, tau={args.temperature}; {args.chains} chains, "
          f"{args.budget} forward rows each")
    print(f"{'method':>28} | switches/1k | reached | median rows | TV     | s")

    started = time.perf_counter()
    sampler = GlauberSampler(model, args.temperature)
    state = sampler.init_state(start, generator=0)
    tally = Tally(args.chains, args.sites)
    for step in range(1, args.budget + 1):
        sampler.step(state)
        if step % args.every == 0:
            tally.update(state.tokens, step)
    print(row("plain Glauber", tally, state.tokens, model, args, time.perf_counter() - started))

    started = time.perf_counter()
    exchange = ReplicaExchange(model, args.ladder, energy=model.energy, swap_every=2)
    tempered = exchange.init_state(start, generator=0)
    tally = Tally(args.chains, args.sites)
    replicas = len(args.ladder)
    for step in range(1, args.budget // replicas + 1):
        exchange.step(tempered)
        if step % max(1, args.every // replicas) == 0:
            tally.update(exchange.replica(tempered, 0), step * replicas)
    label = f"replica exchange (R={replicas})"
    print(row(label, tally, exchange.replica(tempered, 0), model, args, time.perf_counter() - started)
          + f"  swap acceptance min {tempering_summary(tempered)['swap_acceptance_min']:.2f}")

    for kind in ("bump", "block", "restart"):
        started = time.perf_counter()
        sampler = GlauberSampler(model, args.temperature)
        state = sampler.init_state(start, generator=0)
        monitor = ChainMonitor(FunctionEmbedder(lambda t: torch.nn.functional.one_hot(t, 2).float().mean(1)),
                               every=args.every, traps=TrapTracker(radius=0.02, dwell=5 * args.every))
        monitor.start(state)
        intervention = TrapIntervention(monitor, sampler, kind, duration=20, factor=20.0, block=args.sites)
        tally = Tally(args.chains, args.sites)
        for step in range(1, args.budget + 1):
            intervention.before_step(state)
            sampler.step(state)
            if monitor.observe(state) is not None:
                intervention.after_observe(state)
                tally.update(state.tokens, step)
        summary = intervention.summary()
        print(row(f"intervention: {kind}", tally, state.tokens, model, args, time.perf_counter() - started)
              + f"  {summary['interventions']:.0f} interventions, {summary['escaped_fraction']:.2f} escaped")


if __name__ == "__main__":
    main()
