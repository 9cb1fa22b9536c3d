"""torchmetrics aggregates of the diagnostics, with DDP-correct reductions.

Each metric only pools raw samples and hands them to the result dataclass of :mod:`mlm_dynamics.diagnostics`, whose
``summary()`` computes the reported values: a statistic has one name and one value whether it comes from the CLI, a
callback or a metric. Per-pair or per-chain samples (meeting times, ``|R|`` values, dwell times, draws of chain
projections) reduce with ``cat`` and maxima with ``max``, so every statistic computed after a sync equals the one
computed on the pooled data of all ranks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

from ..diagnostics.convergence import ess, rhat
from ..diagnostics.decoding import (
    TEMPERATURE_GRID,
    DecodingSummary,
    effective_temperature_from,
    surprisal_statistics,
)
from ..diagnostics.meeting import MeetingTimes
from ..diagnostics.quantiles import DEFAULT_LEVELS, check_levels, quantile_summary
from ..diagnostics.rectangle import RectangleReport
from ..diagnostics.witness import DEFAULT_EPSILON, witness_bound
from ..sampling.categorical import check_temperature


class MeetingTimeMetric(Metric):
    """Meeting (or hitting) times with censoring: ``compute()`` is :meth:`MeetingTimes.summary` of the pooled pairs.

    With ``tv_steps`` (lagged meeting times) the L-lag TV bounds ``tv_bound_t{t}`` are included.
    """

    full_state_update = False
    higher_is_better = False
    times: list[Tensor]
    censored: list[Tensor]
    max_steps: Tensor
    lag: Tensor

    def __init__(self, levels: Sequence[float] = DEFAULT_LEVELS, tv_steps: Sequence[int] = (), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.levels, self.tv_steps = check_levels(levels), tuple(tv_steps)
        self.add_state("times", default=[], dist_reduce_fx="cat")
        self.add_state("censored", default=[], dist_reduce_fx="cat")
        self.add_state("max_steps", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="max")
        self.add_state("lag", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="max")

    def update(self, result: MeetingTimes) -> None:
        """Add one batch of meeting times (pairs pooled across batches and DDP ranks)."""
        if self.times and result.lag != int(self.lag):
            raise ValueError(f"meeting times have lag {result.lag}, earlier updates had lag {int(self.lag)}")
        self.times.append(result.times.double())
        self.censored.append(result.censored.double())
        self.max_steps = torch.maximum(self.max_steps, torch.tensor(int(result.budget) - result.lag))
        self.lag = torch.maximum(self.lag, torch.tensor(result.lag))

    def pooled(self) -> MeetingTimes:
        """All meeting times seen so far, as one :class:`MeetingTimes`."""
        return MeetingTimes(times=dim_zero_cat(self.times), censored=dim_zero_cat(self.censored).bool(),
                            lag=int(self.lag), max_steps=int(self.max_steps))

    def compute(self) -> dict[str, float]:
        """``MeetingTimes.summary()`` of the pooled times."""
        return self.pooled().summary(self.levels, self.tv_steps)


class MixingLowerBoundMetric(Metric):
    """Values of one witness on coupled pairs at one step, pooled over batches and DDP ranks: ``compute()`` is the
    certified lower bound of :func:`~mlm_dynamics.diagnostics.witness.witness_bound` on the pooled pairs (``tv_lower``,
    ``d_lower``, ``mixing_time_exceeds`` where certified, ``chains_needed``), paired by default, so pairs frozen at
    meeting count as they are."""

    full_state_update = False
    higher_is_better = False
    values_a: list[Tensor]
    values_b: list[Tensor]
    step: Tensor

    def __init__(self, *, binary: bool = True, paired: bool = True, level: float = 0.95,
                 epsilon: float = DEFAULT_EPSILON, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.binary, self.paired, self.level, self.epsilon = binary, paired, level, epsilon
        self.add_state("values_a", default=[], dist_reduce_fx="cat")
        self.add_state("values_b", default=[], dist_reduce_fx="cat")
        self.add_state("step", default=torch.tensor(-1, dtype=torch.long), dist_reduce_fx="max")

    def update(self, values_a: Tensor, values_b: Tensor, step: int) -> None:
        """Add the witness values ``[N]`` of the pairs' two chains at ``step`` (every update at the same step)."""
        if int(self.step) >= 0 and step != int(self.step):
            raise ValueError(f"step {step} differs from the step {int(self.step)} of earlier updates")
        self.values_a.append(values_a.double())
        self.values_b.append(values_b.double())
        self.step = torch.tensor(step, dtype=torch.long)

    def compute(self) -> dict[str, float]:
        """The bound's ``tv_lower``, ``d_lower``, ``mixing_time_exceeds`` (missing where nothing is certified) and
        ``chains_needed``; nothing with fewer than 2 pairs."""
        a, b = dim_zero_cat(self.values_a), dim_zero_cat(self.values_b)
        if a.numel() < 2:
            return {}
        summary = witness_bound(a[None, None], b[None, None], times=[int(self.step)], binary=[self.binary],
                                names=["witness"], level=self.level, epsilon=self.epsilon,
                                paired=self.paired).summary()
        return {k: summary[k] for k in ("tv_lower", "d_lower", "mixing_time_exceeds", "chains_needed")
                if math.isfinite(summary[k])}


class RectanglePrevalence(Metric):
    """Rectangle statistics of the pooled rectangles: :meth:`RectangleReport.summary`."""

    full_state_update = False
    values: list[Tensor]
    distances: list[Tensor]
    tolerance: list[Tensor]

    def __init__(self, levels: Sequence[float] = DEFAULT_LEVELS, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.levels = check_levels(levels)
        for name in ("values", "distances", "tolerance"):
            self.add_state(name, default=[], dist_reduce_fx="cat")

    def update(self, report: RectangleReport) -> None:
        """Add the rectangles of one report."""
        self.values.append(report.values.double())
        self.distances.append(report.distances.double())
        self.tolerance.append(report.tolerance.double())

    def compute(self) -> dict[str, float]:
        """``RectangleReport.summary()`` of the pooled rectangles."""
        report = RectangleReport(values=dim_zero_cat(self.values), distances=dim_zero_cat(self.distances),
                                 tolerance=dim_zero_cat(self.tolerance))
        return report.summary(self.levels)


class DobrushinCoefficient(Metric):
    """Largest estimated column sum ``max_j sum_i alpha_ij`` seen (a lower estimate of the true sup)."""

    full_state_update = False
    higher_is_better = False
    value: Tensor

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("value", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="max")

    def update(self, dobrushin: Tensor) -> None:
        """Add coefficient estimates (each one a lower estimate of Dobrushin's coefficient)."""
        self.value = torch.maximum(self.value, dobrushin.double().max())

    def compute(self) -> Tensor:
        """The largest estimate seen (still a lower estimate of the coefficient)."""
        return self.value


class DwellTime(Metric):
    """Trap dwell times: ``dwell_time_mean`` and the quantiles ``dwell_time_median``, ``dwell_time_q90``, ..."""

    full_state_update = False
    dwell: list[Tensor]

    def __init__(self, levels: Sequence[float] = DEFAULT_LEVELS, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.levels = check_levels(levels)
        self.add_state("dwell", default=[], dist_reduce_fx="cat")

    def update(self, dwell_times: Tensor) -> None:
        """Add completed dwell times (steps spent in a trap)."""
        self.dwell.append(dwell_times.double().flatten())

    def compute(self) -> dict[str, float]:
        """Mean, median and q90 of the dwell times, and their count."""
        values = dim_zero_cat(self.dwell)
        out = {"dwell_time_mean": float(values.mean()) if values.numel() else float("nan")}
        out.update(quantile_summary("dwell_time", values, self.levels))
        return out


class ChainConvergence(Metric):
    """Rank-normalised split R-hat and bulk ESS of a scalar projection, from draws ``[chains, T]`` per update.

    Each ``update`` appends chains (rows); draws of all ranks are pooled along the chain axis, so every rank must
    record the same number of draws per chain.
    """

    full_state_update = False
    draws: list[Tensor]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("draws", default=[], dist_reduce_fx="cat")

    def update(self, draws: Tensor) -> None:
        """Add chains: draws ``[chains, T]`` (appended along the chain axis)."""
        if draws.dim() != 2:
            raise ValueError(f"draws must have shape [chains, T], got {tuple(draws.shape)}")
        self.draws.append(draws.double())

    def compute(self) -> dict[str, float]:
        """Rank-normalised split R-hat and bulk ESS of the draws so far."""
        draws = dim_zero_cat(self.draws)
        return {"rhat": float(rhat(draws)), "ess": float(ess(draws))}


class DecodingQuality(Metric):
    """Repetition and diversity of generated samples: :meth:`DecodingSummary.summary` of the pooled samples
    (``repetition_n``, ``distinct_n``, ``longest_run_mean``, ``pairwise_hamming``, ``duplicate_rate``)."""

    full_state_update = False
    samples: list[Tensor]
    ignore: list[Tensor]

    def __init__(self, orders: Sequence[int] = (1, 2, 3), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.orders = tuple(orders)
        self.add_state("samples", default=[], dist_reduce_fx="cat")
        self.add_state("ignore", default=[], dist_reduce_fx="cat")

    def update(self, samples: Tensor, ignore: Tensor | None = None) -> None:
        """Add samples ``[B, L]``; ``ignore [B, L]`` marks positions left out (padding, still masked)."""
        self.samples.append(samples.long())
        self.ignore.append(torch.zeros_like(samples, dtype=torch.bool) if ignore is None else ignore.bool())

    def compute(self) -> dict[str, float]:
        """Repetition and diversity statistics of the samples so far."""
        return DecodingSummary(dim_zero_cat(self.samples), dim_zero_cat(self.ignore), self.orders).summary()


class EffectiveTemperature(Metric):
    """The temperature draws actually came from, against the intended one (:func:`effective_temperature`):
    ``effective_temperature`` (or, beyond the grid of 0.25 to 4 times the intended temperature, only
    ``effective_temperature_upper_bound`` / ``_lower_bound``), ``surprisal_mean``, ``entropy_mean``,
    ``surprisal_gap_z``. Sums only, so DDP pools."""

    full_state_update = False
    total: Tensor
    squares: Tensor
    expected: Tensor
    count: Tensor

    def __init__(self, temperature: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.temperature = check_temperature(temperature)
        zero = torch.tensor(0.0, dtype=torch.float64)
        self.add_state("total", default=zero.clone(), dist_reduce_fx="sum")
        self.add_state("squares", default=zero.clone(), dist_reduce_fx="sum")
        self.add_state("expected", default=torch.zeros(len(TEMPERATURE_GRID), dtype=torch.float64),
                       dist_reduce_fx="sum")
        self.add_state("count", default=zero.clone(), dist_reduce_fx="sum")

    def update(self, logits: Tensor, draws: Tensor) -> None:
        """``logits [N, V]`` (tau = 1) of the rows the sampler drew ``draws [N]`` from."""
        total, squares, expected = surprisal_statistics(logits, draws, self.temperature)
        self.total += total.to(self.total.device)
        self.squares += squares.to(self.squares.device)
        self.expected += expected.to(self.expected.device)
        self.count += len(draws)

    def compute(self) -> dict[str, float]:
        """Effective temperature of the draws so far, with the mean surprisal it matches."""
        return effective_temperature_from(self.total.cpu(), self.squares.cpu(), self.expected.cpu(), int(self.count),
                                          self.temperature)


__all__ = ["ChainConvergence", "DecodingQuality", "DobrushinCoefficient", "DwellTime", "EffectiveTemperature",
           "MeetingTimeMetric", "MixingLowerBoundMetric", "RectanglePrevalence"]
