"""Meeting and hitting times, censored at a budget, and what they bound.

By the coupling inequality ``TV(P^t(x0, .), P^t(y0, .)) <= P(T_meet > t)`` for maximally coupled chains started at
``x0, y0``. With an L-lag coupling (Biswas, Jacob & Vanetti 2019), ``tau = inf{t >= L : X_t = Y_{t-L}}`` and
``X_0, Y_0 ~ mu_0``: ``TV(mu_0 P^t, pi) <= E[max(0, ceil((tau - L - t) / L))] = sum_{j >= 1} P(tau > t + j L)``.
Every term of that sum is a probability over the whole tail of ``tau``: a pair censored at the budget ``b`` has
``tau > b`` and nothing more is known, so its term ``ceil((tau - L - t) / L)^+`` may be arbitrarily large at every
``t``. The estimated bound is therefore 1 (no information) at every ``t`` as soon as one pair is censored, and an
estimate of the bound (an average over pairs, not a certificate) otherwise. Its upper confidence limit
(:meth:`MeetingTimes.tv_upper_limit`) is the betting limit (:mod:`.means`) of the mean of the terms, which lie in
``[0, c_t]`` for pairs that meet within the budget, ``c_t = ceil((b - L - t) / L)^+``: it covers the bound of the
meeting-time law up to the budget. A tail beyond the budget that no pair showed would add to the bound without
limit, and no finite sample excludes one; the limit covers what the pairs can show (16 pairs that all met give
0.29 at a ``t`` where ``c_t = 1``: the exact limit of the first term alone is 0.17, no fewer).

Summaries of the times (quantiles with intervals, the restricted mean, censoring) come from
:mod:`.survival`, the project's one definition for censored times.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from .._random import Randomness
from ..sampling.coupling import CoupledGlauberChains, CoupledState, lagged_coupling
from ..sampling.glauber import GlauberSampler
from .means import betting_upper_limit
from .quantiles import DEFAULT_LEVELS, check_levels
from .survival import DEFAULT_CONFIDENCE, km_quantile, summarise_survival


@dataclass
class MeetingTimes:
    """Meeting times of coupled pairs, censored at a budget.

    Attributes:
        times: ``[P]`` meeting time of each pair (the budget where censored), in single-site steps of chain X.
        censored: ``[P]`` True where the pair had not met within the budget.
        lag: the lag L of the coupling (0 for two chains started together).
        max_steps: the step budget the pairs were followed for (``None``: the largest observed time).
    """

    times: Tensor
    censored: Tensor
    lag: int = 0
    max_steps: int | None = None

    name = "meeting_time"

    @property
    def censored_fraction(self) -> float:
        """Fraction of pairs that had not met within the budget."""
        return float(self.censored.float().mean()) if self.censored.numel() else math.nan

    @property
    def budget(self) -> float:
        """Steps every censored pair was followed: ``max_steps`` (plus the lag), else the largest time observed."""
        if self.max_steps is not None:
            return float(self.max_steps + self.lag)
        return float(self.times.max()) if self.times.numel() else 0.0

    def survival(self, t: Tensor) -> Tensor:
        """``P(T > t)`` for each ``t`` (censored pairs count as not met): bounds ``TV(P^t(x0,.), P^t(y0,.))``."""
        t = torch.as_tensor(t, device=self.times.device)
        return ((self.times[None, :] > t[:, None]) | self.censored[None, :]).float().mean(1)

    def quantiles(self, levels: Sequence[float] | Tensor) -> Tensor:
        """Kaplan-Meier quantiles of ``T`` (:func:`~.survival.km_quantile`); ``inf`` where a quantile lies beyond the
        censored pairs (unknown, only above the budget)."""
        values = [km_quantile(self.times, self.censored, float(p)) for p in torch.as_tensor(levels).tolist()]
        return torch.tensor([math.inf if flagged else value for value, flagged in values], dtype=torch.float64)

    def tv_upper_bound(self, t: Tensor) -> Tensor:
        """L-lag estimate ``min(1, mean max(0, ceil((tau - L - t) / L)))`` of a bound on ``TV(mu_0 P^t, pi)`` for
        each ``t``; 1 at every ``t`` once any pair is censored (its term is unbounded, see the module docstring).
        Requires ``lag >= 1``."""
        if self.lag < 1:
            raise ValueError("tv_upper_bound needs meeting times from lagged_meeting_times (lag >= 1)")
        t = torch.as_tensor(t, device=self.times.device, dtype=torch.float64)
        if bool(self.censored.any()):
            return torch.ones_like(t)
        excess = torch.ceil((self.times.double()[None, :] - self.lag - t[:, None]) / self.lag).clamp_min(0.0)
        return excess.mean(1).clamp_max(1.0)

    def tv_upper_limit(self, t: Tensor, confidence: float = DEFAULT_CONFIDENCE) -> Tensor:
        """Upper confidence limit of :meth:`tv_upper_bound`'s bound for each ``t``, at ``confidence``: ``c_t`` times
        the betting limit (:func:`~.means.betting_upper_limit`) of the terms over ``c_t`` (module docstring); 1 once
        any pair is censored or with fewer than 2 pairs, 0 where ``c_t = 0``. Requires ``lag >= 1``."""
        bound = self.tv_upper_bound(t)
        t = torch.as_tensor(t, device=self.times.device, dtype=torch.float64)
        if bool(self.censored.any()) or self.times.numel() < 2:
            return torch.ones_like(bound)
        reach = torch.ceil((self.budget - self.lag - t) / self.lag).clamp_min(0.0)  # [T] c_t
        excess = torch.ceil((self.times.double()[None, :] - self.lag - t[:, None]) / self.lag).clamp_min(0.0)
        limit = betting_upper_limit(excess / reach.clamp_min(1.0)[:, None], confidence) * reach
        return limit.clamp_max(1.0)

    def summary(self, levels: Sequence[float] = DEFAULT_LEVELS, tv_steps: Sequence[int] = (),
                confidence: float = DEFAULT_CONFIDENCE) -> dict[str, float]:
        """:meth:`~.survival.SurvivalSummary.summary` of the times (``{name}_median`` missing, with
        ``{name}_median_lower_bound``, where censored; intervals with their achieved confidence; the restricted
        mean; ``censored_fraction``, ``budget``, ``num_pairs``); with ``tv_steps`` (lagged times only) also
        ``tv_bound_t{t}`` and its upper confidence limit ``tv_bound_t{t}_high`` for each ``t``."""
        out = summarise_survival(self.times, self.censored, self.budget, levels=check_levels(levels),
                                 confidence=confidence).summary(self.name)
        if tv_steps:
            steps = torch.tensor(list(tv_steps))
            bounds, limits = self.tv_upper_bound(steps).tolist(), self.tv_upper_limit(steps, confidence).tolist()
            for t, bound, limit in zip(tv_steps, bounds, limits, strict=True):
                out.update({f"tv_bound_t{t}": float(bound), f"tv_bound_t{t}_high": float(limit)})
        return out


@dataclass
class HittingTimes(MeetingTimes):
    """First times a chain's drift reached a threshold (same censoring as :class:`MeetingTimes`)."""

    name = "hitting_time"


def meeting_times_of(state: CoupledState, *, started_at: int = 0, lag: int = 0) -> MeetingTimes:
    """The meeting times of coupled chains run from step ``started_at`` (or each pair from its own start,
    :attr:`~mlm_dynamics.sampling.coupling.CoupledState.born`; pairs not started are left out): a pair's meeting
    step, or where it has not met (censored) the step it was stopped at
    (:meth:`~mlm_dynamics.sampling.coupling.CoupledState.stop`), else the steps run so far; with an L-lag coupling
    the times include the ``lag``. ``max_steps`` is the latest of these."""
    started = state.started
    born = torch.full_like(state.met_at, started_at) if state.born is None else state.born
    censored = state.met_at < 0
    steps = state.x.step - born
    reached = steps if state.stopped_at is None else torch.where(state.stopped_at >= 0, state.stopped_at - born, steps)
    times = (torch.where(censored, reached, state.met_at - born) + lag)[started]
    censored, reached, steps = censored[started], reached[started], steps[started]
    longest = int(steps.max()) if steps.numel() else 0
    budget = int(reached[censored].max()) if bool(censored.any()) else longest
    return MeetingTimes(times=times, censored=censored, lag=lag, max_steps=max(budget, longest))


def meeting_times(sampler: GlauberSampler, x0: Tensor, y0: Tensor, *, max_steps: int, generator: Randomness = 0,
                  sites: Tensor | None = None, site_counts: Tensor | None = None, streams: Tensor | None = None,
                  freeze_met: bool = True, attention_mask: Tensor | None = None) -> MeetingTimes:
    """Meeting times of maximally coupled pairs started at ``(x0[p], y0[p])``, censored at ``max_steps``
    (``attention_mask [P, L]``: the padding both chains of pair ``p`` share).

    Met pairs leave the forward batch (``freeze_met``): the times are the same as with them running on. Cost: at
    most ``max_steps`` forwards of ``<= 2 P`` rows.

    Examples:
        Sixteen pairs from opposite corners of a 5-spin Ising chain at tau = 2 all meet well within the budget:

        >>> import torch
        >>> from mlm_dynamics import GlauberSampler, PairwiseMRFDenoiser, meeting_times
        >>> sampler = GlauberSampler(PairwiseMRFDenoiser.ising_chain(5, coupling=1.0), temperature=2.0)
        >>> ones, zeros = torch.ones(16, 5, dtype=torch.long), torch.zeros(16, 5, dtype=torch.long)
        >>> times = meeting_times(sampler, zeros, ones, max_steps=2000, generator=0)
        >>> times.censored_fraction
        0.0
        >>> summary = times.summary()
        >>> summary["num_pairs"], summary["meeting_time_median_low"] <= summary["meeting_time_median"]
        (16.0, True)
        >>> round(summary["meeting_time_median_confidence"], 3)  # the exact coverage of the order-statistic interval
        0.951
    """
    chains = CoupledGlauberChains(sampler, freeze_met=freeze_met)
    state = chains.init_state(x0, y0, generator, sites=sites, site_counts=site_counts, streams=streams,
                              attention_mask=attention_mask)
    return meeting_times_of(chains.run(state, max_steps))


def lagged_meeting_times(sampler: GlauberSampler, x0: Tensor, y0: Tensor, *, lag: int, max_steps: int,
                         generator: Randomness = 0, sites: Tensor | None = None, site_counts: Tensor | None = None,
                         streams: Tensor | None = None, freeze_met: bool = True,
                         attention_mask: Tensor | None = None) -> MeetingTimes:
    """L-lag meeting times ``tau = L + inf{t : X_{L+t} = Y_t}`` with ``X_0 = x0``, ``Y_0 = y0`` (draws from
    ``mu_0``), censored at ``L + max_steps`` (:func:`~mlm_dynamics.sampling.coupling.lagged_coupling`); their
    :meth:`MeetingTimes.tv_upper_bound` bounds ``TV(mu_0 P^t, pi)``."""
    state = lagged_coupling(sampler, x0, y0, lag=lag, max_steps=max_steps, generator=generator, sites=sites,
                            site_counts=site_counts, streams=streams, freeze_met=freeze_met,
                            attention_mask=attention_mask)
    return meeting_times_of(state, lag=lag)


@functools.cache
def cover_time_quantile(sites: int, level: float = 0.5) -> int:
    """The ``level`` quantile of the random-scan steps until every one of ``sites`` positions was chosen at least once
    (the coupon collector's time): the least ``t`` with ``P(C_n <= t) >= level``, exactly.

    A coupled pair whose chains differ at every site (a start row against a random filling of it) cannot meet before
    each site was resampled, so below this many steps even a perfect coupling meets with probability under ``level``:
    a pair censored at such a budget says nothing about the model. The law of the number ``K_t`` of sites chosen by
    step ``t`` is advanced one step at a time, ``P(K_{t+1} = k) = P(K_t = k) k / n + P(K_t = k - 1) (n - k + 1) / n``
    (all terms positive, so float64 is exact to rounding), until ``P(K_t = n) >= level``; about
    ``n (ln n + 0.37)`` steps at the median. Cost: ``O(n t)`` flops, no forward rows.

    Examples:
        >>> cover_time_quantile(16), cover_time_quantile(1)
        (51, 1)
    """
    if isinstance(sites, bool) or not isinstance(sites, int) or sites < 1:
        raise ValueError(f"sites must be an integer >= 1, got {sites!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    chosen = torch.arange(sites + 1, dtype=torch.float64)
    law = torch.zeros(sites + 1, dtype=torch.float64)
    law[0] = 1.0
    steps = 0
    while law[sites] < level:
        law = torch.cat([law[:1] * 0, law[:-1] * (sites - chosen[:-1]) / sites]) + law * chosen / sites
        steps += 1
    return steps


__all__ = ["HittingTimes", "MeetingTimes", "cover_time_quantile", "lagged_meeting_times", "meeting_times",
           "meeting_times_of"]
