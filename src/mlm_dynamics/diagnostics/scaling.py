"""Scaling of meeting and hitting times with the number of sites, and the phase boundary in (tau, n).

Fast mixing predicts ``E T = C(tau) n log n`` with bounded ``C(tau)``. :func:`fit_n_log_n` estimates
``C = sum_k T_k s_k / sum_k s_k^2`` with ``s_k = n_k log n_k`` (least squares through the origin) and the coefficient
of determination ``R^2 = 1 - sum (T_k - C s_k)^2 / sum (T_k - mean T)^2``. :func:`fit_scaling` fits the restricted
mean time per length (censored pairs count at the budget, so with censoring ``C`` is a lower estimate) and gives a
percentile bootstrap interval over pairs.

The phase boundary ``tau_c(n)`` is where the censored fraction of the meeting times crosses 1/2 (equivalently, the
median meeting time crosses the budget), interpolated linearly in ``log tau`` between grid temperatures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from .meeting import MeetingTimes


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


@dataclass
class ScalingFit:
    """``E T = C n log n`` at one temperature.

    Attributes:
        C, C_low, C_high: the fitted constant and its percentile bootstrap interval (``level``).
        r2: coefficient of determination of the fit.
        censored_fraction: fraction of censored pairs over the lengths (``C`` is a lower estimate when > 0).
        mean_times: restricted mean time per length.
    """

    C: float
    C_low: float
    C_high: float
    r2: float
    censored_fraction: float
    mean_times: dict[int, float]

    def summary(self) -> dict[str, float]:
        return {"C": self.C, "C_low": self.C_low, "C_high": self.C_high, "r2": self.r2,
                "censored_fraction": self.censored_fraction}


def fit_scaling(times_by_length: Mapping[int, MeetingTimes], *, num_bootstrap: int = 200, level: float = 0.95,
                seed: int = 0) -> ScalingFit:
    """Fit ``C`` to the restricted mean times per length, with a bootstrap over pairs within each length."""
    lengths = sorted(times_by_length)
    if not lengths:
        raise ValueError("times_by_length must hold at least one length")
    if num_bootstrap < 1 or not 0 < level < 1:
        raise ValueError(f"num_bootstrap must be >= 1 and level in (0, 1), got {num_bootstrap}, {level}")
    samples = [times_by_length[n].times.double().cpu() for n in lengths]
    means = [float(t.mean()) for t in samples]
    slope, r_squared = fit_n_log_n(lengths, means)
    generator = torch.Generator().manual_seed(seed)
    scale = torch.tensor([n * math.log(n) for n in lengths], dtype=torch.float64)
    resampled = torch.stack([t[torch.randint(len(t), (num_bootstrap, len(t)), generator=generator)].mean(1)
                             for t in samples], 1)  # [B, lengths]
    slopes = (resampled * scale).sum(1) / (scale * scale).sum()
    low, high = torch.quantile(slopes, torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64))
    censored = float(torch.cat([times_by_length[n].censored.float().cpu() for n in lengths]).mean())
    return ScalingFit(C=slope, C_low=float(low), C_high=float(high), r2=r_squared, censored_fraction=censored,
                      mean_times=dict(zip(lengths, means, strict=True)))


def fit_by_temperature(times: Mapping[float, Mapping[int, MeetingTimes]], *, num_bootstrap: int = 200,
                       level: float = 0.95, seed: int = 0) -> dict[float, ScalingFit]:
    """:func:`fit_scaling` for each temperature of ``{tau: {n: times}}``."""
    return {tau: fit_scaling(by_n, num_bootstrap=num_bootstrap, level=level, seed=seed)
            for tau, by_n in sorted(times.items())}


@dataclass
class BoundaryPoint:
    """``tau_c`` for one length: ``status`` is ``interpolated``, ``below_grid`` (every grid temperature mixes within
    the budget) or ``above_grid`` (none does); ``temperature`` is ``nan`` unless interpolated."""

    num_sites: int
    temperature: float
    status: str


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
