"""The quantile convention of the project for fully observed values, and the one way quantiles are named.

Convention: linear interpolation between order statistics (Hyndman & Fan type 7, the default of NumPy, R and
``torch.quantile``): for sorted values ``v_0 <= ... <= v_{N-1}`` and level ``p``, with ``h = p (N - 1)``,

    Q(p) = v_floor(h) + (h - floor(h)) (v_ceil(h) - v_floor(h)).

Censored times (meeting and hitting times known only to exceed a budget) never come here: their quantiles are the
Kaplan-Meier quantiles of :mod:`.survival`, reported as missing with a lower bound where unknown.

Names: level 0.5 is ``{name}_median``, any other level ``{name}_q{100 p}`` (``q90``, ``q99``, ``q2.5``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

DEFAULT_LEVELS: tuple[float, ...] = (0.5, 0.9)


def check_levels(levels: Sequence[float]) -> tuple[float, ...]:
    """``levels`` as a tuple, or a ValueError unless it is a non-empty sequence of numbers in [0, 1]."""
    levels = tuple(levels)
    if not levels or any(isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1 for p in levels):
        raise ValueError(f"quantile levels must be a non-empty sequence of numbers in [0, 1], got {list(levels)}")
    return tuple(float(p) for p in levels)


def quantile_key(level: float) -> str:
    """``"median"`` for 0.5, else ``"q{100 p}"`` (``0.9 -> "q90"``, ``0.025 -> "q2.5"``)."""
    return "median" if level == 0.5 else f"q{100 * level:g}"


def quantiles(values: Tensor, levels: Sequence[float]) -> Tensor:
    """Type-7 quantiles of ``values [..., N]`` along the last axis, shape ``[..., len(levels)]`` (float64).

    Empty inputs (``N = 0``) give ``nan``. Cost: one sort of ``N`` per leading index.
    """
    levels = check_levels(levels)
    data = values.double()
    num = data.shape[-1]
    if num == 0:
        return torch.full((*data.shape[:-1], len(levels)), math.nan, dtype=torch.float64, device=data.device)
    ordered = data.sort(-1).values
    h = torch.tensor(levels, dtype=torch.float64, device=data.device) * (num - 1)
    low, high = h.floor().long(), h.ceil().long()
    lower = ordered[..., low]
    upper = ordered[..., high]
    weight = (h - low).expand_as(lower)
    # upper == lower also covers inf == inf, where the lerp formula would give nan
    return torch.where((upper == lower) | (weight == 0), lower, lower + weight * (upper - lower))


def quantile_summary(name: str, values: Tensor, levels: Sequence[float] = DEFAULT_LEVELS) -> dict[str, float]:
    """``{f"{name}_{quantile_key(p)}": Q(p)}`` for 1-D fully observed ``values``."""
    levels = check_levels(levels)
    result = quantiles(values.flatten(), levels)
    return {f"{name}_{quantile_key(level)}": value for level, value in zip(levels, result.tolist(), strict=True)}


__all__ = ["DEFAULT_LEVELS", "check_levels", "quantile_key", "quantile_summary", "quantiles"]
