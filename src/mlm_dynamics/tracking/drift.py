"""Semantic drift of chains and hitting times, fitted against ``n log n``.

Drift of chain b at step t: ``D_t = d(e(X_t), e(X_0)) / s_b`` for an embedder ``e`` (see
:mod:`mlm_dynamics.embedders`), the cosine distance ``d(a, b) = 1 - cos(a, b)`` by default (any distance may be
given, e.g. :func:`hamming_fraction` on tokens) and a per-chain unit ``s_b`` (1 by default; the distance to random
fillings, :func:`random_fill_scale`, makes thresholds mean "a fraction of the way to an unrelated state").
Hitting time of a threshold delta: ``T_delta = inf{t : D_t >= delta}``, observed on the grid of steps where the
embedding is computed (every ``every`` steps), so it overestimates the exact hitting time by less than ``every``;
chains that have not hit by the budget are censored.

Fast mixing predicts ``E T ~ C(tau) n log n`` with bounded ``C(tau)``; see :mod:`mlm_dynamics.diagnostics.scaling`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ..diagnostics.meeting import HittingTimes
from ..diagnostics.quantiles import quantiles
from ..embedders.base import Embedder, cosine_distance
from ..models.base import Denoiser
from ..sampling.coupling import randomize_sites


def check_drift_options(*, thresholds: Sequence[float], every: int) -> None:
    """ValueErrors naming the option, for :class:`DriftTracker` and the callbacks that build one."""
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    if not thresholds or any(not 0 < t <= 2 for t in thresholds):
        raise ValueError(f"thresholds must be cosine distances in (0, 2], got {list(thresholds)}")


Distance = Callable[[Tensor, Tensor], Tensor]


def hamming_fraction(mask: Tensor) -> Distance:
    """``d(x, y) [B]``: the fraction of the positions ``mask [B, L]`` where token rows ``x, y [B, L]`` differ (with
    the identity as embedder, drift is then the changed fraction of the resampled sites)."""
    counts = mask.sum(1).clamp_min(1).double()
    return lambda x, y: ((x != y) & mask.to(x.device)).sum(1).double().cpu() / counts.cpu()


@torch.no_grad()
def random_fill_distances(embedder: Embedder, denoiser: Denoiser, tokens: Tensor, sites: Tensor, *, samples: int,
                          generator: torch.Generator | None = None, streams: Sequence[Tensor] | None = None,
                          site_counts: Tensor | None = None, distance: Distance = cosine_distance) -> Tensor:
    """``[samples, B]``: ``d(e(X^s_b), e(x_b))`` for ``samples`` fillings ``X^s`` of ``tokens [B, L]`` with uniformly
    random allowed tokens at ``sites [B, n]`` (the first ``site_counts[b]`` of row ``b``), drawn from ``generator`` or
    from ``streams`` (one ``[B]`` key tensor per sample, so each row's fillings are its own).

    The drift of a chain that forgot its start: the embedder's own unit for drift thresholds and trap radii (see
    :func:`random_fill_scale`). Cost: ``samples + 1`` embedder calls on ``B`` rows.
    """
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    if streams is not None and len(streams) != samples:
        raise ValueError(f"streams: {samples} samples need {samples} key tensors, got {len(streams)}")
    reference = embedder(tokens)
    return torch.stack([distance(embedder(randomize_sites(denoiser, tokens, sites, generator, site_counts=site_counts,
                                                          streams=None if streams is None else streams[s])),
                                 reference).double().cpu() for s in range(samples)])


def random_fill_scale(distances: Tensor, *, per_row: bool = False) -> Tensor:
    """The median of :func:`random_fill_distances` (the project's quantile convention, type 7): one number over every
    row and sample, or ``[B]`` one per row (``per_row``); floored at ``1e-12`` so it can divide."""
    values = distances.T if per_row else distances.flatten()
    return quantiles(values, [0.5])[..., 0].clamp_min(1e-12)


class DriftTracker:
    """Online drift and threshold hitting times of ``B`` chains; embeddings only every ``every`` steps.

    Args:
        embedder: tokens -> embeddings (any function of the token rows, for a custom ``distance``).
        thresholds: drift levels whose first hitting times are recorded (in units of ``scale``).
        every: observation interval in steps.
        distance: ``d(e(X_t), e(X_0)) -> [B]``; the cosine distance by default.
        scale: ``[B]`` unit of each chain's drift (default 1).
    """

    def __init__(self, embedder: Embedder, *, thresholds: Sequence[float] = (0.1, 0.2, 0.3), every: int = 10,
                 distance: Distance = cosine_distance, scale: Tensor | None = None) -> None:
        check_drift_options(thresholds=thresholds, every=every)
        self.embedder, self.every, self.distance, self.scale = embedder, every, distance, scale
        self.thresholds = torch.tensor(sorted(thresholds), dtype=torch.float64)
        self.reference: Tensor | None = None
        self.hit_at: Tensor | None = None  # [K, B], -1 until hit
        self.start_step = self.last_step = 0
        self.latest: Tensor | None = None
        self.latest_embeddings: Tensor | None = None

    def start(self, tokens: Tensor, step: int = 0) -> None:
        """Embed the start states ``X_0`` (resets the tracker)."""
        self.reference = self.embedder(tokens).clone()  # an embedder may hand back the (mutable) tokens themselves
        self.hit_at = torch.full((len(self.thresholds), tokens.shape[0]), -1, dtype=torch.long)
        self.start_step = self.last_step = step
        self.latest = torch.zeros(tokens.shape[0], dtype=torch.float64)
        self.latest_embeddings = self.reference

    def due(self, step: int) -> bool:
        """Whether ``step`` is an observation step (every ``every`` steps)."""
        return (step - self.start_step) % self.every == 0

    def observe(self, step: int, tokens: Tensor, *, force: bool = False) -> Tensor | None:
        """Drift ``[B]`` at ``step`` when due or ``force`` (else ``None``); records first hits."""
        if self.reference is None:
            raise RuntimeError("call start(tokens) before observe")
        self.last_step = step
        if not (force or self.due(step)):
            return None
        assert self.hit_at is not None  # set by start() with the reference
        self.latest_embeddings = self.embedder(tokens)
        drift = self.distance(self.latest_embeddings, self.reference).double().cpu()
        if self.scale is not None:
            drift = drift / self.scale
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
        """Start embeddings, hitting times and the latest drift, for checkpoints."""
        return {"reference": self.reference, "hit_at": self.hit_at, "start_step": self.start_step,
                "last_step": self.last_step, "latest": self.latest}

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.reference, self.hit_at, self.latest = state["reference"], state["hit_at"], state["latest"]
        self.start_step, self.last_step = state["start_step"], state["last_step"]


__all__ = ["Distance", "DriftTracker", "check_drift_options", "hamming_fraction", "random_fill_distances",
           "random_fill_scale"]
