"""Semantic drift of chains and hitting times, fitted against ``n log n``.

Drift of chain b at step t: ``D_t = 1 - cos(e(X_t), e(X_0))`` for an embedder ``e`` (see :mod:`.embedding`).
Hitting time of a threshold delta: ``T_delta = inf{t : D_t >= delta}``, observed on the grid of steps where the
embedding is computed (every ``every`` steps), so it overestimates the exact hitting time by less than ``every``;
chains that have not hit by the budget are censored.

Fast mixing predicts ``E T ~ C(tau) n log n`` with bounded ``C(tau)``; see :mod:`mlm_dynamics.diagnostics.scaling`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ..diagnostics.meeting import HittingTimes
from ..embedders.base import Embedder, cosine_distance
from ..models.base import Denoiser
from ..sampling.coupling import randomize_sites


def check_drift_options(*, thresholds: Sequence[float], every: int) -> None:
    """ValueErrors naming the option, for :class:`DriftTracker` and the callbacks that build one."""
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    if not thresholds or any(not 0 < t <= 2 for t in thresholds):
        raise ValueError(f"thresholds must be cosine distances in (0, 2], got {list(thresholds)}")


@torch.no_grad()
def random_fill_distance(embedder: Embedder, denoiser: Denoiser, tokens: Tensor, sites: Tensor, *, samples: int,
                         generator: torch.Generator) -> float:
    """The drift of a chain that forgot its start: ``median_{b, s} (1 - cos(e(X^s_b), e(x_b)))`` over ``samples``
    fillings ``X^s`` of ``tokens [B, L]`` with uniformly random allowed tokens at ``sites [B, n]``.

    The embedder's own unit for drift thresholds and trap radii (so radii mean the same for any embedder).
    Cost: ``samples + 1`` embedder calls on ``B`` rows.
    """
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    reference = embedder(tokens)
    distances = [cosine_distance(embedder(randomize_sites(denoiser, tokens, sites, generator)), reference)
                 for _ in range(samples)]
    return float(torch.stack(distances).median())


class DriftTracker:
    """Online drift and threshold hitting times of ``B`` chains; embeddings only every ``every`` steps."""

    def __init__(self, embedder: Embedder, *, thresholds: Sequence[float] = (0.1, 0.2, 0.3), every: int = 10) -> None:
        check_drift_options(thresholds=thresholds, every=every)
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
        assert self.hit_at is not None  # set by start() with the reference
        self.latest_embeddings = self.embedder(tokens)
        drift = cosine_distance(self.latest_embeddings, self.reference)
        newly = (self.hit_at < 0) & (drift[None, :] >= self.thresholds[:, None])
        self.hit_at[newly] = step - self.start_step
        self.latest = drift
        return drift

    def hitting_times(self) -> list[HittingTimes]:
        """One :class:`~mlm_dynamics.diagnostics.HittingTimes` per threshold, censored at the steps run so far."""
        if self.hit_at is None:
            raise RuntimeError("call start(tokens) before hitting_times")
        budget = self.last_step - self.start_step
        return [HittingTimes(times=torch.where(row < 0, budget, row), censored=row < 0, max_steps=budget)
                for row in self.hit_at]

    def state_dict(self) -> dict:
        return {"reference": self.reference, "hit_at": self.hit_at, "start_step": self.start_step,
                "last_step": self.last_step, "latest": self.latest}

    def load_state_dict(self, state: dict) -> None:
        self.reference, self.hit_at, self.latest = state["reference"], state["hit_at"], state["latest"]
        self.start_step, self.last_step = state["start_step"], state["last_step"]
