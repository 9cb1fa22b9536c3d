"""Meeting times under censoring: the Kaplan-Meier survival curve, its median, the restricted mean, and intervals.

Pairs that have not met within the budget are censored: their meeting time is only known to exceed it. A pooled
median of such times is unstable at low temperature, where a pair meets fast when both chains fall into one basin and
never when they fall into different ones. The quantities here use every pair as what it is:

- the Kaplan-Meier estimate ``S(t) = prod_{t_i <= t} (1 - d_i / r_i)`` of ``P(T > t)`` (``d_i`` meetings at
  ``t_i``, ``r_i`` pairs still at risk); with every censoring at one budget it is the fraction of pairs not met by
  ``t``;
- its median ``inf{t : S(t) <= 1/2}``, censored (only a lower bound, the budget) when ``S`` stays above 1/2;
- the restricted mean ``E min(T, b) = int_0^b S(t) dt`` up to the budget ``b``: finite, defined for every cell and
  monotone in how long pairs take, so a phase diagram coloured by it (over ``n log n``) shows the slowing down rather
  than the checkerboard of a bimodal median;
- percentile bootstrap intervals over pairs for both (``replicates`` resamples).

Cost: one sort of the pairs per cell, ``replicates`` more for the intervals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .._random import Randomness, as_generator
from .quantiles import quantiles


def kaplan_meier(times: Tensor, censored: Tensor) -> tuple[Tensor, Tensor]:
    """``(t [K], S [K])``: the distinct event times and ``S`` just after each (float64). Censored times count as at
    risk up to and including their time."""
    times, censored = times.double().flatten(), censored.bool().flatten()
    if times.numel() == 0:
        return torch.zeros(0, dtype=torch.float64), torch.zeros(0, dtype=torch.float64)
    events = times[~censored]
    grid = events.unique()
    at_risk = (times[None, :] >= grid[:, None]).sum(1).double()
    deaths = (events[None, :] == grid[:, None]).sum(1).double()
    return grid, torch.cumprod(1 - deaths / at_risk, 0)


def survival_at(grid: Tensor, survival: Tensor, t: Tensor) -> Tensor:
    """``S(t)`` of a Kaplan-Meier step function at each ``t`` (1 before the first event)."""
    index = torch.searchsorted(grid, t.double(), right=True)
    padded = torch.cat([torch.ones(1, dtype=torch.float64), survival])
    return padded[index]


def km_median(times: Tensor, censored: Tensor) -> tuple[float, bool]:
    """``(median, censored)``: the first event time where ``S <= 1/2``; ``(budget, True)`` when ``S`` stays above."""
    grid, survival = kaplan_meier(times, censored)
    below = (survival <= 0.5).nonzero()
    if len(below):
        return float(grid[below[0, 0]]), False
    return float(times.double().max()) if times.numel() else math.nan, True


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


@dataclass
class SurvivalSummary:
    """Censoring-aware summaries of one group of meeting times (a cell, or one start kind within it).

    Attributes:
        num_pairs, censored_fraction, budget: the group and its censoring.
        median, median_censored: Kaplan-Meier median (the budget, flagged, when more than half are censored).
        median_low, median_high: bootstrap interval of the median (``inf`` where a replicate's median is censored).
        restricted_mean, restricted_mean_low, restricted_mean_high: ``E min(T, budget)`` and its interval.
    """

    num_pairs: int
    censored_fraction: float
    budget: float
    median: float
    median_censored: bool
    median_low: float
    median_high: float
    restricted_mean: float
    restricted_mean_low: float
    restricted_mean_high: float

    def summary(self, name: str = "meeting_time") -> dict[str, float]:
        """``{name}_km_median`` (+ ``_low``/``_high``), ``{name}_km_median_censored``, ``{name}_restricted_mean``
        (+ ``_low``/``_high``), ``censored_fraction``, ``num_pairs``."""
        return {f"{name}_km_median": self.median, f"{name}_km_median_low": self.median_low,
                f"{name}_km_median_high": self.median_high, f"{name}_km_median_censored": float(self.median_censored),
                f"{name}_restricted_mean": self.restricted_mean,
                f"{name}_restricted_mean_low": self.restricted_mean_low,
                f"{name}_restricted_mean_high": self.restricted_mean_high,
                "censored_fraction": self.censored_fraction, "num_pairs": float(self.num_pairs)}


def summarise_survival(times: Tensor, censored: Tensor, budget: float, *, replicates: int = 200, level: float = 0.95,
                       generator: Randomness = 0) -> SurvivalSummary:
    """:class:`SurvivalSummary` of ``times [P]`` with ``censored [P]``, intervals from ``replicates`` resamples of
    the pairs (percentile, ``level``) drawn from ``generator``."""
    if replicates < 1 or not 0 < level < 1:
        raise ValueError(f"replicates must be >= 1 and level in (0, 1), got {replicates}, {level}")
    times, censored = times.double().cpu(), censored.bool().cpu()
    count = times.numel()
    if count == 0:
        return SurvivalSummary(0, math.nan, budget, math.nan, True, math.nan, math.nan, math.nan, math.nan, math.nan)
    median, median_censored = km_median(times, censored)
    mean = restricted_mean(times, censored, budget)
    picks = torch.randint(count, (replicates, count), generator=as_generator(generator, device="cpu"))
    medians, means = [], []
    for pick in picks:
        value, flagged = km_median(times[pick], censored[pick])
        medians.append(math.inf if flagged else value)
        means.append(restricted_mean(times[pick], censored[pick], budget))
    bounds = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64)
    median_low, median_high = _percentiles(torch.tensor(medians, dtype=torch.float64), bounds)
    mean_low, mean_high = _percentiles(torch.tensor(means, dtype=torch.float64), bounds)
    return SurvivalSummary(num_pairs=count, censored_fraction=float(censored.double().mean()), budget=budget,
                           median=median, median_censored=median_censored, median_low=median_low,
                           median_high=median_high, restricted_mean=mean, restricted_mean_low=mean_low,
                           restricted_mean_high=mean_high)


def _percentiles(values: Tensor, levels: Tensor) -> tuple[float, float]:
    """Lower and upper percentile (type 7); ``inf`` values (censored replicates) sort last."""
    low, high = quantiles(values, levels.tolist()).tolist()
    return low, high


__all__ = ["SurvivalSummary", "kaplan_meier", "km_median", "restricted_mean", "summarise_survival", "survival_at"]
