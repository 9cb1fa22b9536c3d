"""Scaling of meeting and hitting times with the number of sites: the fit ``E T = C(tau) n log n``.

:func:`fit_n_log_n` estimates ``C = sum_k T_k n_k log n_k / sum_k (n_k log n_k)^2`` (least squares through the
origin) with the coefficient of determination of that fit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .meeting import MeetingTimes


def fit_n_log_n(num_sites: Sequence[int], mean_times: Sequence[float]) -> tuple[float, float]:
    """``(C, R^2)`` of the fit ``T = C n log n`` through the origin."""
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


def fit_by_temperature(times: dict[float, dict[int, MeetingTimes]]) -> dict[float, dict]:
    """For each tau: ``C(tau)`` from the mean uncensored times per n, plus the censored fraction.

    With censoring the mean, and so ``C(tau)``, is a lower estimate (reported as ``censored_fraction > 0``).
    """
    fits = {}
    for tau, by_n in sorted(times.items()):
        ns = sorted(by_n)
        means = [float(by_n[n].times[~by_n[n].censored].double().mean()) if (~by_n[n].censored).any() else math.nan
                 for n in ns]
        usable = [(n, m) for n, m in zip(ns, means, strict=True) if math.isfinite(m)]
        slope, r_squared = fit_n_log_n(*zip(*usable, strict=True)) if usable else (math.nan, math.nan)
        censored = torch.cat([by_n[n].censored for n in ns]).float().mean().item()
        fits[tau] = {"C": slope, "r_squared": r_squared, "censored_fraction": censored,
                     "mean_times": dict(zip(ns, means, strict=True))}
    return fits
