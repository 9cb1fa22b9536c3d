"""Ladder diagnostics of a replica exchange: swap acceptance per adjacent pair and walker round trips."""

from __future__ import annotations

import math

import torch

from ..sampling.tempering import TemperingState
from .quantiles import quantile_summary


def tempering_summary(state: TemperingState) -> dict[str, float]:
    """Swap acceptance per adjacent pair (``swap_acceptance_{r}``, ``nan`` before any attempt), its minimum, the number
    of completed round trips and their median length in steps (``round_trip_median``). Cost: no forward rows."""
    acceptance = state.acceptance()
    out = {f"swap_acceptance_{r}": float(a) for r, a in enumerate(acceptance.tolist())}
    out["swap_acceptance_min"] = float(acceptance.nan_to_num(nan=math.inf).min())
    out["round_trips"] = float(len(state.round_trips))
    out.update(quantile_summary("round_trip", torch.tensor(state.round_trips, dtype=torch.float64), (0.5,)))
    return out


__all__ = ["tempering_summary"]
