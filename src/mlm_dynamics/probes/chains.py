"""Probes with long-run chains that continue from run to run: semantic drift, traps, basins and topics."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any, ClassVar

import torch
from torch import Tensor

from .._random import as_generator
from ..embedders.base import (
    Embedder,
    EmbedderBase,
    EmbeddingFunction,
    HiddenStateEmbedder,
    ModuleOutputEmbedder,
    SentenceEmbedder,
    as_embedder,
)
from ..models.base import Denoiser
from ..models.huggingface import MaskedLMDenoiser
from ..sampling.categorical import check_temperature
from ..sampling.glauber import ChainState, GlauberSampler
from ..tracking.drift import check_drift_options
from ..tracking.monitor import ChainMonitor
from ..tracking.traps import TopicAttraction, TrapTracker, load_topics
from .base import SCHEDULE_KEYS, MetricKey, Probe
from .starts import StartStates

Anchors = dict[str, Tensor] | dict[str, list[str]] | dict[str, list[list[float]]]

_DRIFT_KEYS = (
    MetricKey("drift_mean", "mean over chains of 1 - cos(e(X_t), e(X_0)), the embedding drift from the start",
              "cosine distance"),
    MetricKey("drift_max", "largest drift over the chains", "cosine distance"),
    MetricKey("hamming_to_start", "mean number of tokens that differ from the start", "tokens"),
    MetricKey("hit_fraction_d{d}", "fraction of chains whose drift has reached d", "fraction",
              "for each d in thresholds"),
    MetricKey("rhat_drift", "rank-normalised split R-hat of the chains' drift (well above 1: the chains have not "
                            "forgotten their starts)", "dimensionless", "from the 4th observation, with >= 2 chains"),
    MetricKey("ess_drift", "bulk effective sample size of the drift draws", "draws",
              "from the 4th observation, with >= 2 chains"),
    MetricKey("rhat_hamming", "split R-hat of the Hamming distance to the start", "dimensionless",
              "from the 4th observation, with >= 2 chains"),
    MetricKey("ess_hamming", "bulk effective sample size of the Hamming draws", "draws",
              "from the 4th observation, with >= 2 chains"),
)


class DriftProbe(Probe):
    """Long-run chains started from the first start rows and continued from run to run (``steps_per_run`` Glauber
    steps each), watched by a :class:`~mlm_dynamics.tracking.ChainMonitor`: drift, threshold hits, Hamming distance,
    R-hat and ESS across chains.

    ``embedder`` defaults to the mean-pooled hidden states of the model's own encoder (masked LMs) or of
    ``hidden_module`` (a submodule whose output is ``[B, L, H]``, for full-sequence models); pass a
    :class:`~mlm_dynamics.embedders.SentenceEmbedder` for text, or any function (its rows are normalised).
    Embeddings are computed every ``every`` steps only. Cost per run: ``steps_per_run`` forwards of ``B`` rows plus
    ``steps_per_run / every`` embedder calls. Rank 0 only.
    """

    group = "drift"
    keys: ClassVar[tuple[MetricKey, ...]] = (*_DRIFT_KEYS, *SCHEDULE_KEYS)

    def __init__(self, *, embedder: EmbedderBase | EmbeddingFunction | None = None,
                 hidden_module: str | None = None, temperature: float = 1.0, steps_per_run: int = 50, every: int = 10,
                 thresholds: Sequence[float] = (0.1, 0.2, 0.3)) -> None:
        if isinstance(steps_per_run, bool) or not isinstance(steps_per_run, int) or steps_per_run < 1:
            raise ValueError(f"steps_per_run must be an integer >= 1, got {steps_per_run!r}")
        check_drift_options(thresholds=thresholds, every=every)
        if embedder is not None and hidden_module is not None:
            raise ValueError("embedder and hidden_module: give one (hidden_module builds a ModuleOutputEmbedder)")
        self.embedder: Embedder | None = None if embedder is None else as_embedder(embedder)
        if hidden_module is not None:
            self.embedder = ModuleOutputEmbedder(hidden_module)
        self.temperature, self.steps_per_run = check_temperature(temperature), steps_per_run
        self.every, self.thresholds = every, tuple(thresholds)
        self.chain_state: ChainState | None = None
        self.monitor: ChainMonitor | None = None
        self._bound: Embedder | None = None
        self._pending: dict[str, Any] | None = None

    def bind(self, denoiser: Denoiser, sample: StartStates) -> None:
        """Check the embedder and the topic anchors against ``denoiser`` and a sample of starts, before any run."""
        embedder = self.embedder if self.embedder is not None else HiddenStateEmbedder()
        if isinstance(embedder, EmbedderBase):
            try:
                embedder.bind(denoiser)
            except TypeError:
                if self.embedder is None and not isinstance(denoiser, MaskedLMDenoiser):
                    raise TypeError(f"{type(self).__name__}: a {type(denoiser).__name__} has no encoder to embed "
                                    "chain states with; pass embedder= or hidden_module= (a submodule whose output "
                                    "is [B, L, H])") from None
                raise
        embedding = embedder(sample.tokens)
        if not isinstance(embedding, Tensor) or embedding.dim() != 2 or embedding.shape[0] != sample.tokens.shape[0]:
            raise ValueError(f"embedder must return [B, D] embeddings, got {getattr(embedding, 'shape', embedding)}")
        self._bound = embedder
        self.check_dimension(int(embedding.shape[1]))

    def check_dimension(self, dimension: int) -> None:
        """Checks that need the embedding width (subclasses: topic anchors)."""
        del dimension

    def build_monitor(self, denoiser: Denoiser, embedder: Embedder) -> ChainMonitor:
        """The :class:`ChainMonitor` that watches the long-run chains (drift, traps, topics)."""
        return ChainMonitor(embedder, every=self.every, thresholds=self.thresholds, temperature=self.temperature,
                            prefix="")

    def _started(self, denoiser: Denoiser, sampler: GlauberSampler, starts: StartStates,
                 generator: torch.Generator) -> tuple[ChainState, ChainMonitor]:
        """The persistent chains and their monitor, created (or restored from a checkpoint) at the first run."""
        if self._bound is None:
            self.bind(denoiser, starts)
        if self.monitor is None or self.chain_state is None:
            assert self._bound is not None
            self.monitor = self.build_monitor(denoiser, self._bound)
            if self._pending is not None:
                self.chain_state = ChainState.from_state_dict(self._pending["chains"], denoiser.device)
                self.monitor.load_state_dict(self._pending["monitor"])
                self._pending = None
            else:
                self.chain_state = sampler.init_state(starts.tokens, generator=as_generator(generator, "chains"),
                                                      sites=starts.sites, site_counts=starts.counts,
                                                      attention_mask=starts.attention_mask)
                self.monitor.start(self.chain_state)
        return self.chain_state, self.monitor

    def forward_rows(self, rows: int, sites: int) -> int:
        """``B steps_per_run`` chain rows, plus one embedding of ``B`` rows per observation."""
        return rows * self.steps_per_run + rows * (self.steps_per_run // self.every + 1)

    def smaller_run(self, sites: int) -> tuple[str, int] | None:
        """Fewer steps this run, down to one observation (``every``): the chains continue from there at the next."""
        del sites
        return "steps_per_run", min(self.every, self.steps_per_run)

    def measure(self, denoiser: Denoiser, starts: StartStates, generator: torch.Generator) -> dict[str, float]:
        """Advance the long-run chains by ``steps`` and return the monitor's scalars."""
        sampler = GlauberSampler(denoiser, self.temperature)
        state, monitor = self._started(denoiser, sampler, starts, generator)
        metrics: dict[str, float] = {}
        for _ in sampler.run(state, self.steps_per_run):
            metrics = monitor.observe(state) or metrics
        if not metrics and monitor.history:
            metrics = {k: v for k, v in monitor.history[-1].items() if k != "step"}
        return metrics

    def state_dict(self) -> dict[str, Any]:
        """The chains, their stream and the monitor's state."""
        if self.monitor is None or self.chain_state is None:
            return {"chains": None, "monitor": None} if self._pending is None else dict(self._pending)
        return {"chains": self.chain_state.state_dict(), "monitor": self.monitor.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.monitor, self.chain_state = None, None
        self._pending = state if state.get("chains") is not None else None


class TrapProbe(DriftProbe):
    """:class:`DriftProbe` with online trap, basin and topic detection (plus the drift scalars).

    Args:
        radius, dwell, hamming_radius, basin_radius: see :class:`~mlm_dynamics.tracking.TrapTracker`.
        topic_anchors: optional anchors for topic attraction: ``{topic: [D] or [K, D] embeddings}`` (tensors or
            nested lists), ``{topic: [sentences]}`` (embedded with the probe's embedder, which must then be a
            :class:`~mlm_dynamics.embedders.SentenceEmbedder`), or the path of a YAML file
            ``{threshold: ..., topics: {topic: [sentences]}}``. Checked against the embedder when the run starts.
        topic_threshold: cosine similarity counted as "near" a topic (``None``: the file's, else 0.5).
        with_margins: log local margins (``B n`` forward rows per observation) and attach them to traps.
    """

    group = "traps"
    keys = (*_DRIFT_KEYS,
            MetricKey("trap_rate", "fraction of chains inside a trap (within radius of an anchor for >= dwell steps)",
                      "fraction"),
            MetricKey("num_basins", "distinct basins (clusters of trap anchors) found so far", "count"),
            MetricKey("recurrent_basins", "basins entered again after a chain had left them", "count"),
            MetricKey("dwell_time_mean", "mean time spent in traps so far, open traps up to now", "chain steps",
                      "once a trap was seen"),
            MetricKey("topic/{name}", "fraction of observed states within topic_threshold of a topic's anchors",
                      "fraction", "with topic_anchors, for each topic"),
            MetricKey("margin_mean", "mean local margin of the current tokens (logit of the token minus the best "
                                     "other)", "logits", "with with_margins"),
            MetricKey("margin_min", "smallest local margin", "logits", "with with_margins"),
            MetricKey("change_probability_mean", "mean probability that a heat-bath update changes a site",
                      "probability", "with with_margins"),
            MetricKey("step_escape_bound_mean", "mean bound q(Delta, tau) on one step changing the chain",
                      "probability", "with with_margins"),
            MetricKey("margin_sites", "fraction of sites whose current token has a margin", "fraction",
                      "with with_margins"), *SCHEDULE_KEYS)

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
        if anchors is not None and (not isinstance(anchors, dict) or not anchors):
            raise ValueError("topic_anchors must map topic names to anchors, a YAML path, or be None")
        self.topic_anchors, self.topic_threshold, self.with_margins = anchors, threshold, with_margins
        self._anchors: dict[str, Tensor] | None = None

    def forward_rows(self, rows: int, sites: int) -> int:
        """:meth:`DriftProbe.forward_rows`, plus ``B n`` margin rows per observation with margins."""
        margins = rows * sites * (self.steps_per_run // self.every + 1) if self.with_margins else 0
        return super().forward_rows(rows, sites) + margins

    def check_dimension(self, dimension: int) -> None:
        """Embed the topic anchors now and check their width against the embedder's."""
        if not self.topic_anchors:
            return
        assert self._bound is not None
        self._anchors = {}
        for name, value in self.topic_anchors.items():
            anchor = anchor_embeddings(self._bound, value, topic=name)
            if anchor.shape[-1] != dimension:
                raise ValueError(f"topic_anchors: topic {name!r} has anchors of dimension {anchor.shape[-1]}, the "
                                 f"embedder gives {dimension}")
            self._anchors[name] = anchor

    def build_monitor(self, denoiser: Denoiser, embedder: Embedder) -> ChainMonitor:
        """A :class:`ChainMonitor` with trap detection (radius, dwell, basins) and optional topic attraction."""
        topics = None if self._anchors is None else TopicAttraction(self._anchors, threshold=self.topic_threshold)
        return ChainMonitor(embedder, every=self.every, thresholds=self.thresholds, traps=self.new_tracker(),
                            topics=topics, margin_denoiser=denoiser if self.with_margins else None,
                            temperature=self.temperature, prefix="")


def anchor_embeddings(embedder: Embedder, anchors: Tensor | list[str] | list[list[float]], *,
                      topic: str = "") -> Tensor:
    """Anchors as embeddings: tensors and nested lists as they are, sentences through a sentence encoder."""
    if isinstance(anchors, Tensor):
        return anchors.float()
    if isinstance(anchors, list) and anchors and all(isinstance(a, str) for a in anchors):
        if not isinstance(embedder, SentenceEmbedder):
            raise ValueError(f"topic_anchors: topic {topic!r} is given as sentences, which need a SentenceEmbedder "
                             f"(embedder=...), not a {type(embedder).__name__}; pass embeddings otherwise")
        return embedder.embed_texts([str(a) for a in anchors])
    try:
        return torch.tensor(anchors, dtype=torch.float32)
    except (TypeError, ValueError) as error:
        raise ValueError(f"topic_anchors: topic {topic!r} is neither sentences nor numbers: {error}") from None


__all__ = ["Anchors", "DriftProbe", "TrapProbe", "anchor_embeddings"]
