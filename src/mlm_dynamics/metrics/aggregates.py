"""torchmetrics aggregates of the diagnostics, with DDP-correct reductions.

Counts reduce with ``sum``, maxima with ``max``, and per-pair or per-chain samples (meeting times, ``|R|`` values,
dwell times, draws of chain projections) with ``cat``, so every statistic computed after a sync equals the one
computed on the pooled data of all ranks.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

from .coupling import MeetingTimes
from .stats import effective_sample_size, split_rhat

DEFAULT_QUANTILES = (0.5, 0.9)


def _quantiles(values: Tensor, probs: tuple[float, ...]) -> dict[str, Tensor]:
    if values.numel() == 0:
        return {f"q{round(100 * p)}": torch.tensor(math.nan) for p in probs}
    levels = torch.tensor(probs, dtype=torch.float64, device=values.device)
    return {f"q{round(100 * p)}": q for p, q in zip(probs, values.double().quantile(levels, interpolation="higher"))}


class MeetingTimeMetric(Metric):
    """Quantiles of meeting (or hitting) times with censoring, and the coalescence fraction.

    ``compute()`` returns ``{"q50": ..., "q90": ..., "coalesced": fraction met}``; a quantile that falls among censored
    pairs is ``inf`` (the time is only known to exceed the budget).
    """

    full_state_update = False
    higher_is_better = False

    def __init__(self, quantiles: tuple[float, ...] = DEFAULT_QUANTILES, **kwargs) -> None:
        super().__init__(**kwargs)
        self.probs = tuple(quantiles)
        self.add_state("times", default=[], dist_reduce_fx="cat")
        self.add_state("censored", default=[], dist_reduce_fx="cat")

    def update(self, result: MeetingTimes) -> None:
        self.times.append(result.times.double())
        self.censored.append(result.censored.double())

    def compute(self) -> dict[str, Tensor]:
        pooled = MeetingTimes(times=dim_zero_cat(self.times), censored=dim_zero_cat(self.censored).bool())
        quantiles = pooled.quantiles(torch.tensor(self.probs))
        out = {f"q{round(100 * p)}": q for p, q in zip(self.probs, quantiles)}
        out["coalesced"] = torch.tensor(1.0 - pooled.censored_fraction, dtype=torch.float64)
        return out


class TVBoundMetric(Metric):
    """L-lag upper bound on ``TV(mu_0 P^t, pi)`` at fixed ``t`` values from pooled lagged meeting times."""

    full_state_update = False
    higher_is_better = False

    def __init__(self, lag: int, t_values: tuple[int, ...], **kwargs) -> None:
        super().__init__(**kwargs)
        if lag < 1:
            raise ValueError(f"lag must be >= 1, got {lag}")
        self.lag, self.t_values = lag, tuple(t_values)
        self.add_state("times", default=[], dist_reduce_fx="cat")
        self.add_state("censored", default=[], dist_reduce_fx="cat")

    def update(self, result: MeetingTimes) -> None:
        if result.lag != self.lag:
            raise ValueError(f"meeting times have lag {result.lag}, the metric expects {self.lag}")
        self.times.append(result.times.double())
        self.censored.append(result.censored.double())

    def compute(self) -> Tensor:
        pooled = MeetingTimes(times=dim_zero_cat(self.times), censored=dim_zero_cat(self.censored).bool(), lag=self.lag)
        return pooled.tv_upper_bound(torch.tensor(self.t_values))


class RectanglePrevalence(Metric):
    """Fraction of rectangles with ``|R|`` above tolerance, and quantiles of ``|R|``."""

    full_state_update = False

    def __init__(self, quantiles: tuple[float, ...] = DEFAULT_QUANTILES, **kwargs) -> None:
        super().__init__(**kwargs)
        self.probs = tuple(quantiles)
        self.add_state("exceed", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("total", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("magnitudes", default=[], dist_reduce_fx="cat")

    def update(self, values: Tensor, tolerance: Tensor) -> None:
        self.exceed += (values.abs() > tolerance).sum()
        self.total += values.numel()
        self.magnitudes.append(values.abs().double().flatten())

    def compute(self) -> dict[str, Tensor]:
        out = {f"abs_r_{k}": v for k, v in _quantiles(dim_zero_cat(self.magnitudes), self.probs).items()}
        out["prevalence"] = self.exceed / self.total.clamp_min(1)
        return out


class DobrushinCoefficient(Metric):
    """Largest estimated column sum ``max_j sum_i alpha_ij`` seen (a lower estimate of the true sup)."""

    full_state_update = False
    higher_is_better = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("value", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="max")

    def update(self, dobrushin: Tensor) -> None:
        self.value = torch.maximum(self.value, dobrushin.double().max())

    def compute(self) -> Tensor:
        return self.value


class DwellTime(Metric):
    """Mean and quantiles of trap dwell times."""

    full_state_update = False

    def __init__(self, quantiles: tuple[float, ...] = DEFAULT_QUANTILES, **kwargs) -> None:
        super().__init__(**kwargs)
        self.probs = tuple(quantiles)
        self.add_state("dwell", default=[], dist_reduce_fx="cat")

    def update(self, dwell_times: Tensor) -> None:
        self.dwell.append(dwell_times.double().flatten())

    def compute(self) -> dict[str, Tensor]:
        values = dim_zero_cat(self.dwell)
        out = _quantiles(values, self.probs)
        out["mean"] = values.mean() if values.numel() else torch.tensor(math.nan)
        return out


class ChainConvergence(Metric):
    """Rank-normalised split R-hat and bulk ESS of a scalar projection, from draws ``[chains, T]`` per update.

    Each ``update`` appends chains (rows); draws of all ranks are pooled along the chain axis, so every rank must
    record the same number of draws per chain.
    """

    full_state_update = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("draws", default=[], dist_reduce_fx="cat")

    def update(self, draws: Tensor) -> None:
        if draws.dim() != 2:
            raise ValueError(f"draws must have shape [chains, T], got {tuple(draws.shape)}")
        self.draws.append(draws.double())

    def compute(self) -> dict[str, Tensor]:
        draws = dim_zero_cat(self.draws)
        return {"rhat": torch.tensor(split_rhat(draws)), "ess": torch.tensor(effective_sample_size(draws))}
