"""Semantic drift of chains and hitting times, fitted against ``n log n``.

Drift of chain b at step t: ``D_t = 1 - cos(e(X_t), e(X_0))`` for an embedder ``e`` (see :mod:`.embedding`).
Hitting time of a threshold delta: ``T_delta = inf{t : D_t >= delta}``, observed on the grid of steps where the
embedding is computed (every ``every`` steps), so it overestimates the exact hitting time by less than ``every``;
chains that have not hit by the budget are censored.

Fast mixing predicts ``E T ~ C(tau) n log n`` with bounded ``C(tau)``; :func:`fit_n_log_n` estimates
``C = sum_k T_k n_k log n_k / sum_k (n_k log n_k)^2`` (least squares through the origin).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from .coupling import MeetingTimes
from .embedding import Embedder, cosine_distance


class DriftTracker:
    """Online drift and threshold hitting times of ``B`` chains; embeddings only every ``every`` steps."""

    def __init__(self, embedder: Embedder, *, thresholds: Sequence[float] = (0.1, 0.2, 0.3), every: int = 10) -> None:
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        if not thresholds or any(not 0 < t <= 2 for t in thresholds):
            raise ValueError(f"thresholds must be cosine distances in (0, 2], got {list(thresholds)}")
        self.embedder, self.every = embedder, every
        self.thresholds = torch.tensor(sorted(thresholds), dtype=torch.float32)
        self.reference: Tensor | None = None
        self.hit_at: Tensor | None = None  # [K, B], -1 until hit
        self.start_step = self.last_step = 0
        self.latest: Tensor | None = None
        self.latest_embeddings: Tensor | None = None

    def start(self, tokens: Tensor, step: int = 0) -> None:
        """Embed the start states ``X_0`` (resets the tracker)."""
        self.reference = self.embedder(tokens)
        self.hit_at = torch.full((len(self.thresholds), tokens.shape[0]), -1, dtype=torch.long)
        self.start_step = self.last_step = step
        self.latest = torch.zeros(tokens.shape[0])
        self.latest_embeddings = self.reference

    def due(self, step: int) -> bool:
        return (step - self.start_step) % self.every == 0

    def observe(self, step: int, tokens: Tensor) -> Tensor | None:
        """Drift ``[B]`` at ``step`` when due (else ``None``); records first hits."""
        if self.reference is None:
            raise RuntimeError("call start(tokens) before observe")
        self.last_step = step
        if not self.due(step):
            return None
        self.latest_embeddings = self.embedder(tokens)
        drift = cosine_distance(self.latest_embeddings, self.reference)
        newly = (self.hit_at < 0) & (drift[None, :] >= self.thresholds[:, None])
        self.hit_at[newly] = step - self.start_step
        self.latest = drift
        return drift

    def hitting_times(self) -> list[MeetingTimes]:
        """One :class:`~mlm_dynamics.coupling.MeetingTimes` per threshold, censored at the steps run so far."""
        budget = self.last_step - self.start_step
        return [MeetingTimes(times=torch.where(row < 0, budget, row), censored=row < 0) for row in self.hit_at]

    def state_dict(self) -> dict:
        return {"reference": self.reference, "hit_at": self.hit_at, "start_step": self.start_step,
                "last_step": self.last_step, "latest": self.latest}

    def load_state_dict(self, state: dict) -> None:
        self.reference, self.hit_at, self.latest = state["reference"], state["hit_at"], state["latest"]
        self.start_step, self.last_step = state["start_step"], state["last_step"]


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
        usable = [(n, m) for n, m in zip(ns, means) if math.isfinite(m)]
        slope, r_squared = fit_n_log_n(*zip(*usable)) if usable else (math.nan, math.nan)
        censored = torch.cat([by_n[n].censored for n in ns]).float().mean().item()
        fits[tau] = {"C": slope, "r_squared": r_squared, "censored_fraction": censored, "mean_times": dict(zip(ns, means))}
    return fits
