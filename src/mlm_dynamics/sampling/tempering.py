"""Replica exchange (parallel tempering) over a temperature ladder, all replicas in one forward pass per step.

``R`` temperatures ``tau_0 < ... < tau_{R-1}`` and ``C`` chains each: rows ``r C + c``. Every step advances every
row by one Glauber update at its row's temperature; every ``swap_every`` steps, adjacent replicas ``(r, r + 1)`` of
each chain (even pairs and odd pairs in turn) propose to exchange their states, accepted with probability

    min(1, exp((1 / tau_r - 1 / tau_{r+1}) (E(x_r) - E(x_{r+1})))).

- ``mode="exact"``: each replica is Metropolis-Hastings corrected towards ``exp(-E / tau)`` with an energy ``E`` (a
  toy model's exact energy, or :class:`PseudoLogLikelihoodEnergy`); with the exact swap rule the ensemble's
  stationary law is the product of ``exp(-E / tau_r)``, so the ``tau_0`` replica samples that law exactly.
- ``mode="heuristic"``: raw Glauber replicas on conditionals that need not be compatible (no joint exists, so no
  swap rule can be exact). Swaps use the same formula with the pseudo-log-likelihood as a stand-in energy: it moves
  low-energy (high-PLL) states towards low temperature as exact tempering would, but preserves no known law; its
  effect is to be measured (``benchmarks/bench_tempering.py``), not assumed.

Ladder statistics (summarised by :func:`mlm_dynamics.diagnostics.tempering.tempering_summary`): per adjacent pair
the swap acceptance; walker round trips (a walker is a state followed through its swaps; a round trip is a trip from
the lowest temperature to the highest and back); an adaptive ladder that, during the first ``adapt_steps`` steps
only, moves the inner temperatures to equalise the acceptance of adjacent pairs (the law is exact only once the
ladder is frozen). The ensemble checkpoints through ``state_dict``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from .._random import Randomness
from ..models.base import Denoiser
from .energy import PseudoLogLikelihoodEnergy
from .glauber import ChainState, GlauberSampler

MODES = ("exact", "heuristic")


@dataclass
class TemperingState:
    """The ensemble: chains over ``R C`` rows, which walker each row holds, and the ladder statistics."""

    chains: ChainState
    walkers: Tensor  # [R C] walker id at each row
    last_extreme: Tensor  # [R C walkers] 0: last seen at the bottom, 1: at the top, -1: neither yet
    trip_started: Tensor  # [walkers] step the current round trip started (-1: none)
    attempts: Tensor  # [R - 1]
    accepts: Tensor  # [R - 1]
    ladder: Tensor  # [R] the current temperatures (adapted during burn-in)
    round_trips: list[int] = field(default_factory=list)  # durations in steps
    swaps_done: int = 0

    def acceptance(self) -> Tensor:
        """``[R - 1]`` swap acceptance of each adjacent pair (``nan`` before any attempt)."""
        return torch.where(self.attempts > 0, self.accepts / self.attempts.clamp_min(1), math.nan)

    def state_dict(self) -> dict[str, Any]:
        """Replicas, ladder (as adapted), swap and round-trip counters, for checkpoints."""
        return {"chains": self.chains.state_dict(), "walkers": self.walkers.clone(),
                "last_extreme": self.last_extreme.clone(), "trip_started": self.trip_started.clone(),
                "attempts": self.attempts.clone(), "accepts": self.accepts.clone(), "ladder": self.ladder.clone(),
                "round_trips": list(self.round_trips), "swaps_done": self.swaps_done}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any], device: torch.device | str | None = None) -> TemperingState:
        """A state from :meth:`state_dict`, on ``device``."""
        missing = sorted({"chains", "walkers", "last_extreme", "trip_started", "attempts", "accepts", "ladder",
                          "round_trips", "swaps_done"} - set(state))
        if missing:
            raise ValueError(f"state: a tempering state needs {missing} (saved by another version?)")
        return cls(chains=ChainState.from_state_dict(state["chains"], device), walkers=state["walkers"].clone(),
                   last_extreme=state["last_extreme"].clone(), trip_started=state["trip_started"].clone(),
                   attempts=state["attempts"].clone(), accepts=state["accepts"].clone(),
                   ladder=state["ladder"].clone().double(), round_trips=list(state["round_trips"]),
                   swaps_done=int(state["swaps_done"]))


class ReplicaExchange:
    """Parallel tempering (see the module docstring).

    Args:
        denoiser: the model.
        temperatures: the ladder, increasing, at least 2.
        mode: ``"exact"`` (needs ``energy``) or ``"heuristic"`` (PLL stand-in energy for the swaps).
        energy: ``E(tokens [B, L]) -> [B]`` at tau = 1; exact mode only.
        swap_every: steps between swap rounds.
        adapt_steps: steps during which the inner temperatures adapt to equalise acceptance (0: fixed ladder).
        sampler_options: further :class:`GlauberSampler` options.

    Examples:
        Two chains, each with replicas at tau = 0.5, 1 and 2, MH-corrected towards the Ising chain's exact law:

        >>> import torch
        >>> from mlm_dynamics import PairwiseMRFDenoiser, ReplicaExchange
        >>> from mlm_dynamics.diagnostics.tempering import tempering_summary
        >>> ising = PairwiseMRFDenoiser.ising_chain(6, coupling=1.0)
        >>> tempering = ReplicaExchange(ising, [0.5, 1.0, 2.0], energy=ising.energy)
        >>> state = tempering.init_state(torch.zeros(2, 6, dtype=torch.long), generator=0)
        >>> tempering.run(state, 200)
        >>> summary = tempering_summary(state)
        >>> sorted(summary)
        ['round_trip_median', 'round_trips', 'swap_acceptance_0', 'swap_acceptance_1', 'swap_acceptance_min']
        >>> 0 < summary["swap_acceptance_min"] <= 1
        True
    """

    def __init__(self, denoiser: Denoiser, temperatures: Sequence[float], *, mode: str = "exact",
                 energy: Callable[[Tensor], Tensor] | None = None, swap_every: int = 1, adapt_steps: int = 0,
                 **sampler_options: Any) -> None:
        ladder = [float(t) for t in temperatures]
        if len(ladder) < 2 or any(not (math.isfinite(t) and t > 0) for t in ladder) or sorted(set(ladder)) != ladder:
            raise ValueError(f"temperatures must be at least 2 increasing finite numbers > 0, got {ladder}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if mode == "exact" and energy is None:
            raise ValueError("energy is required in exact mode (the replicas are MH-corrected towards exp(-E/tau))")
        if mode == "heuristic" and energy is not None:
            raise ValueError("energy: heuristic mode uses the pseudo-log-likelihood; pass mode='exact' for an energy")
        for name, value, low in (("swap_every", swap_every, 1), ("adapt_steps", adapt_steps, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        self.denoiser, self.mode, self.swap_every, self.adapt_steps = denoiser, mode, swap_every, adapt_steps
        self.ladder = torch.tensor(ladder, dtype=torch.float64)
        self.energy = energy
        self.options = sampler_options
        self.sampler: GlauberSampler | None = None

    @property
    def replicas(self) -> int:
        """Number of replicas per chain: the length of the ladder."""
        return len(self.ladder)  # the initial ladder; a state's own (adapted) ladder has the same length

    def init_state(self, tokens: Tensor, generator: Randomness = 0, *, sites: Tensor | None = None
                   ) -> TemperingState:
        """``C`` chains from ``tokens [C, L]``, every replica starting there; ``generator`` drives the updates and the
        swaps (a ``torch.Generator``, or an int seed for one)."""
        chains = tokens.shape[0]
        rows = tokens.repeat(self.replicas, 1)
        self.sampler = GlauberSampler(self.denoiser, self.ladder.repeat_interleave(chains),
                                      energy=self.energy if self.mode == "exact" else None, **self.options)
        state = self.sampler.init_state(rows, generator=generator, sites=None if sites is None else sites.repeat(
            self.replicas, 1))
        count = self.replicas * chains
        walkers = torch.arange(count)
        last = torch.where(walkers < chains, 0, torch.where(walkers >= count - chains, 1, -1))
        return TemperingState(chains=state, walkers=walkers, last_extreme=last,
                              trip_started=torch.where(walkers < chains, 0, -1),
                              attempts=torch.zeros(self.replicas - 1), accepts=torch.zeros(self.replicas - 1),
                              ladder=self.ladder.clone())

    def swap_energy(self, tokens: Tensor, state: ChainState) -> Tensor:
        """``E`` of each row for the swap rule: the exact-mode energy (cached by the sampler), else the PLL."""
        if self.mode == "exact":
            assert state.energy is not None
            return state.energy
        return PseudoLogLikelihoodEnergy(self.denoiser, sites=state.sites)(tokens).double()

    def _sampler_for(self, state: TemperingState) -> GlauberSampler:
        """The Glauber sampler at the state's ladder (made again for a state restored from a checkpoint)."""
        rows = state.chains.tokens.shape[0] // self.replicas
        if self.sampler is None:
            self.sampler = GlauberSampler(self.denoiser, state.ladder.repeat_interleave(rows),
                                          energy=self.energy if self.mode == "exact" else None, **self.options)
        self.sampler.temperature = state.ladder.repeat_interleave(rows).to(state.chains.tokens.device)
        return self.sampler

    @torch.no_grad()
    def step(self, state: TemperingState) -> None:
        """One Glauber (exact: MH-corrected) update of every row; a swap round every ``swap_every`` steps."""
        self._sampler_for(state).step(state.chains)
        if state.chains.step % self.swap_every == 0:
            self._swap(state)

    def run(self, state: TemperingState, num_steps: int) -> None:
        """Advance ``num_steps`` steps (an update of every replica, then a swap round every ``swap_every``)."""
        for _ in range(num_steps):
            self.step(state)

    def _swap(self, state: TemperingState) -> None:
        chains_state = state.chains
        count = chains_state.tokens.shape[0]
        chains = count // self.replicas
        energy = self.swap_energy(chains_state.tokens, chains_state).cpu().clone()  # not an alias of the cache
        parity = state.swaps_done % 2
        state.swaps_done += 1
        generator = chains_state.generator
        for r in range(parity, self.replicas - 1, 2):
            low = torch.arange(r * chains, (r + 1) * chains)
            high = low + chains
            beta_gap = 1 / state.ladder[r] - 1 / state.ladder[r + 1]
            log_accept = beta_gap * (energy[low] - energy[high])
            uniform = torch.rand(chains, generator=generator, device=generator.device, dtype=torch.float64).cpu()
            accept = uniform.log() < log_accept
            state.attempts[r] += chains
            state.accepts[r] += accept.sum()
            if accept.any():
                a, b = low[accept], high[accept]
                into, out_of = torch.cat([a, b]), torch.cat([b, a])  # every accepted pair exchanges its rows
                device = chains_state.tokens.device
                chains_state.tokens[into.to(device)] = chains_state.tokens[out_of.to(device)]
                if chains_state.energy is not None:
                    chains_state.energy[into.to(device)] = chains_state.energy[out_of.to(device)]
                state.walkers[into] = state.walkers[out_of]
                energy[into] = energy[out_of]
        self._round_trips(state, chains)
        if chains_state.step <= self.adapt_steps:
            self._adapt(state)

    def _round_trips(self, state: TemperingState, chains: int) -> None:
        """Walkers at the top become 'from the top'; back at the bottom from the top completes a round trip."""
        count = len(state.walkers)
        bottom, top = state.walkers[:chains], state.walkers[count - chains:]
        step = state.chains.step
        state.last_extreme[top] = 1
        returned = bottom[state.last_extreme[bottom] == 1]
        for walker in returned.tolist():
            if state.trip_started[walker] >= 0:
                state.round_trips.append(step - int(state.trip_started[walker]))
            state.trip_started[walker] = step
        state.last_extreme[bottom] = 0
        fresh = bottom[state.trip_started[bottom] < 0]
        state.trip_started[fresh] = step

    def _adapt(self, state: TemperingState) -> None:
        """Move the inner temperatures: log-spacings grow where acceptance is high, shrink where it is low."""
        acceptance = torch.nan_to_num(state.acceptance(), nan=0.5)
        ladder = state.ladder
        spacing = ladder.log().diff() * torch.exp(0.1 * (acceptance.double() - acceptance.double().mean()))
        spacing = spacing / spacing.sum() * (ladder[-1] / ladder[0]).log()
        state.ladder = torch.cat([ladder[:1], ladder[0] * spacing.cumsum(0).exp()])
        self._sampler_for(state)

    def replica(self, state: TemperingState, index: int = 0) -> Tensor:
        """The ``C`` chains at ladder position ``index`` (``0``: the lowest temperature)."""
        chains = len(state.walkers) // self.replicas
        return state.chains.tokens[index * chains:(index + 1) * chains]


__all__ = ["MODES", "ReplicaExchange", "TemperingState"]
