"""Maximal couplings of categorical laws, coupled Glauber chains, meeting times and L-lag TV bounds.

Maximal coupling of ``p, q`` (rows of ``[N, V]``): with ``m = min(p, q)`` and overlap ``s = sum(m) = 1 - TV(p, q)``,
with probability ``s`` both take one draw ``z ~ m / s``; otherwise ``x ~ (p - m) / (1 - s)`` and
``y ~ (q - m) / (1 - s)`` independently (disjoint supports, so ``x != y``). Each marginal is exact and
``P(x = y) = 1 - TV(p, q)``, the largest possible.

Coupled chains share the site choice and draw each resampled token through this coupling, so two chains that meet
stay together. By the coupling inequality ``TV(P^t(x0, .), P^t(y0, .)) <= P(T_meet > t)``; the meeting times and
their bounds are made of the chains' meeting steps in :mod:`mlm_dynamics.diagnostics.meeting`.

L-lag coupling (Biswas, Jacob & Vanetti 2019): run ``X`` alone for ``L`` steps, then couple ``(X_{t}, Y_{t-L})``;
with ``tau = inf{t >= L : X_t = Y_{t-L}}`` and ``X_0, Y_0 ~ mu_0``,
``TV(mu_0 P^t, pi) <= E[max(0, ceil((tau - L - t) / L))]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .._random import Randomness
from ..models.base import Denoiser, require_integer
from .categorical import inverse_cdf, sample_categorical
from .glauber import ChainState, GlauberSampler, StepRecord, stream_sites
from .streams import mix, uniforms

PAIR_SLOTS = 4  # uniforms per pair and step with per-pair streams: site, coupling decision, token of x, token of y


def rounding_tolerance(size: int, dtype: torch.dtype) -> float:
    """The largest ``|sum(p) - 1|`` rounding can give a row of ``size`` probabilities made as
    ``exp(log_softmax(z))``, computed in ``dtype`` (float32 or better: low-precision rows are taken as computed in
    float32 and stored in ``dtype``) and summed in float64.

    Derivation (``u``: unit roundoff of the computation, ``e``: of the storage): ``log_softmax`` sums ``size``
    positive terms for its normaliser, so ``log s`` is off by at most ``(size - 1) u`` in any summation order
    (Higham, recursive summation); ``x_i = (z_i - m) - log s`` and ``p_i = exp(x_i)`` add a relative error of at most
    ``(|z_i - m| + |x_i| + |log s| + 4) u`` to ``p_i``, whose ``p``-weighted sum is at most ``(3 ln size + 4) u``
    because ``sum p_i (m - z_i) <= H``, ``-sum p_i x_i = H`` and ``log s <= ln size`` (``H <= ln size`` the entropy);
    storing rounds each ``p_i`` by ``e / 2`` relatively; the float64 check sum adds ``(size - 1) eps64``. So
    ``|sum - 1| <= (size - 1 + 3 ln size + 8) u + e / 2 + (size - 1) eps64``: 1.0e-11 for float64 rows of a
    BERT-size vocabulary (30,522), 1.8e-3 for float32 ones, 3.9e-3 for bfloat16 rows of 256; a row summing to 2 is
    beyond it in every dtype."""
    compute = torch.finfo(torch.promote_types(dtype, torch.float32)).eps / 2
    store = torch.finfo(dtype).eps / 2
    return (size - 1 + 3 * math.log(max(size, 1)) + 8) * compute + store + (size - 1) * torch.finfo(torch.float64).eps


def probability_rows(rows: Tensor, name: str) -> Tensor:
    """``rows [N, V]`` renormalised in float64, after checking that they are probability vectors up to rounding
    (:func:`rounding_tolerance`): a ValueError naming ``name`` for negative, non-finite or non-float entries, or a row
    whose sum is off by more than rounding explains."""
    if not rows.is_floating_point() or not torch.isfinite(rows).all() or (rows < 0).any():
        raise ValueError(f"{name} must hold finite, non-negative floating-point probabilities")
    dtype, rows = rows.dtype, rows.double()
    sums = rows.sum(-1, keepdim=True)
    if rows.numel():
        error = float((sums - 1).abs().max())
        allowed = rounding_tolerance(rows.shape[1], dtype)
        if error > allowed:
            raise ValueError(f"{name}: rows must sum to 1, one is off by {error:.3g}, beyond the {allowed:.2g} that "
                             "rounding of a softmax explains: not a probability vector (a wrong temperature, logits "
                             "of another vocabulary, a row summed twice?)")
    return rows / sums


def maximal_coupling(p: Tensor, q: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Draw ``(x, y)`` of shape ``[N]`` from the maximal coupling of the rows of ``p, q [N, V]``.

    Rows must be probability vectors up to the rounding a softmax can give (:func:`rounding_tolerance`); they are
    renormalised in float64 before the draw, so rounding never refuses a real row and never biases a draw, while a
    row that is wrong beyond rounding (one summing to 2) is refused. Cost: ``O(N V)``; three uniforms of
    ``generator`` per row (:func:`coupled_draw`).
    """
    if p.shape != q.shape or p.dim() != 2:
        raise ValueError(f"p and q must be equal-shape [N, V] tensors, got {tuple(p.shape)} and {tuple(q.shape)}")
    p, q = probability_rows(p, "p"), probability_rows(q, "q")
    return coupled_draw(p, q, torch.rand(p.shape[0], 3, generator=generator, device=p.device, dtype=torch.float64))


def coupled_draw(p: Tensor, q: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
    """The maximal coupling of the rows of ``p, q [N, V]`` from three uniforms ``u [N, 3]`` per row.

    With ``m = min(p, q)`` and ``s = sum(m)``: if ``u_0 < s`` both take :func:`inverse_cdf` of ``m`` at ``u_1``;
    otherwise ``x`` is drawn from ``p - m`` at ``u_1`` and ``y`` from ``q - m`` at ``u_2``. Each marginal is exact and
    ``P(x = y) = s = 1 - TV(p, q)``.
    """
    overlap = torch.minimum(p, q)
    share = overlap.sum(-1)
    coupled = u[:, 0].to(p.dtype) < share
    x = inverse_cdf(torch.where(coupled[:, None], overlap, _residual(p, overlap)), u[:, 1])
    y = torch.where(coupled, x, inverse_cdf(torch.where(coupled[:, None], overlap, _residual(q, overlap)), u[:, 2]))
    return x, y


def randomize_sites(denoiser: Denoiser, tokens: Tensor, sites: Tensor, generator: torch.Generator | None, *,
                    site_counts: Tensor | None = None, streams: Tensor | None = None) -> Tensor:
    """``tokens [B, L]`` with every site ``sites [B, n]`` replaced by a uniformly random allowed token.

    With ``site_counts [B]`` only each row's first ``site_counts[b]`` sites are replaced (the rest is padding). One draw
    per entry of ``sites`` either way, so the stream does not depend on the counts. The draws come from
    ``generator`` (any device), or with ``streams [B]`` from each row's own counter-based stream (step 0).
    A far-away start for a coupled partner chain.
    """
    if streams is not None:
        allowed = denoiser.vocab.allowed_mask(streams.device).nonzero().squeeze(1)
        picks = (uniforms(streams, 0, sites.shape[1]) * len(allowed)).long().clamp_max(len(allowed) - 1)
        draws = allowed[picks]
    elif generator is not None:
        allowed = denoiser.vocab.allowed_mask(generator.device).nonzero().squeeze(1)
        draws = allowed[torch.randint(len(allowed), sites.shape, generator=generator, device=generator.device)]
    else:
        raise ValueError("randomize_sites: pass generator= or streams=")
    if site_counts is None:
        return tokens.scatter(1, sites, draws.to(tokens.device))
    length = tokens.shape[1]
    valid = torch.arange(sites.shape[1], device=sites.device) < site_counts.to(sites.device)[:, None]
    target = torch.where(valid, sites, length)  # padding writes into a dummy column
    widened = torch.cat([tokens, tokens[:, :1]], 1).scatter(1, target.to(tokens.device), draws.to(tokens.device))
    return widened[:, :length]


def _residual(p: Tensor, overlap: Tensor) -> Tensor:
    residual = p - overlap
    # a residual can vanish only when the rows differ by rounding alone; then the row itself is the exact law
    empty = residual.sum(-1) <= 0
    return torch.where(empty[:, None], p, residual)


@dataclass
class CoupledState:
    """Pairs of chains ``(x, y)``; ``x`` carries the shared schedule and RNG, ``met_at`` is -1 until they meet.

    ``rows`` counts the forward rows spent so far (the uncompacted cost is ``2 P`` per step). ``freeze [P]`` (``None``:
    the chains' ``freeze_met`` for every pair) says which pairs leave the batch once met; the others move on as one
    chain at one row, so their ``x`` stays a chain of the sampler. ``stopped_at [P]`` is the step at which a pair
    was stopped unmet (``-1``: running or met): its meeting time is censored there and ``y`` stops; its ``x`` stops
    too where the pair freezes, else it moves on alone as a chain. ``born [P]`` (``None``: every pair started at step
    0) is the step at which each pair started (``-1``: not yet, it waits outside the batch): a pair's own clock, its
    age, is the steps since, and with per-pair streams it draws at its age, so its path is the same whenever it
    starts.
    """

    x: ChainState
    y: Tensor
    met_at: Tensor
    rows: int = 0
    freeze: Tensor | None = None
    stopped_at: Tensor | None = None
    born: Tensor | None = None

    @property
    def started(self) -> Tensor:
        """``[P]`` True for pairs that have started (all of them without :attr:`born`)."""
        return torch.ones_like(self.met_at, dtype=torch.bool) if self.born is None else self.born >= 0

    @property
    def ages(self) -> Tensor:
        """``[P]`` steps each pair has run since it started (0 before)."""
        if self.born is None:
            return torch.full_like(self.met_at, self.x.step)
        return torch.where(self.born >= 0, self.x.step - self.born, 0)

    @property
    def stopped(self) -> Tensor:
        """``[P]`` True for pairs stopped unmet."""
        return torch.zeros_like(self.met_at, dtype=torch.bool) if self.stopped_at is None else self.stopped_at >= 0

    @property
    def open(self) -> Tensor:
        """``[P]`` True for pairs that have started and have neither met nor been stopped."""
        return (self.met_at < 0) & ~self.stopped & self.started

    def stop(self, pairs: Tensor, at: int | None = None) -> None:
        """Stop the unmet pairs among ``pairs`` (``[P]`` bool), censored at step ``at`` (default: now): ``y`` leaves
        the forward batch, and ``x`` with it where the pair freezes."""
        if self.stopped_at is None:
            self.stopped_at = torch.full_like(self.met_at, -1)
        chosen = pairs.to(self.met_at.device) & self.open
        self.stopped_at[chosen] = self.x.step if at is None else at

    def state_dict(self) -> dict[str, Any]:
        """Both chains' states, the meeting and stopping steps, for checkpoints."""
        return {"x": self.x.state_dict(), "y": self.y.clone(), "met_at": self.met_at.clone(), "rows": self.rows,
                "freeze": None if self.freeze is None else self.freeze.clone(),
                "stopped_at": None if self.stopped_at is None else self.stopped_at.clone(),
                "born": None if self.born is None else self.born.clone()}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any], device: torch.device | str | None = None) -> CoupledState:
        """A state from :meth:`state_dict`, on ``device``."""
        x = ChainState.from_state_dict(state["x"], device)
        optional = {k: None if state.get(k) is None else state[k].to(x.tokens.device).clone()
                    for k in ("freeze", "stopped_at", "born")}
        return cls(x=x, y=state["y"].to(x.tokens.device).clone(), met_at=state["met_at"].to(x.tokens.device).clone(),
                   rows=int(state.get("rows", 0)), **optional)


def resampled_mask(state: ChainState) -> Tensor:
    """``[B, L]`` True at the sites each row resamples (its first ``counts[b]`` sites; padding excluded)."""
    batch, length = state.tokens.shape
    valid = torch.arange(state.num_sites, device=state.sites.device) < state.site_counts[:, None]
    target = torch.where(valid, state.sites, length)  # padding goes to a dummy column
    mask = torch.zeros(batch, length + 1, dtype=torch.bool, device=state.sites.device)
    return mask.scatter(1, target, True)[:, :length]


class CoupledGlauberChains:
    """Pairs of Glauber chains under the maximal coupling, each chain a faithful copy of ``sampler``'s chain.

    Per step: one shared site choice; one forward pass over the rows that still matter; each resampled token drawn
    from the maximal coupling of the two conditionals. Pairs keep the sampler's per-chain temperature and site
    count (pair ``p`` uses row ``p``'s). Met pairs stay met. With ``freeze_met=False`` (default) a met pair keeps
    moving as one chain at the cost of one row, so ``x`` stays a chain of the sampler for any use; with
    ``freeze_met=True`` met pairs leave the forward batch and cost nothing more (what a meeting-time grid needs).
    """

    def __init__(self, sampler: GlauberSampler, *, freeze_met: bool = False) -> None:
        if sampler.energy is not None:
            raise ValueError("sampler: coupled chains do not support the MH correction (energy must be None)")
        if sampler.greedy:
            raise ValueError("sampler: greedy chains are deterministic; there is nothing to couple")
        self.sampler, self.freeze_met = sampler, freeze_met

    def init_state(self, x0: Tensor, y0: Tensor, generator: Randomness = 0, *, sites: Tensor | None = None,
                   site_counts: Tensor | None = None, streams: Tensor | None = None,
                   attention_mask: Tensor | None = None) -> CoupledState:
        """Pairs ``(x0[p], y0[p])``; ``streams [P]`` gives each pair its own counter-based stream (see :meth:`step`);
        ``attention_mask [P, L]``: the padding both chains of a pair share (see
        :meth:`~.glauber.GlauberSampler.init_state`)."""
        if x0.shape != y0.shape:
            raise ValueError(f"x0 and y0 must have equal shapes, got {tuple(x0.shape)} and {tuple(y0.shape)}")
        x = self.sampler.init_state(x0, generator, sites=sites, site_counts=site_counts, streams=streams,
                                    attention_mask=attention_mask)
        require_integer("y0", y0)
        y = y0.to(x.tokens.device).long().clone()
        if sites is None and attention_mask is None and not torch.equal(
                self.sampler.denoiser.resampleable_sites(y), x.sites):
            raise ValueError("y0: its resampleable positions differ from x0's")
        if (x.tokens != y)[~resampled_mask(x)].any():
            raise ValueError("x0 and y0 must agree outside the resampled sites, or they could never meet")
        met_at = torch.where((x.tokens == y).all(1), 0, -1)
        return CoupledState(x=x, y=y, met_at=met_at)

    @torch.no_grad()
    def step(self, state: CoupledState) -> Tensor:
        """Advance every pair one step; returns the Hamming distance ``[P]`` between the chains afterwards."""
        self.step_record(state)
        return (state.x.tokens != state.y).sum(1)

    @torch.no_grad()
    def step_record(self, state: CoupledState) -> StepRecord:
        """Advance every pair one step in one forward pass over the rows that still matter (``x`` of the pairs that
        move, ``y`` of the open ones); returns the step of the ``x`` chains as a :class:`~.glauber.StepRecord`
        (rows that did not move keep their tokens, with log-probability 0).

        With per-pair streams (``x.streams``), pair ``p`` draws its site, its coupling decision and its two tokens
        from its own key and the step (:data:`PAIR_SLOTS` uniforms), whatever else is in the batch.
        """
        sampler, chains = self.sampler, state.x
        drawn = None if chains.streams is None else \
            uniforms(chains.streams, chains.step if state.born is None else state.ages, PAIR_SLOTS)
        index = sampler.choose_sites(chains) if drawn is None else stream_sites(drawn[:, 0], chains.site_counts)
        positions = chains.sites.gather(1, index)
        met = state.met_at >= 0
        freeze = torch.full_like(met, self.freeze_met) if state.freeze is None else state.freeze.to(met.device)
        open_pairs = state.open
        active = open_pairs.nonzero().squeeze(1)
        moving = (open_pairs | (~freeze & state.started)).nonzero().squeeze(1)  # an x not freezing stays a chain
        rows = torch.cat([chains.tokens[moving], state.y[active]])
        row_index = torch.cat([moving, active])
        mask = None if chains.attention_mask is None else chains.attention_mask[row_index]
        old = chains.tokens.gather(1, positions)
        log_prob = torch.zeros(old.shape, dtype=sampler.sampling_dtype, device=old.device)
        if len(row_index):
            logits = sampler.denoiser.conditional_logits(rows, positions[row_index], mask)
            log_q = sampler.log_probs(logits, sampler.row_temperature(row_index))
            probs = log_q.exp()
            state.rows += len(row_index)
            p, q = probs[: len(moving)], probs[len(moving):]
            new_x = positions.new_empty((len(moving), positions.shape[1]))
            coupled_y = None
            alone = ~open_pairs[moving]  # met (y follows) or stopped (y stays): x draws by itself
            if alone.any():
                if drawn is None:
                    new_x[alone] = sample_categorical(p[alone].flatten(0, 1), chains.generator).view(
                        int(alone.sum()), -1)
                else:
                    new_x[alone] = inverse_cdf(p[alone][:, 0], drawn[moving[alone], 1])[:, None]
            if len(active):
                if drawn is None:
                    coupled_x, flat_y = maximal_coupling(p[~alone].flatten(0, 1), q.flatten(0, 1),
                                                         chains.generator)
                else:
                    coupled_x, flat_y = coupled_draw(p[~alone][:, 0], q[:, 0], drawn[active, 1:])
                new_x[~alone] = coupled_x.view(len(active), -1)
                coupled_y = flat_y.view(len(active), -1)
            log_prob[moving] = log_q[: len(moving)].gather(-1, new_x[..., None]).squeeze(-1).to(log_prob.dtype)
            chains.tokens[moving] = chains.tokens[moving].scatter(1, positions[moving], new_x)
            following = met & ~freeze
            state.y[following] = chains.tokens[following]  # met pairs that move, move together
            if coupled_y is not None:
                state.y[active] = state.y[active].scatter(1, positions[active], coupled_y)
        chains.step += 1
        newly_met = open_pairs & (chains.tokens == state.y).all(1)
        state.met_at[newly_met] = chains.step
        new = chains.tokens.gather(1, positions)
        return StepRecord(step=chains.step, positions=positions, old_tokens=old, new_tokens=new, log_prob=log_prob,
                          accepted=torch.ones(old.shape[0], dtype=torch.bool, device=old.device))

    def stop_hopeless(self, state: CoupledState, max_steps: int) -> Tensor:
        """Stop the open pairs that cannot meet within ``max_steps`` steps of their start (their age): a step
        changes at most ``block_size`` sites of each chain, so a pair ``d`` sites apart needs ``ceil(d / k)`` more
        steps. Their meeting times are censored at ``max_steps`` exactly as if they had run there (no estimate
        involved; :attr:`CoupledState.stopped_at` holds the step that age is reached). Returns the ``[P]`` pairs
        stopped now."""
        distance = (state.x.tokens != state.y).sum(1)
        needed = (distance + self.sampler.block_size - 1) // self.sampler.block_size
        hopeless = state.open & (needed > max_steps - state.ages)
        if hopeless.any():
            born = 0 if state.born is None else state.born
            stop_at = torch.full_like(state.met_at, max_steps) + born
            if state.stopped_at is None:
                state.stopped_at = torch.full_like(state.met_at, -1)
            state.stopped_at[hopeless] = stop_at[hopeless]
        return hopeless

    def run(self, state: CoupledState, max_steps: int) -> CoupledState:
        """Step until every pair has met or ``max_steps`` steps were taken; ``state.met_at`` then holds each pair's
        meeting step (-1: not met). :func:`mlm_dynamics.diagnostics.meeting.meeting_times_of` makes the censored
        meeting times of it."""
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 0:
            raise ValueError(f"max_steps must be a non-negative integer, got {max_steps!r}")
        start = state.x.step
        while bool(state.open.any()) and state.x.step - start < max_steps:
            self.step(state)
        return state


def lagged_coupling(sampler: GlauberSampler, x0: Tensor, y0: Tensor, *, lag: int, max_steps: int,
                    generator: Randomness = 0, sites: Tensor | None = None, site_counts: Tensor | None = None,
                    streams: Tensor | None = None, freeze_met: bool = True,
                    attention_mask: Tensor | None = None) -> CoupledState:
    """The L-lag coupling: ``X`` from ``x0`` runs ``lag`` steps alone, then ``(X_{L+t}, Y_t)`` with ``Y_0 = y0`` are
    maximally coupled for at most ``max_steps`` steps; ``met_at`` counts steps of the coupled phase.

    For sweep and sequential scans ``lag`` must be a multiple of every row's sweep length so that both chains visit
    the same sites. With ``streams``, ``X`` runs alone on them and the coupled phase draws from ``mix(streams)``.
    """
    if isinstance(lag, bool) or not isinstance(lag, int) or lag < 1:
        raise ValueError(f"lag must be an integer >= 1, got {lag!r}")
    chains = CoupledGlauberChains(sampler, freeze_met=freeze_met)
    ahead = sampler.init_state(x0, generator, sites=sites, site_counts=site_counts, streams=streams,
                               attention_mask=attention_mask)
    sweeps = sorted(set((ahead.site_counts // sampler.block_size).tolist()))
    if sampler.scan != "random" and any(lag % sweep for sweep in sweeps):
        raise ValueError(f"lag must be a multiple of the sweep lengths {sweeps} for scan={sampler.scan!r}")
    for _ in sampler.run(ahead, lag):
        pass
    state = chains.init_state(ahead.tokens, y0, ahead.generator, sites=ahead.sites, site_counts=ahead.counts,
                              streams=None if ahead.streams is None else mix(ahead.streams),
                              attention_mask=ahead.attention_mask)
    return chains.run(state, max_steps)


__all__ = ["PAIR_SLOTS", "CoupledGlauberChains", "CoupledState", "coupled_draw", "lagged_coupling", "maximal_coupling",
           "probability_rows", "randomize_sites", "resampled_mask", "rounding_tolerance"]
