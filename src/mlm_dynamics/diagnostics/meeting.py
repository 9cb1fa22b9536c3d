"""Meeting and hitting times, censored at a budget, and what they bound.

By the coupling inequality ``TV(P^t(x0, .), P^t(y0, .)) <= P(T_meet > t)`` for maximally coupled chains started at
``x0, y0``. With an L-lag coupling (Biswas, Jacob & Vanetti 2019), ``tau = inf{t >= L : X_t = Y_{t-L}}`` and
``X_0, Y_0 ~ mu_0``: ``TV(mu_0 P^t, pi) <= E[max(0, ceil((tau - L - t) / L))]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from .quantiles import DEFAULT_LEVELS, quantile_summary, quantiles


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
        """Quantiles of ``T`` (:mod:`.quantiles` convention); ``inf`` where a quantile depends on a censored pair."""
        return quantiles(self.times, torch.as_tensor(levels).tolist(), self.censored)

    def tv_upper_bound(self, t: Tensor) -> Tensor:
        """L-lag bound ``min(1, mean max(0, ceil((tau - L - t) / L)))`` on ``TV(mu_0 P^t, pi)`` for each ``t``.

        A censored pair leaves the bound unknown wherever it could contribute (``t < budget - L``); there it is 1.
        Requires ``lag >= 1``.
        """
        if self.lag < 1:
            raise ValueError("tv_upper_bound needs meeting times from lagged_meeting_times (lag >= 1)")
        t = torch.as_tensor(t, device=self.times.device, dtype=torch.float64)
        excess = torch.ceil((self.times.double()[None, :] - self.lag - t[:, None]) / self.lag).clamp_min(0.0)
        excess = torch.where(self.censored[None, :] & (excess > 0), math.inf, excess)
        return excess.mean(1).clamp_max(1.0)

    def summary(self, levels: Sequence[float] = DEFAULT_LEVELS, tv_steps: Sequence[int] = ()) -> dict[str, float]:
        """``{name}_median``, ``{name}_q90``, ... (the budget where censored), ``censored_fraction``, ``budget``,
        ``num_pairs``; with ``tv_steps`` (lagged times only) also ``tv_bound_t{t}`` for each ``t``."""
        out = quantile_summary(self.name, self.times, levels, self.censored, self.budget)
        out.update(censored_fraction=self.censored_fraction, budget=self.budget, num_pairs=float(self.times.numel()))
        if tv_steps:
            bounds = self.tv_upper_bound(torch.tensor(list(tv_steps)))
            out.update({f"tv_bound_t{t}": float(b) for t, b in zip(tv_steps, bounds.tolist(), strict=True)})
        return out


@dataclass
class HittingTimes(MeetingTimes):
    """First times a chain's drift reached a threshold (same censoring as :class:`MeetingTimes`)."""

    name = "hitting_time"
