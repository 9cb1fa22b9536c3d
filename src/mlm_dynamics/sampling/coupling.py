"""Maximal couplings of categorical laws, coupled Glauber chains, meeting times and L-lag TV bounds.

Maximal coupling of ``p, q`` (rows of ``[N, V]``): with ``m = min(p, q)`` and overlap ``s = sum(m) = 1 - TV(p, q)``,
with probability ``s`` both take one draw ``z ~ m / s``; otherwise ``x ~ (p - m) / (1 - s)`` and
``y ~ (q - m) / (1 - s)`` independently (disjoint supports, so ``x != y``). Each marginal is exact and
``P(x = y) = 1 - TV(p, q)``, the largest possible.

Coupled chains share the site choice and draw each resampled token through this coupling, so two chains that meet
stay together. By the coupling inequality ``TV(P^t(x0, .), P^t(y0, .)) <= P(T_meet > t)``.

L-lag coupling (Biswas, Jacob & Vanetti 2019): run ``X`` alone for ``L`` steps, then couple ``(X_{t}, Y_{t-L})``;
with ``tau = inf{t >= L : X_t = Y_{t-L}}`` and ``X_0, Y_0 ~ mu_0``,
``TV(mu_0 P^t, pi) <= E[max(0, ceil((tau - L - t) / L))]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..diagnostics.meeting import MeetingTimes
from ..models.base import Denoiser
from .categorical import sample_categorical
from .glauber import ChainState, GlauberSampler


def maximal_coupling(p: Tensor, q: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Draw ``(x, y)`` of shape ``[N]`` from the maximal coupling of the rows of ``p, q [N, V]``.

    Rows must be probability vectors (non-negative, summing to 1 up to rounding). Cost: ``O(N V)``, three
    inverse-CDF draws at most per row, one uniform for the coupling decision.
    """
    if p.shape != q.shape or p.dim() != 2:
        raise ValueError(f"p and q must be equal-shape [N, V] tensors, got {tuple(p.shape)} and {tuple(q.shape)}")
    if (p < 0).any() or (q < 0).any():
        raise ValueError("p and q must be non-negative")
    overlap = torch.minimum(p, q)
    share = overlap.sum(-1)
    coupled = torch.rand(share.shape, generator=generator, device=p.device, dtype=p.dtype) < share
    x = torch.empty(p.shape[0], dtype=torch.long, device=p.device)
    y = torch.empty_like(x)
    if coupled.any():
        z = sample_categorical(overlap[coupled], generator)
        x[coupled] = z
        y[coupled] = z
    apart = ~coupled
    if apart.any():
        x[apart] = sample_categorical(_residual(p[apart], overlap[apart]), generator)
        y[apart] = sample_categorical(_residual(q[apart], overlap[apart]), generator)
    return x, y


def randomize_sites(denoiser: Denoiser, tokens: Tensor, sites: Tensor, generator: torch.Generator) -> Tensor:
    """``tokens [B, L]`` with every site ``sites [B, n]`` replaced by a uniformly random allowed token.

    A far-away start for a coupled partner chain; ``generator`` may live on any device.
    """
    allowed = denoiser.vocab.allowed_mask(generator.device).nonzero().squeeze(1)
    draws = allowed[torch.randint(len(allowed), sites.shape, generator=generator, device=generator.device)]
    return tokens.scatter(1, sites, draws.to(tokens.device))


def _residual(p: Tensor, overlap: Tensor) -> Tensor:
    residual = p - overlap
    # a residual can vanish only when the rows differ by rounding alone; then the row itself is the exact law
    empty = residual.sum(-1) <= 0
    return torch.where(empty[:, None], p, residual)


@dataclass
class CoupledState:
    """Pairs of chains ``(x, y)``; ``x`` carries the shared schedule and RNG, ``met_at`` is -1 until they meet."""

    x: ChainState
    y: Tensor
    met_at: Tensor

    def state_dict(self) -> dict[str, Any]:
        return {"x": self.x.state_dict(), "y": self.y.clone(), "met_at": self.met_at.clone()}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any], device: torch.device | str | None = None) -> CoupledState:
        x = ChainState.from_state_dict(state["x"], device)
        return cls(x=x, y=state["y"].to(x.tokens.device).clone(), met_at=state["met_at"].to(x.tokens.device).clone())


class CoupledGlauberChains:
    """Pairs of Glauber chains under the maximal coupling, each chain a faithful copy of ``sampler``'s chain.

    Per step: one shared site choice; one forward pass over ``x`` and the not-yet-met rows of ``y``; each resampled
    token drawn from the maximal coupling of the two conditionals. Met pairs cost one row, and stay met.
    """

    def __init__(self, sampler: GlauberSampler) -> None:
        if sampler.energy is not None:
            raise ValueError("sampler: coupled chains do not support the MH correction (energy must be None)")
        if sampler.greedy:
            raise ValueError("sampler: greedy chains are deterministic; there is nothing to couple")
        self.sampler = sampler

    def init_state(self, x0: Tensor, y0: Tensor, *, seed: int, sites: Tensor | None = None) -> CoupledState:
        if x0.shape != y0.shape:
            raise ValueError(f"x0 and y0 must have equal shapes, got {tuple(x0.shape)} and {tuple(y0.shape)}")
        x = self.sampler.init_state(x0, seed=seed, sites=sites)
        y = y0.to(x.tokens.device).long().clone()
        y_free = self.sampler.denoiser.resampleable_sites(y) if sites is None else x.sites
        if not torch.equal(y_free, x.sites):
            raise ValueError("y0: its resampleable positions differ from x0's")
        outside = torch.ones_like(y, dtype=torch.bool).scatter(1, x.sites, False)
        if (x.tokens[outside] != y[outside]).any():
            raise ValueError("x0 and y0 must agree outside the resampled sites, or they could never meet")
        met_at = torch.where((x.tokens == y).all(1), 0, -1)
        return CoupledState(x=x, y=y, met_at=met_at)

    @torch.no_grad()
    def step(self, state: CoupledState) -> Tensor:
        """Advance every pair one step; returns the Hamming distance ``[P]`` between the chains afterwards."""
        sampler, chains = self.sampler, state.x
        positions = chains.sites.gather(1, sampler.choose_sites(chains))
        met = state.met_at >= 0
        active = (~met).nonzero().squeeze(1)
        rows = torch.cat([chains.tokens, state.y[active]])
        row_positions = torch.cat([positions, positions[active]])
        probs = sampler.log_probs(sampler.denoiser.conditional_logits(rows, row_positions)).exp()
        p, q = probs[: len(positions)], probs[len(positions):]
        new_x = torch.empty_like(positions)
        if met.any():
            new_x[met] = sample_categorical(p[met].flatten(0, 1), chains.generator).view(int(met.sum()), -1)
        if len(active):
            coupled_x, coupled_y = maximal_coupling(p[active].flatten(0, 1), q.flatten(0, 1), chains.generator)
            new_x[active] = coupled_x.view(len(active), -1)
        chains.tokens.scatter_(1, positions, new_x)
        state.y[met] = chains.tokens[met]  # met pairs move together
        if len(active):
            state.y[active] = state.y[active].scatter(1, positions[active], coupled_y.view(len(active), -1))
        chains.step += 1
        newly_met = ~met & (chains.tokens == state.y).all(1)
        state.met_at[newly_met] = chains.step
        return (chains.tokens != state.y).sum(1)

    def run(self, state: CoupledState, max_steps: int) -> MeetingTimes:
        """Step until every pair has met or ``max_steps`` steps were taken; meeting times count from step 0."""
        if not isinstance(max_steps, int) or max_steps < 0:
            raise ValueError(f"max_steps must be a non-negative integer, got {max_steps!r}")
        start = state.x.step
        while (state.met_at < 0).any() and state.x.step - start < max_steps:
            self.step(state)
        censored = state.met_at < 0
        times = torch.where(censored, state.x.step, state.met_at)
        return MeetingTimes(times=times, censored=censored, max_steps=state.x.step)


def meeting_times(sampler: GlauberSampler, x0: Tensor, y0: Tensor, *, max_steps: int, seed: int,
                  sites: Tensor | None = None) -> MeetingTimes:
    """Meeting times of maximally coupled pairs started at ``(x0[p], y0[p])``, censored at ``max_steps``."""
    chains = CoupledGlauberChains(sampler)
    return chains.run(chains.init_state(x0, y0, seed=seed, sites=sites), max_steps)


def lagged_meeting_times(sampler: GlauberSampler, x0: Tensor, y0: Tensor, *, lag: int, max_steps: int, seed: int,
                         sites: Tensor | None = None) -> MeetingTimes:
    """L-lag meeting times ``tau = L + inf{t : X_{L+t} = Y_t}`` with ``X_0 = x0``, ``Y_0 = y0`` (draws from ``mu_0``).

    ``X`` runs ``lag`` steps alone, then the pair is coupled for at most ``max_steps`` steps. For sweep and sequential
    scans ``lag`` must be a multiple of the sweep length so that both chains visit the same sites.
    """
    if not isinstance(lag, int) or lag < 1:
        raise ValueError(f"lag must be an integer >= 1, got {lag!r}")
    chains = CoupledGlauberChains(sampler)
    ahead = sampler.init_state(x0, seed=seed, sites=sites)
    sweep = ahead.num_sites // sampler.block_size
    if sampler.scan != "random" and lag % sweep:
        raise ValueError(f"lag must be a multiple of the sweep length {sweep} for scan={sampler.scan!r}")
    for _ in sampler.run(ahead, lag):
        pass
    state = chains.init_state(ahead.tokens, y0, seed=seed, sites=ahead.sites)
    state.x.generator.set_state(ahead.generator.get_state())
    result = chains.run(state, max_steps)
    return MeetingTimes(times=result.times + lag, censored=result.censored, lag=lag, max_steps=result.max_steps)
