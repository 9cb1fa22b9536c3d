"""Online monitoring of running chains: drift, traps, basins, topics, Hamming distance; no Lightning needed.

Use it in a plain sampling loop::

    monitor = ChainMonitor(embedder, every=20, loggers=[CSVLogger("logs")])
    monitor.start(state)
    for record in sampler.run(state, 1000):
        monitor.observe(state)            # embeds and logs only every 20 steps

The Lightning callbacks in :mod:`mlm_dynamics.callbacks` drive the same class.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ..diagnostics.convergence import ess, rhat
from ..diagnostics.margins import local_margins
from ..embedders.base import Embedder
from ..models.base import Denoiser
from ..sampling.glauber import ChainState
from .drift import DriftTracker
from .traps import TopicAttraction, TrapTracker


class ChainMonitor:
    """Every ``every`` steps: embed the chains once and update drift, traps and topics; return and log scalars.

    From the fourth observation on, the rank-normalised split R-hat and bulk ESS of two scalar projections across
    chains (drift and Hamming distance to start) are logged as well: chains from different starts that have not
    forgotten them show R-hat well above 1.

    Args:
        embedder: tokens -> normalised embeddings.
        every: observation interval in steps (the embedding cost is paid only then).
        thresholds: drift thresholds whose hitting times are tracked.
        traps: a :class:`~mlm_dynamics.traps.TrapTracker` (``None`` disables trap detection).
        topics: a :class:`~mlm_dynamics.traps.TopicAttraction` (``None`` disables it).
        margin_denoiser: if given, the mean local margin of each chain at observations (``B n`` forward rows each)
            is logged and attached to traps as evidence.
        temperature: tau of the chain, for the margin escape bound.
        loggers: objects with ``log_metrics(dict, step)`` (Lightning loggers work standalone).
        prefix: metric-name prefix.
    """

    def __init__(self, embedder: Embedder, *, every: int = 10, thresholds: Sequence[float] = (0.1, 0.2, 0.3),
                 traps: TrapTracker | None = None, topics: TopicAttraction | None = None,
                 margin_denoiser: Denoiser | None = None, temperature: float = 1.0, loggers: Sequence = (),
                 prefix: str = "chains/") -> None:
        self.drift = DriftTracker(embedder, thresholds=thresholds, every=every)
        self.embedder, self.traps, self.topics = embedder, traps, topics
        self.margin_denoiser, self.temperature = margin_denoiser, temperature
        self.loggers, self.prefix = list(loggers), prefix
        self.start_tokens: Tensor | None = None
        self.history: list[dict] = []
        self.projections: dict[str, list[Tensor]] = {"drift": [], "hamming": []}

    def start(self, state: ChainState) -> None:
        self.start_tokens = state.tokens.clone()
        self.drift.start(state.tokens, step=state.step)

    @torch.no_grad()
    def observe(self, state: ChainState) -> dict[str, float] | None:
        """Update at ``state.step`` if due; returns the logged scalars (``None`` when not due)."""
        if self.start_tokens is None:
            raise RuntimeError("call start(state) before observe")
        drift = self.drift.observe(state.step, state.tokens)
        if drift is None:
            return None
        p = self.prefix
        embeddings, hit_at = self.drift.latest_embeddings, self.drift.hit_at
        assert embeddings is not None and hit_at is not None  # set by every due observation
        hamming = (state.tokens != self.start_tokens).sum(1).double()
        metrics = {f"{p}drift_mean": float(drift.mean()), f"{p}drift_max": float(drift.max()),
                   f"{p}hamming_to_start": float(hamming.mean())}
        self.projections["drift"].append(drift.double().cpu())
        self.projections["hamming"].append(hamming.cpu())
        if len(self.projections["drift"]) >= 4 and state.tokens.shape[0] > 1:
            for name, values in self.projections.items():
                draws = torch.stack(values, 1)  # [B, observations]
                metrics[f"{p}rhat_{name}"] = float(rhat(draws))
                metrics[f"{p}ess_{name}"] = float(ess(draws))
        for threshold, hit in zip(self.drift.thresholds.tolist(), hit_at, strict=True):
            metrics[f"{p}hit_fraction_d{threshold:g}"] = float((hit >= 0).float().mean())
        margin = None
        if self.margin_denoiser is not None:
            margins = local_margins(self.margin_denoiser, state.tokens, sites=state.sites)
            margin = margins.margin.nanmean(1)
            metrics.update({f"{p}{k}": v for k, v in margins.summary(self.temperature).items()})
        if self.traps is not None:
            trapped = self.traps.observe(state.step, embeddings, state.tokens, margin)
            metrics[f"{p}trap_rate"] = float(trapped.float().mean())
            metrics[f"{p}num_basins"] = float(len(self.traps.basin_visits))
            metrics[f"{p}recurrent_basins"] = float(len(self.traps.recurrent_basins))
            dwell = self.traps.dwell_times(include_open=True)
            if dwell.numel():
                metrics[f"{p}dwell_time_mean"] = float(dwell.mean())
        if self.topics is not None:
            self.topics.observe(embeddings)
            for name, fraction in self.topics.fractions().items():
                metrics[f"{p}topic/{name}"] = fraction
        self.history.append({"step": state.step, **metrics})
        for logger in self.loggers:
            logger.log_metrics(metrics, step=state.step)
        return metrics

    def state_dict(self) -> dict:
        return {"start_tokens": self.start_tokens, "drift": self.drift.state_dict(), "history": list(self.history),
                "projections": {k: list(v) for k, v in self.projections.items()},
                "traps": None if self.traps is None else self.traps.state_dict(),
                "topics": None if self.topics is None else self.topics.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.start_tokens, self.history = state["start_tokens"], list(state["history"])
        self.projections = {k: list(v) for k, v in state["projections"].items()}
        self.drift.load_state_dict(state["drift"])
        if self.traps is not None and state["traps"] is not None:
            self.traps.load_state_dict(state["traps"])
        if self.topics is not None and state["topics"] is not None:
            self.topics.load_state_dict(state["topics"])
