"""The diagnostic callbacks: thin adapters over :mod:`mlm_dynamics`'s framework-agnostic core."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.loggers import WandbLogger
from matplotlib.figure import Figure
from torch import Tensor
from typing_extensions import override

from ..diagnostics.influence import check_temperatures, estimate_influence
from ..diagnostics.meeting import MeetingTimes
from ..diagnostics.rectangle import RectangleReport, check_rectangle_options, sample_rectangles
from ..embedders.base import (
    Codec,
    Embedder,
    EmbedderBase,
    HiddenStateEmbedder,
    ModuleOutputEmbedder,
    SentenceEmbedder,
    as_embedder,
)
from ..metrics.aggregates import MeetingTimeMetric, RectanglePrevalence
from ..models.base import Denoiser
from ..models.huggingface import MaskedLMDenoiser
from ..report import figures as report_figures
from ..sampling.categorical import check_temperature
from ..sampling.coupling import CoupledGlauberChains, lagged_meeting_times, randomize_sites
from ..sampling.glauber import ChainState, GlauberSampler
from ..tracking.drift import check_drift_options
from ..tracking.monitor import ChainMonitor
from ..tracking.traps import TopicAttraction, TrapTracker, load_topics
from .base import DiagnosticCallback


class MixingDiagnostics(DiagnosticCallback):
    """Coupled chains from the batch's sequences and from random restarts: meeting times, censoring, TV bounds.

    Logs :meth:`~mlm_dynamics.diagnostics.MeetingTimes.summary` under ``{prefix}mixing/``: ``meeting_time_median``,
    ``meeting_time_q90`` (the budget where censored), ``censored_fraction``, ``budget``, ``num_pairs``; with ``lag``
    also ``lagged/...`` and ``lagged/tv_bound_t{t}`` for each ``t`` in ``t_values`` (L-lag bound on
    ``TV(mu_0 P^t, pi)``, the partner chain started from another start row). Cost per run: at most ``max_steps``
    forwards of ``<= 2 num_starts`` rows (twice with ``lag``).
    """

    pooled = True

    def __init__(self, *, temperature: float = 1.0, max_steps: int = 200, lag: int | None = None,
                 t_values: Sequence[int] = (0, 50, 100), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        if lag is not None and lag < 1:
            raise ValueError(f"lag must be >= 1 or None, got {lag}")
        if any(t < 0 for t in t_values):
            raise ValueError(f"t_values must be steps >= 0, got {list(t_values)}")
        self.temperature = check_temperature(temperature)
        self.max_steps, self.lag, self.t_values = max_steps, lag, tuple(t_values)
        self.meeting = MeetingTimeMetric()
        self.lagged = MeetingTimeMetric(tv_steps=self.t_values) if lag else None
        self.latest: MeetingTimes | None = None

    def measure(self, denoiser: Denoiser, starts: Tensor, trainer: Trainer) -> dict[str, float]:
        sampler = GlauberSampler(denoiser, self.temperature)
        chains = CoupledGlauberChains(sampler)
        sites = denoiser.resampleable_sites(starts)
        y0 = randomize_sites(denoiser, starts, sites, self.generator)
        result = chains.run(chains.init_state(starts, y0, seed=self.next_seed(), sites=sites), self.max_steps)
        self.meeting.to(starts.device).reset()  # states on the model's device, so DDP can gather them
        self.meeting.update(result)
        self.latest = result
        p = f"{self.prefix}mixing/"
        metrics = {f"{p}{k}": v for k, v in self.meeting.compute().items()}
        if self.lagged is not None and self.lag is not None:
            partners = starts.roll(1, 0)
            lagged = lagged_meeting_times(sampler, starts, partners, lag=self.lag, max_steps=self.max_steps,
                                          seed=self.next_seed(), sites=sites)
            self.lagged.to(starts.device).reset()
            self.lagged.update(lagged)
            metrics.update({f"{p}lagged/{k}": v for k, v in self.lagged.compute().items()})
        return metrics

    def figures(self) -> dict[str, Figure]:
        if self.latest is None:
            return {}
        return {"mixing/survival": report_figures.ladder_survival({self.temperature: self.latest})}


class RectangleTest(DiagnosticCallback):
    """Rectangle statistics on the batch's sequences: prevalence of incompatibility and ``|R|`` quantiles.

    Cost per run: ``num_starts * pairs_per_context * (2 num_tokens + 2)`` forward rows.
    """

    pooled = True

    def __init__(self, *, pairs_per_context: int = 4, num_tokens: int = 4, max_distance: int | None = None,
                 temperature: float = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        check_rectangle_options(pairs_per_context=pairs_per_context, num_tokens=num_tokens, max_distance=max_distance)
        self.pairs_per_context, self.num_tokens, self.max_distance = pairs_per_context, num_tokens, max_distance
        self.temperature = check_temperature(temperature)
        self.prevalence = RectanglePrevalence()
        self.latest: RectangleReport | None = None

    def measure(self, denoiser: Denoiser, starts: Tensor, trainer: Trainer) -> dict[str, float]:
        report = sample_rectangles(denoiser, starts, pairs_per_context=self.pairs_per_context,
                                   num_tokens=self.num_tokens, max_distance=self.max_distance,
                                   temperature=self.temperature, generator=self.generator)
        self.prevalence.to(starts.device).reset()
        self.prevalence.update(report)
        self.latest = report
        return {f"{self.prefix}rectangle/{k}": v for k, v in self.prevalence.compute().items()}

    def figures(self) -> dict[str, Figure]:
        if self.latest is None:
            return {}
        return {"rectangle/histogram": report_figures.rectangle_histogram(self.latest)}


class InfluenceProbe(DiagnosticCallback):
    """Influence coefficients on the first ``max_sites`` sites of the batch's sequences, over a temperature grid.

    Logs the Dobrushin coefficient per temperature, the grid and sensitivity estimates of tau*, and the implied
    mixing-time bound. The sums run over the probed sites only, so with ``max_sites`` below the sequence length they
    are lower estimates of the full Dobrushin sums (and tau*, the bound, optimistic). Cost per run:
    ``num_starts * n (1 + replacements (n - 1))`` forward rows, n = ``max_sites``.
    """

    def __init__(self, *, temperatures: Sequence[float] = (0.5, 1.0, 2.0), max_sites: int = 8,
                 replacements: int = 1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if max_sites < 2:
            raise ValueError(f"max_sites must be >= 2, got {max_sites}")
        if replacements < 1:
            raise ValueError(f"replacements must be >= 1, got {replacements}")
        self.temperatures = tuple(check_temperatures(temperatures))
        self.max_sites, self.replacements = max_sites, replacements

    def measure(self, denoiser: Denoiser, starts: Tensor, trainer: Trainer) -> dict[str, float]:
        sites = denoiser.resampleable_sites(starts)[0, : self.max_sites]
        estimate = estimate_influence(denoiser, starts, temperatures=self.temperatures, sites=sites,
                                      replacements=self.replacements, generator=self.generator)
        return {f"{self.prefix}influence/{k}": v for k, v in estimate.summary().items()}


Anchors = dict[str, Tensor] | dict[str, list[str]] | dict[str, list[list[float]]]


class _PersistentChains(DiagnosticCallback):
    """Chains that live across runs (``steps_per_run`` steps each), watched by a :class:`ChainMonitor`."""

    monitor_prefix = "chains/"

    def __init__(self, *, embedder: EmbedderBase | Callable[[Tensor], Tensor] | None = None,
                 hidden_module: str | None = None, temperature: float = 1.0, steps_per_run: int = 50, every: int = 10,
                 thresholds: Sequence[float] = (0.1, 0.2, 0.3), codec: Codec | None = None, table_rows: int = 8,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if steps_per_run < 1:
            raise ValueError(f"steps_per_run must be >= 1, got {steps_per_run}")
        check_drift_options(thresholds=thresholds, every=every)
        self.embedder = None if embedder is None else as_embedder(embedder)  # plain functions get normalised rows
        self.hidden_module = hidden_module
        self.temperature, self.steps_per_run = check_temperature(temperature), steps_per_run
        self.every, self.thresholds, self.codec, self.table_rows = every, tuple(thresholds), codec, table_rows
        self.chain_state: ChainState | None = None
        self.monitor: ChainMonitor | None = None
        self._pending_state: dict[str, Any] | None = None

    def build_monitor(self, denoiser: Denoiser, embedder: Embedder) -> ChainMonitor:
        return ChainMonitor(embedder, every=self.every, thresholds=self.thresholds, temperature=self.temperature,
                            prefix=f"{self.prefix}{self.monitor_prefix}")

    def default_embedder(self, denoiser: Denoiser) -> Embedder:
        """``embedder``, else the hidden states of a masked LM, else the output of ``hidden_module``."""
        if self.embedder is not None:
            return self.embedder
        if self.hidden_module is not None:
            return ModuleOutputEmbedder(denoiser, self.hidden_module)
        if isinstance(denoiser, MaskedLMDenoiser):
            return HiddenStateEmbedder(denoiser)
        raise TypeError(f"{type(self).__name__}: a {type(denoiser).__name__} has no encoder to embed chain states "
                        "with; pass embedder= or hidden_module= (a submodule whose output is [B, L, H])")

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self.default_embedder(self.denoiser(pl_module))  # fails when fit starts, not at the first run

    def _started(self, denoiser: Denoiser, sampler: GlauberSampler, starts: Tensor) -> tuple[ChainState, ChainMonitor]:
        """The persistent chains and their monitor, created (or restored from a checkpoint) at the first run."""
        if self.monitor is None or self.chain_state is None:
            self.monitor = self.build_monitor(denoiser, self.default_embedder(denoiser))
            if self._pending_state is not None:
                self.chain_state = ChainState.from_state_dict(self._pending_state["chains"], denoiser.device)
                self.monitor.load_state_dict(self._pending_state["monitor"])
            else:
                self.chain_state = sampler.init_state(starts, seed=self.next_seed())
                self.monitor.start(self.chain_state)
        return self.chain_state, self.monitor

    def measure(self, denoiser: Denoiser, starts: Tensor, trainer: Trainer) -> dict[str, float]:
        sampler = GlauberSampler(denoiser, self.temperature)
        state, monitor = self._started(denoiser, sampler, starts)
        metrics: dict[str, float] = {}
        for _ in sampler.run(state, self.steps_per_run):
            metrics = monitor.observe(state) or metrics
        if not metrics and monitor.history:
            metrics = {k: v for k, v in monitor.history[-1].items() if k != "step"}
        self._log_table(trainer, state, monitor)
        return metrics

    def _log_table(self, trainer: Trainer, state: ChainState, monitor: ChainMonitor) -> None:
        """W&B only: a table of the current chain states and a line plot of each chain's drift so far."""
        wandb_loggers = [logger for logger in trainer.loggers if isinstance(logger, WandbLogger)]
        if not wandb_loggers or monitor.drift.latest is None:
            return
        drift = monitor.drift.latest
        rows = []
        for chain, tokens in enumerate(state.tokens[: self.table_rows].tolist()):
            text = self.codec.decode(tokens) if self.codec is not None else " ".join(map(str, tokens))
            rows.append([state.step, chain, float(drift[chain]), text])
        key = f"{self.prefix}{self.monitor_prefix}"
        steps = [entry["step"] for entry in monitor.history]
        trajectories = torch.stack(monitor.projections["drift"], 1)[: self.table_rows] if steps else None
        for logger in wandb_loggers:
            logger.log_table(key=f"{key}states", columns=["step", "chain", "drift", "state"], data=rows,
                             step=trainer.global_step)
            if trajectories is not None:
                import wandb

                plot = wandb.plot.line_series(xs=steps, ys=trajectories.tolist(),
                                              keys=[f"chain {c}" for c in range(len(trajectories))],
                                              title=f"{key}drift trajectories", xname="chain step")
                logger.experiment.log({f"{key}drift_trajectories": plot, "trainer/global_step": trainer.global_step})

    def extra_state(self) -> dict[str, Any]:
        if self.monitor is None or self.chain_state is None:
            return {"chains": None, "monitor": None} if self._pending_state is None else dict(self._pending_state)
        return {"chains": self.chain_state.state_dict(), "monitor": self.monitor.state_dict()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.monitor, self.chain_state = None, None
        self._pending_state = state if state.get("chains") is not None else None


class SemanticDrift(_PersistentChains):
    """Long-run chains started from batch sequences: drift ``1 - cos(e(X_t), e(X_0))``, threshold hits, Hamming.

    ``embedder`` defaults to mean-pooled hidden states of the model's own encoder (or of ``hidden_module`` for
    full-sequence models); pass a :class:`~mlm_dynamics.embedders.SentenceEmbedder` for text, or any function (its
    rows are normalised). Embeddings are computed every ``every`` steps only. :class:`TrapDetector` logs the same
    drift scalars: use it instead of both to run one set of chains.
    """

    monitor_prefix = "drift/"


class TrapDetector(_PersistentChains):
    """Long-run chains with online trap, basin and topic detection (plus the drift scalars).

    Args:
        radius, dwell, hamming_radius, basin_radius: see :class:`~mlm_dynamics.traps.TrapTracker`.
        topic_anchors: optional anchors for topic attraction: ``{topic: [D] or [K, D] embeddings}`` (tensors or
            nested lists), ``{topic: [sentences]}`` (embedded with the callback's embedder when the chains start),
            or the path of a YAML file ``{threshold: ..., topics: {topic: [sentences]}}`` (as
            ``configs/topics-politics.yaml``).
        topic_threshold: cosine similarity counted as "near" a topic (``None``: the file's, else 0.5).
        with_margins: log local margins (``B n`` forward rows per observation) and attach them to traps.
    """

    monitor_prefix = "traps/"

    def __init__(self, *, radius: float = 0.05, dwell: int = 50, hamming_radius: int | None = None,
                 basin_radius: float = 0.1, topic_anchors: Anchors | str | None = None,
                 topic_threshold: float | None = None, with_margins: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.new_tracker = partial(TrapTracker, radius=radius, dwell=dwell, hamming_radius=hamming_radius,
                                   basin_radius=basin_radius)
        self.new_tracker()  # validate now, not at the first run
        anchors: dict[str, Any] | None = None if isinstance(topic_anchors, str) else topic_anchors
        if isinstance(topic_anchors, str):
            anchors, file_threshold = load_topics(topic_anchors, key="topic_anchors")
            topic_threshold = topic_threshold if topic_threshold is not None else file_threshold
        threshold = 0.5 if topic_threshold is None else topic_threshold
        if not -1 <= threshold <= 1:
            raise ValueError(f"topic_threshold must be a cosine similarity in [-1, 1], got {topic_threshold}")
        self.topic_anchors, self.topic_threshold, self.with_margins = anchors, threshold, with_margins

    def build_monitor(self, denoiser: Denoiser, embedder: Embedder) -> ChainMonitor:
        topics = None
        if self.topic_anchors:
            embedded = {name: anchor_embeddings(embedder, value) for name, value in self.topic_anchors.items()}
            topics = TopicAttraction(embedded, threshold=self.topic_threshold)
        return ChainMonitor(embedder, every=self.every, thresholds=self.thresholds,
                            traps=self.new_tracker(), topics=topics,
                            margin_denoiser=denoiser if self.with_margins else None, temperature=self.temperature,
                            prefix=f"{self.prefix}{self.monitor_prefix}")


def anchor_embeddings(embedder: Embedder, anchors: Tensor | list[str] | list[list[float]]) -> Tensor:
    """Anchors as embeddings: tensors and nested lists as they are, sentences through a sentence encoder."""
    if isinstance(anchors, Tensor):
        return anchors
    if anchors and all(isinstance(a, str) for a in anchors):
        if not isinstance(embedder, SentenceEmbedder):
            raise ValueError("topic_anchors as sentences need a SentenceEmbedder (embedder=...); pass embeddings "
                             "otherwise")
        return embedder.embed_texts([str(a) for a in anchors])
    return torch.tensor(anchors, dtype=torch.float32)


__all__ = ["InfluenceProbe", "MixingDiagnostics", "RectangleTest", "SemanticDrift", "TrapDetector"]
