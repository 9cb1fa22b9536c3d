"""Censored times (meeting, hitting): the one module that turns them into numbers, each with its interval.

A pair that has not met within the budget is censored: its time ``T`` is only known to exceed the budget. Every
number here is honest about that:

- the Kaplan-Meier estimate ``S(t) = prod_{t_i <= t} (1 - d_i / r_i)`` of ``P(T > t)`` (``d_i`` meetings at
  ``t_i``, ``r_i`` pairs still at risk); with every censoring at one budget it is the fraction of pairs not met by
  ``t``;
- its quantiles ``Q(p) = inf{t : S(t) <= 1 - p}`` (the project's one definition for censored times; without
  censoring the order statistic ``T_(ceil(m p))``). Where ``S`` stays above ``1 - p`` the quantile is unknown: it is
  reported as missing with a lower bound (the largest time observed), never as a value;
- distribution-free confidence intervals for ``Q(p)`` from order statistics: ``P(T_(r) <= Q(p) <= T_(s)) >=
  sum_{k=r}^{s-1} C(m, k) p^k (1 - p)^(m - k)`` (exact for continuous laws, conservative with ties). Censored pairs
  enter as what is known of them, ``T_(r)`` from the observed times (a censored time at its budget is a lower
  bound) and ``T_(s)`` from the times with the censored ones set to ``+inf``, so the interval holds under any
  censoring; ``high = inf`` says the data bound the quantile only from below. With ``m`` pairs no interval can
  cover more than ``1 - p^m - (1 - p)^m`` (87.5 % for the median of 4): the achieved level is reported, never the
  one asked for;
- the restricted mean ``E min(T, b) = int_0^b S(t) dt`` (a lower bound of ``E T`` when any pair is censored), with
  an interval from the exact one-sided Kolmogorov-Smirnov band (Birnbaum-Tingey) of each side at ``(1 - level) / 2``
  integrated up to ``b``: coverage at least ``level`` for any law, and never of zero width (all pairs censored give
  ``[b (1 - eps), b]``).

No resampling: every interval is a deterministic function of the times. Cost: one sort of the ``m`` times per
quantile and ``O(m)`` binomial and band terms.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import torch
from scipy import stats
from torch import Tensor

from .quantiles import DEFAULT_LEVELS, check_levels, quantile_key

DEFAULT_CONFIDENCE = 0.95


def kaplan_meier(times: Tensor, censored: Tensor) -> tuple[Tensor, Tensor]:
    """``(t [K], S [K])``: the distinct event times and ``S`` just after each (float64). Censored times count as at
    risk up to and including their time."""
    times, censored = times.double().flatten().cpu(), censored.bool().flatten().cpu()
    if times.numel() == 0:
        return torch.zeros(0, dtype=torch.float64), torch.zeros(0, dtype=torch.float64)
    events = times[~censored]
    grid = events.unique()
    at_risk = (times[None, :] >= grid[:, None]).sum(1).double()
    deaths = (events[None, :] == grid[:, None]).sum(1).double()
    return grid, torch.cumprod(1 - deaths / at_risk, 0)


def survival_at(grid: Tensor, survival: Tensor, t: Tensor) -> Tensor:
    """``S(t)`` of a Kaplan-Meier step function at each ``t`` (1 before the first event)."""
    index = torch.searchsorted(grid, t.double().cpu(), right=True)
    padded = torch.cat([torch.ones(1, dtype=torch.float64), survival])
    return padded[index]


def km_quantile(times: Tensor, censored: Tensor, level: float) -> tuple[float, bool]:
    """``(Q(level), False)`` with ``Q(p) = inf{t : S(t) <= 1 - p}`` of the Kaplan-Meier curve, or ``(lower bound,
    True)`` where ``S`` stays above ``1 - p``: the sample's quantile then lies beyond the largest time observed (an
    estimate of a lower bound of the true quantile, which its order-statistic interval covers at its level).
    ``nan`` for no times."""
    if times.numel() == 0:
        return math.nan, True
    grid, survival = kaplan_meier(times, censored)
    below = (survival <= 1 - level + 1e-12).nonzero()  # 1e-12: S is a product of rationals, 1 - p a float
    if len(below):
        return float(grid[below[0, 0]]), False
    return float(times.double().max()), True


def km_median(times: Tensor, censored: Tensor) -> tuple[float, bool]:
    """:func:`km_quantile` at 1/2."""
    return km_quantile(times, censored, 0.5)


@lru_cache(maxsize=256)
def _binomial_cdf(count: int, level: float) -> tuple[float, ...]:
    """``P(Bin(count, level) <= k)`` for ``k = 0..count``."""
    return tuple(float(v) for v in stats.binom.cdf(range(count + 1), count, level))


def _check_quantile_level(level: float, confidence: float) -> None:
    if not 0 < level < 1 or not 0 < confidence < 1:
        raise ValueError(f"level and confidence must be in (0, 1), got {level}, {confidence}")


def order_statistic_ranks(count: int, level: float, confidence: float = DEFAULT_CONFIDENCE) -> tuple[int, int, float]:
    """``(r, s, achieved)``: the narrowest ranks (1-based) with ``P(T_(r) <= Q(level) <= T_(s)) >= confidence`` for
    ``count`` independent times, ties broken towards higher coverage; ``(1, count, achieved)`` with the achieved
    coverage when no pair of ranks reaches ``confidence``. Needs ``count >= 2``."""
    _check_quantile_level(level, confidence)
    if count < 2:
        raise ValueError(f"an order-statistic interval needs at least 2 times, got {count}")
    cdf = torch.tensor(_binomial_cdf(count, level), dtype=torch.float64)
    ranks = torch.arange(1, count, dtype=torch.long)  # r = 1 .. count - 1
    below = cdf[ranks - 1]
    # smallest s - 1 with cdf[s - 1] >= confidence + cdf[r - 1]
    top = torch.searchsorted(cdf, below + confidence - 1e-12).clamp_max(count) + 1
    feasible = top <= count
    if not feasible.any():
        return 1, count, float(cdf[count - 1] - cdf[0])
    width = torch.where(feasible, top - ranks, count + 1)
    best = width == width.min()
    coverage = torch.where(best, cdf[(top - 1).clamp_max(count)] - below, -1.0)
    index = int(coverage.argmax())
    r, s = int(ranks[index]), int(top[index])
    return r, s, float(cdf[s - 1] - cdf[r - 1])


def lower_rank(count: int, level: float, confidence: float) -> int:
    """Largest ``r`` with ``P(T_(r) <= Q(level)) = P(Bin(count, level) >= r) >= confidence``; 0 when even the minimum
    is not a lower bound at that confidence."""
    _check_quantile_level(level, confidence)
    cdf = _binomial_cdf(count, level)
    return max((r for r in range(1, count + 1) if 1 - cdf[r - 1] >= confidence - 1e-12), default=0)


def upper_rank(count: int, level: float, confidence: float) -> int:
    """Smallest ``s`` with ``P(Q(level) <= T_(s)) = P(Bin(count, level) <= s - 1) >= confidence``; ``count + 1``
    (no upper bound) when even the maximum is not one at that confidence."""
    _check_quantile_level(level, confidence)
    cdf = _binomial_cdf(count, level)
    return min((s for s in range(1, count + 1) if cdf[s - 1] >= confidence - 1e-12), default=count + 1)


def bracket(times: Tensor, censored: Tensor) -> tuple[Tensor, Tensor]:
    """``(lower, upper)`` sorted float64 values that bracket each unknown time: ``lower`` the observed times (a
    censored time is only known to exceed its value), ``upper`` the same with censored times at ``+inf``."""
    times, censored = times.double().flatten().cpu(), censored.bool().flatten().cpu()
    return times.sort().values, times.masked_fill(censored, math.inf).sort().values


def quantile_bounds(times: Tensor, censored: Tensor, level: float, confidence: float) -> tuple[float, float]:
    """One-sided bounds ``(low, high)`` of ``Q(level)``, each holding with probability at least ``confidence``:
    ``low = T_(r)`` (``0`` when no order statistic is low enough), ``high = T_(s)`` (``inf`` when censored or beyond
    the sample). Union bound: both hold together with probability at least ``2 confidence - 1``."""
    count = times.numel()
    if count == 0:
        return 0.0, math.inf
    lower, upper = bracket(times, censored)
    r, s = lower_rank(count, level, confidence), upper_rank(count, level, confidence)
    return (float(lower[r - 1]) if r else 0.0), (float(upper[s - 1]) if s <= count else math.inf)


@dataclass(frozen=True)
class QuantileEstimate:
    """The quantile ``Q(level)`` of censored times.

    Attributes:
        level: ``p``.
        value: ``Q(p)`` of the Kaplan-Meier curve; ``nan`` when censored (unknown).
        censored: whether ``Q(p)`` lies beyond the data; ``lower_bound`` is then what is known (the largest time).
        low, high: order-statistic interval (``high = inf``: unbounded above), ``nan`` for fewer than 2 times.
        confidence: its achieved coverage (at least this for any law; exact for continuous laws).
    """

    level: float
    value: float
    censored: bool
    lower_bound: float
    low: float
    high: float
    confidence: float

    def summary(self, name: str) -> dict[str, float]:
        """``{name}_{key}`` (``nan`` when censored, so JSON has ``null`` and loggers skip it),
        ``{name}_{key}_lower_bound`` (only when censored), ``{name}_{key}_low``, ``{name}_{key}_high`` (``inf``:
        unbounded) and ``{name}_{key}_confidence``, with ``key`` from :func:`~.quantiles.quantile_key`."""
        key = f"{name}_{quantile_key(self.level)}"
        out = {key: self.value}
        if self.censored:
            out[f"{key}_lower_bound"] = self.lower_bound
        out.update({f"{key}_low": self.low, f"{key}_high": self.high, f"{key}_confidence": self.confidence})
        return out


def estimate_quantile(times: Tensor, censored: Tensor, level: float,
                      confidence: float = DEFAULT_CONFIDENCE) -> QuantileEstimate:
    """:class:`QuantileEstimate` of ``times [m]`` with ``censored [m]``: the Kaplan-Meier quantile and the narrowest
    order-statistic interval reaching ``confidence`` (or ``[min, max]`` with the coverage it achieves)."""
    _check_quantile_level(level, confidence)
    value, flagged = km_quantile(times, censored, level)
    count = times.numel()
    if count < 2:
        return QuantileEstimate(level, math.nan if flagged else value, flagged, value if flagged else math.nan,
                                math.nan, math.nan, math.nan)
    lower, upper = bracket(times, censored)
    r, s, achieved = order_statistic_ranks(count, level, confidence)
    return QuantileEstimate(level=level, value=math.nan if flagged else value, censored=flagged,
                            lower_bound=value if flagged else math.nan, low=float(lower[r - 1]),
                            high=float(upper[s - 1]), confidence=achieved)


def restricted_mean(times: Tensor, censored: Tensor, budget: float) -> float:
    """``int_0^budget S(t) dt`` of the Kaplan-Meier curve (``mean(min(T, budget))`` when every censoring is at the
    budget)."""
    if times.numel() == 0:
        return math.nan
    grid, survival = kaplan_meier(times, censored)
    inside = grid < budget
    edges = torch.cat([torch.zeros(1, dtype=torch.float64), grid[inside], torch.tensor([budget], dtype=torch.float64)])
    heights = torch.cat([torch.ones(1, dtype=torch.float64), survival[inside]])
    return float((heights * edges.diff()).sum())


def ks_band(count: int, confidence: float) -> float:
    """``eps`` with ``P(sup_t (F_m(t) - F(t)) >= eps) = 1 - confidence`` for the empirical CDF ``F_m`` of ``count``
    independent draws of a continuous ``F``: the exact one-sided Kolmogorov-Smirnov quantile (Birnbaum & Tingey
    1951, ``scipy.stats.ksone``); conservative for discrete laws."""
    _check_quantile_level(0.5, confidence)
    return float(stats.ksone.isf(1 - confidence, count))


def restricted_mean_interval(times: Tensor, censored: Tensor, budget: float,
                             confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float]:
    """``(low, high)`` covering ``E min(T, budget)`` with probability at least ``confidence``: the one-sided KS band
    at ``(1 + confidence) / 2`` below the survival of the observed times and above that of the times with censored
    ones at ``+inf``, each integrated over ``[0, budget]``."""
    count = times.numel()
    if count == 0:
        return math.nan, math.nan
    eps = ks_band(count, (1 + confidence) / 2)
    lower, upper = bracket(times, censored)

    def integral(values: Tensor, shift: float) -> float:
        cuts = torch.cat([torch.zeros(1, dtype=torch.float64), values.clamp(0, budget),
                          torch.tensor([budget], dtype=torch.float64)])
        heights = 1 - torch.arange(count + 1, dtype=torch.float64) / count  # S just after each sorted value
        return float(((heights + shift).clamp(0, 1) * cuts.diff()).sum())

    return integral(lower, -eps), integral(upper, eps)


@dataclass
class SurvivalSummary:
    """Censoring-aware summaries of one group of times (a cell, one start kind within it, a probe's pairs).

    Attributes:
        num_pairs, censored_fraction, budget: the group and its censoring.
        quantiles: :class:`QuantileEstimate` per level (the median first by default).
        restricted_mean, restricted_mean_low, restricted_mean_high: ``E min(T, budget)`` and its KS interval (at
            least ``confidence``); a lower bound of ``E T`` when ``censored_fraction > 0``.
        confidence: the confidence asked for.
    """

    num_pairs: int
    censored_fraction: float
    budget: float
    quantiles: dict[float, QuantileEstimate] = field(default_factory=dict)
    restricted_mean: float = math.nan
    restricted_mean_low: float = math.nan
    restricted_mean_high: float = math.nan
    confidence: float = DEFAULT_CONFIDENCE

    @property
    def median(self) -> QuantileEstimate:
        """The estimate at level 1/2 (a KeyError if it was not summarised)."""
        return self.quantiles[0.5]

    def summary(self, name: str = "meeting_time") -> dict[str, float]:
        """Each quantile's keys (:meth:`QuantileEstimate.summary`), ``{name}_restricted_mean`` (+ ``_low``/``_high``),
        ``censored_fraction``, ``num_pairs`` and ``budget``."""
        out: dict[str, float] = {}
        for estimate in self.quantiles.values():
            out.update(estimate.summary(name))
        out.update({f"{name}_restricted_mean": self.restricted_mean,
                    f"{name}_restricted_mean_low": self.restricted_mean_low,
                    f"{name}_restricted_mean_high": self.restricted_mean_high,
                    "censored_fraction": self.censored_fraction, "num_pairs": float(self.num_pairs),
                    "budget": self.budget})
        return out


def summarise_survival(times: Tensor, censored: Tensor, budget: float, *, levels: Sequence[float] = DEFAULT_LEVELS,
                       confidence: float = DEFAULT_CONFIDENCE) -> SurvivalSummary:
    """:class:`SurvivalSummary` of ``times [m]`` with ``censored [m]`` followed for at most ``budget`` steps.

    Examples:
        Four pairs, one met at 5 steps, three censored at 50: the median is unknown (only above 50), and with four
        pairs the widest interval, ``[min, max]``, covers it with probability 87.5 %, not 95 %:

        >>> import torch
        >>> from mlm_dynamics.diagnostics.survival import summarise_survival
        >>> s = summarise_survival(torch.tensor([5, 50, 50, 50]), torch.tensor([False, True, True, True]), 50.0)
        >>> s.median.censored, s.median.lower_bound, s.median.low, s.median.high, s.median.confidence
        (True, 50.0, 5.0, inf, 0.875)
    """
    levels = check_levels(levels)
    times, censored = times.double().flatten().cpu(), censored.bool().flatten().cpu()
    count = times.numel()
    if count == 0:
        return SurvivalSummary(0, math.nan, budget, confidence=confidence)
    low, high = restricted_mean_interval(times, censored, budget, confidence)
    return SurvivalSummary(num_pairs=count, censored_fraction=float(censored.double().mean()), budget=budget,
                           quantiles={p: estimate_quantile(times, censored, p, confidence) for p in levels},
                           restricted_mean=restricted_mean(times, censored, budget), restricted_mean_low=low,
                           restricted_mean_high=high, confidence=confidence)


__all__ = ["DEFAULT_CONFIDENCE", "QuantileEstimate", "SurvivalSummary", "bracket", "estimate_quantile",
           "kaplan_meier", "km_median", "km_quantile", "ks_band", "lower_rank", "order_statistic_ranks",
           "quantile_bounds", "restricted_mean", "restricted_mean_interval", "summarise_survival", "survival_at",
           "upper_rank"]
