"""Scaling of meeting and hitting times with the number of sites, and the phase boundary in (tau, n).

Fast mixing predicts ``E T = C(tau) n log n`` with bounded ``C(tau)``. :func:`fit_n_log_n` estimates
``C = sum_k T_k s_k / sum_k s_k^2`` with ``s_k = n_k log n_k`` (least squares through the origin) and the coefficient
of determination ``R^2 = 1 - sum (T_k - C s_k)^2 / sum (T_k - mean T)^2``; :func:`fit_log_log` the slope of
``log T`` against ``log(n log n)``, about 1 where the O(n log n) claim holds. :func:`fit_scaling` fits the mean times
of the lengths whose pairs all met (a censored mean is only a lower bound, so censored lengths are left out) and gives
percentile bootstrap intervals over pairs.

The phase boundary ``tau_c(n)`` is where the censored fraction of the meeting times crosses 1/2 (equivalently, the
Kaplan-Meier median crosses the budget), interpolated linearly in ``log tau`` between grid temperatures;
:func:`boundary_interval` adds a bootstrap interval over pairs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from .._random import Randomness, as_generator
from .meeting import MeetingTimes
from .quantiles import quantiles


def fit_n_log_n(num_sites: Sequence[int], mean_times: Sequence[float]) -> tuple[float, float]:
    """``(C, R^2)`` of the fit ``T = C n log n`` through the origin (``R^2`` is ``nan`` for a single point)."""
    n = torch.tensor(list(num_sites), dtype=torch.float64)
    times = torch.tensor(list(mean_times), dtype=torch.float64)
    if len(n) != len(times) or len(n) == 0 or (n < 2).any():
        raise ValueError("num_sites and mean_times must be equal-length, non-empty, with every n >= 2")
    scale = n * n.log()
    slope = float((times * scale).sum() / (scale * scale).sum())
    residual = ((times - slope * scale) ** 2).sum()
    total = ((times - times.mean()) ** 2).sum()
    r_squared = float(1 - residual / total) if total > 0 else math.nan
    return slope, r_squared


def fit_log_log(num_sites: Sequence[int], mean_times: Sequence[float]) -> float:
    """Least-squares slope of ``log T`` against ``log(n log n)`` (``nan`` for fewer than two lengths)."""
    if len(num_sites) < 2:
        return math.nan
    n = torch.tensor(list(num_sites), dtype=torch.float64)
    x, y = (n * n.log()).log(), torch.tensor(list(mean_times), dtype=torch.float64).log()
    x, y = x - x.mean(), y - y.mean()
    return float((x * y).sum() / (x * x).sum())


@dataclass
class ScalingFit:
    """``E T = C n log n`` at one temperature, on the lengths whose pairs all met.

    Attributes:
        C, C_low, C_high: the fitted constant and its percentile bootstrap interval (``level``); ``nan`` without an
            uncensored length.
        r2: coefficient of determination of the fit (``nan`` for one length).
        slope, slope_low, slope_high: slope of ``log T`` against ``log(n log n)`` and its interval (about 1 where
            ``T`` grows like ``n log n``; ``nan`` for fewer than two lengths).
        censored_fraction: fraction of censored pairs over every length of the temperature.
        lengths: the lengths fitted (every pair met).
        mean_times: mean time per fitted length.
    """

    C: float
    C_low: float
    C_high: float
    r2: float
    slope: float
    slope_low: float
    slope_high: float
    censored_fraction: float
    lengths: list[int]
    mean_times: dict[int, float]

    def summary(self) -> dict[str, float]:
        """``C_tau``, its interval, ``slope`` and the number of lengths fitted, flat for logging."""
        return {"C": self.C, "C_low": self.C_low, "C_high": self.C_high, "r2": self.r2, "slope": self.slope,
                "slope_low": self.slope_low, "slope_high": self.slope_high,
                "censored_fraction": self.censored_fraction, "lengths_fitted": float(len(self.lengths))}


def fit_scaling(times_by_length: Mapping[int, MeetingTimes], *, num_bootstrap: int = 200, level: float = 0.95,
                generator: Randomness = 0) -> ScalingFit:
    """Fit ``C`` (and the log-log slope) to the mean times of the uncensored lengths, with a bootstrap over pairs
    within each length drawn from ``generator`` (a ``torch.Generator``, or an int seed for one)."""
    if not times_by_length:
        raise ValueError("times_by_length must hold at least one length")
    if num_bootstrap < 1 or not 0 < level < 1:
        raise ValueError(f"num_bootstrap must be >= 1 and level in (0, 1), got {num_bootstrap}, {level}")
    censored = float(torch.cat([t.censored.float().cpu() for t in times_by_length.values()]).mean())
    lengths = sorted(n for n, t in times_by_length.items() if t.times.numel() and not t.censored.any())
    if not lengths:
        return ScalingFit(math.nan, math.nan, math.nan, math.nan, math.nan, math.nan, math.nan, censored, [], {})
    samples = [times_by_length[n].times.double().cpu() for n in lengths]
    means = [float(t.mean()) for t in samples]
    constant, r_squared = fit_n_log_n(lengths, means)
    generator = as_generator(generator)
    scale = torch.tensor([n * math.log(n) for n in lengths], dtype=torch.float64)
    resampled = torch.stack([t[torch.randint(len(t), (num_bootstrap, len(t)), generator=generator)].mean(1)
                             for t in samples], 1)  # [B, lengths]
    bounds = [(1 - level) / 2, (1 + level) / 2]
    constants = (resampled * scale).sum(1) / (scale * scale).sum()
    low, high = quantiles(constants, bounds).tolist()
    slope = slope_low = slope_high = math.nan
    if len(lengths) >= 2:
        slope = fit_log_log(lengths, means)
        centred = scale.log() - scale.log().mean()
        logs = resampled.clamp_min(1e-12).log()
        slopes = ((logs - logs.mean(1, keepdim=True)) * centred).sum(1) / (centred * centred).sum()
        slope_low, slope_high = quantiles(slopes, bounds).tolist()
    return ScalingFit(C=constant, C_low=low, C_high=high, r2=r_squared, slope=slope, slope_low=slope_low,
                      slope_high=slope_high, censored_fraction=censored, lengths=lengths,
                      mean_times=dict(zip(lengths, means, strict=True)))


def fit_by_temperature(times: Mapping[float, Mapping[int, MeetingTimes]], *, num_bootstrap: int = 200,
                       level: float = 0.95, generator: Randomness = 0) -> dict[float, ScalingFit]:
    """:func:`fit_scaling` for each temperature of ``{tau: {n: times}}``; an int seed seeds each temperature's
    bootstrap afresh (a temperature's fit does not depend on the others), a generator is drawn from in turn."""
    return {tau: fit_scaling(by_n, num_bootstrap=num_bootstrap, level=level, generator=generator)
            for tau, by_n in sorted(times.items())}


@dataclass
class BoundaryPoint:
    """``tau_c`` for one length: ``status`` is ``interpolated``, ``below_grid`` (every grid temperature mixes within
    the budget) or ``above_grid`` (none does); ``temperature`` is ``nan`` unless interpolated. ``low``, ``high``: a
    bootstrap interval over pairs (:func:`boundary_interval`), ``0`` where it reaches below the grid and ``inf``
    above it (``nan`` before one is computed)."""

    num_sites: int
    temperature: float
    status: str
    low: float = math.nan
    high: float = math.nan


def phase_boundary(num_sites: int, temperatures: Sequence[float], censored_fractions: Sequence[float],
                   level: float = 0.5) -> BoundaryPoint:
    """Where the censored fraction crosses ``level`` going up in temperature, interpolated in ``log tau``.

    With a non-monotone curve the crossing at the highest temperature is used (the last grid point still trapped).
    """
    pairs = sorted(zip(temperatures, censored_fractions, strict=True))
    taus = [t for t, _ in pairs]
    fractions = [f for _, f in pairs]
    above = [k for k, f in enumerate(fractions) if f >= level]
    if not above:
        return BoundaryPoint(num_sites, math.nan, "below_grid")
    last = above[-1]
    if last == len(taus) - 1:
        return BoundaryPoint(num_sites, math.nan, "above_grid")
    lo, hi = math.log(taus[last]), math.log(taus[last + 1])
    weight = (fractions[last] - level) / (fractions[last] - fractions[last + 1])
    return BoundaryPoint(num_sites, math.exp(lo + weight * (hi - lo)), "interpolated")


def boundary_interval(num_sites: int, temperatures: Sequence[float], censored: Sequence[Tensor], *,
                      replicates: int = 200, level: float = 0.95, generator: Randomness = 0) -> BoundaryPoint:
    """:func:`phase_boundary` of the censoring flags ``censored[k] [P_k]`` of each temperature, with a percentile
    bootstrap interval: pairs are resampled within each cell, and a replicate below the grid counts as ``tau_c = 0``,
    above it as ``inf``; ``generator`` draws the resamples (a ``torch.Generator``, or an int seed for one)."""
    point = phase_boundary(num_sites, temperatures, [float(c.double().mean()) for c in censored])
    generator = as_generator(generator)
    values = []
    for _ in range(replicates):
        fractions = [float(c[torch.randint(len(c), (len(c),), generator=generator)].double().mean()) for c in censored]
        replicate = phase_boundary(num_sites, temperatures, fractions)
        values.append({"below_grid": 0.0, "above_grid": math.inf}.get(replicate.status, replicate.temperature))
    low, high = quantiles(torch.tensor(values, dtype=torch.float64), [(1 - level) / 2, (1 + level) / 2]).tolist()
    point.low, point.high = low, high
    return point


__all__ = ["BoundaryPoint", "ScalingFit", "boundary_interval", "fit_by_temperature", "fit_log_log", "fit_n_log_n",
           "fit_scaling", "phase_boundary"]
