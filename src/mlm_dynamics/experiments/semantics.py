"""The ``semantics`` job: the paper's semantic case study on an English MLM.

Glauber chains from neutral English sentences run on a temperature ladder (one batch; padded rows with per-row
site counts). Every ``every`` steps each state is decoded and embedded with a sentence encoder (default: the offline
all-MiniLM-L6-v2). From the embeddings:

- drift ``1 - cos(e(X_t), e(X_0))`` in units of the encoder's own scale, the median distance between two random
  sentences of the corpus (so 1 means "as far as an unrelated sentence");
- traps (``dwell`` steps within ``trap_radius`` scales) and basins (trap anchors within ``basin_radius`` scales);
- topic attraction: the fraction of a chain's observations "near" a topic, i.e. whose cosine similarity to the
  topic's closest anchor sentence reaches the ``topic_quantile`` quantile of the same similarity over sentences of
  the training corpus (default 0.9: closer than 90 % of the corpus; or an absolute ``topic_threshold``), against the
  base rate, the same fraction over those corpus sentences; attraction = fraction - base rate, with a percentile
  bootstrap interval over chains.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor

from .._random import as_generator
from ..corpus import sample_sentences
from ..diagnostics.quantiles import quantiles
from ..embedders.base import SentenceEmbedder, cosine_distance
from ..models.cost import CostLedger
from ..models.huggingface import TextCodec
from ..sampling.glauber import GlauberSampler
from ..tracking.traps import (
    TrapEvent,
    TrapTracker,
    load_topics,
    topic_sets,
    topic_similarity,
    topics_file,
    trap_statistics,
)
from .common import build_model
from .config import ConfigError, ModelConfig, check_seed, require

NEUTRAL_STARTS = (
    "the committee will meet next week to discuss the new plans for the city park .",
    "she opened the window and watched the rain fall over the quiet little town .",
    "the old man walked slowly down the road with his dog at his side .",
    "we spent the afternoon reading books in the garden behind the house .",
)


@dataclass
class CaseStudyConfig:
    """The ``semantics`` job (see the module docstring); radii are in units of the encoder's scale. ``topics``: a YAML
    file of topic anchors, or the name of a set shipped in the package (``politics``)."""

    JOB: ClassVar[str] = "semantics"
    PATHS: ClassVar[tuple[str, ...]] = ("topics",)

    model: ModelConfig = field(default_factory=lambda: ModelConfig(source="english"))
    starts: list[str] = field(default_factory=lambda: list(NEUTRAL_STARTS))
    temperatures: list[float] = field(default_factory=lambda: [0.5, 1.0, 2.0])
    chains_per_temperature: int = 4
    num_steps: int = 600
    every: int = 10
    encoder: str | None = None
    topics: str = "politics"
    topic_quantile: float = 0.9
    topic_threshold: float | None = None
    trap_radius: float = 0.15
    basin_radius: float = 0.35
    dwell: int = 60
    corpus_sentences: int = 1000
    bootstrap: int = 1000
    seed: int = 0

    def validate(self) -> None:
        """Validate every section; raise :class:`ConfigError` naming the first bad key."""
        self.model.validate("model")
        require(self.model.source != "antiberty", "model.source", "be an English masked LM (english or huggingface)",
                self.model.source)
        require(len(self.starts) > 0 and all(s.strip() for s in self.starts), "starts",
                "be a non-empty list of sentences", self.starts)
        require(len(self.temperatures) > 0 and all(math.isfinite(t) and t > 0 for t in self.temperatures),
                "temperatures", "be a non-empty list of finite numbers > 0", self.temperatures)
        for key in ("chains_per_temperature", "num_steps", "every", "dwell", "corpus_sentences", "bootstrap"):
            require(getattr(self, key) >= 1, key, "be >= 1", getattr(self, key))
        for key in ("trap_radius", "basin_radius"):
            require(0 < getattr(self, key) <= 2, key, "be in (0, 2] scales", getattr(self, key))
        require(0 < self.topic_quantile < 1, "topic_quantile", "lie in (0, 1)", self.topic_quantile)
        check_seed("seed", self.seed)
        require(self.topic_threshold is None or -1 <= self.topic_threshold <= 1, "topic_threshold",
                "be a cosine similarity in [-1, 1] or null", self.topic_threshold)
        require(topics_file(self.topics) is not None, "topics",
                f"be a YAML file of topic anchors or a packaged set ({', '.join(topic_sets())})", self.topics)


@dataclass
class CaseStudyResult:
    """Observations of the chains and what they show; :mod:`mlm_dynamics.report.semantics_report` writes it.
    ``cost``: what each phase spent (the sentence encoder's forwards under ``semantics``, timed, not counted as rows
    of the MLM)."""

    config: CaseStudyConfig
    temperatures: list[float]  # per chain
    steps: list[int]
    embeddings: Tensor  # [observations, chains, D]
    texts: list[list[str]]  # [observations][chains]
    basins: Tensor  # [observations, chains], -1 when not trapped
    near: Tensor  # [observations, chains, topics] bool
    topics: list[str]
    base_rates: dict[str, float]
    scale: float
    events: list[TrapEvent]
    recurrent_basins: list[int]
    thresholds: dict[str, float]
    seconds: dict[str, float]
    cost: CostLedger | None = None

    def drift(self) -> Tensor:
        """``[observations, chains]`` cosine distance to the start, in units of :attr:`scale`."""
        return cosine_distance(self.embeddings, self.embeddings[0]) / self.scale

    def topic_fractions(self) -> Tensor:
        """``[chains, topics]``: fraction of each chain's observations (after the start) near each topic."""
        return self.near[1:].double().mean(0)

    def by_temperature(self) -> list[dict[str, Any]]:
        """Per temperature: drift, traps, basins, dwell, and per topic fraction, base rate, attraction with a
        bootstrap interval over chains."""
        generator = as_generator(self.config.seed, "bootstrap")
        drift, fractions = self.drift(), self.topic_fractions()
        out = []
        for tau in sorted(set(self.temperatures)):
            chains = [c for c, t in enumerate(self.temperatures) if t == tau]
            row: dict[str, Any] = {"temperature": tau, "chains": len(chains),
                                   "drift_final": float(drift[-1, chains].mean()),
                                   **trap_statistics(self.events, self.basins, chains, self.steps[-1])}
            picks = torch.randint(len(chains), (self.config.bootstrap, len(chains)), generator=generator)
            for k, topic in enumerate(self.topics):
                values = fractions[chains, k]
                resampled = values[picks].mean(1)
                low, high = torch.quantile(resampled, torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
                base = self.base_rates[topic]
                row[f"topic_{topic}_fraction"] = float(values.mean())
                row[f"topic_{topic}_base_rate"] = base
                row[f"topic_{topic}_attraction"] = float(values.mean()) - base
                row[f"topic_{topic}_attraction_low"] = low - base
                row[f"topic_{topic}_attraction_high"] = high - base
            out.append(row)
        return out

    def basin_exemplars(self) -> list[dict[str, Any]]:
        """For each basin, the decoded state where it was first entered (its centre), the chain and temperature."""
        exemplars: dict[int, dict[str, Any]] = {}
        for event in self.events:
            if event.basin in exemplars or event.entry_step not in self.steps:
                continue
            observation = self.steps.index(event.entry_step)
            exemplars[event.basin] = {"basin": event.basin, "temperature": self.temperatures[event.chain],
                                      "chain": event.chain, "step": event.entry_step,
                                      "visits": sum(e.basin == event.basin for e in self.events),
                                      "text": self.texts[observation][event.chain]}
        return [exemplars[b] for b in sorted(exemplars)]


def run_case_study(config: CaseStudyConfig, *, ledger: CostLedger | None = None) -> CaseStudyResult:
    """Run the case study described by ``config``; every phase is charged to ``ledger`` (a new one by default), the
    result's ``cost``."""
    config.validate()
    ledger = CostLedger() if ledger is None else ledger
    t0 = time.perf_counter()
    with ledger.phase("model load and topics"):
        denoiser, codec = build_model(config.model)
        if not isinstance(codec, TextCodec):
            raise ConfigError("model: the case study needs a text model with a tokenizer")
        encoder = SentenceEmbedder(codec, config.encoder, device=denoiser.device)
        try:
            sentences, _ = load_topics(config.topics, key="topics")
        except ValueError as error:
            raise ConfigError(str(error)) from None
        topics = list(sentences)
        anchors = [encoder.embed_texts(sentences[name]) for name in topics]

        sample = sample_sentences(config.corpus_sentences, config.seed)
        base = encoder.embed_texts(sample)
        shuffled = base[torch.randperm(len(base), generator=as_generator(config.seed, "shuffle"))]
        scale = float(quantiles(cosine_distance(base, shuffled), [0.5])[0])  # the project's median (type 7)
        similarity = {name: topic_similarity(base, anchor) for name, anchor in zip(topics, anchors, strict=True)}
        thresholds = {name: config.topic_threshold if config.topic_threshold is not None else
                      float(values.double().quantile(config.topic_quantile)) for name, values in similarity.items()}
        base_rates = {name: float((similarity[name] >= thresholds[name]).double().mean()) for name in topics}
    setup_seconds = time.perf_counter() - t0

    temperatures = [tau for tau in config.temperatures for _ in range(config.chains_per_temperature)]
    encoded = [codec.encode(config.starts[c % len(config.starts)]) for c in range(len(temperatures))]
    length = max(len(e) for e in encoded)
    pad = codec.tokenizer.pad_token_id
    tokens = torch.tensor([e + [pad] * (length - len(e)) for e in encoded], device=denoiser.device)
    sites, counts = denoiser.padded_sites(tokens)
    sampler = GlauberSampler(denoiser, torch.tensor(temperatures, dtype=torch.float64))
    state = sampler.init_state(tokens, generator=config.seed, sites=sites, site_counts=counts)
    traps = TrapTracker(radius=config.trap_radius * scale, dwell=config.dwell, basin_radius=config.basin_radius * scale)

    steps: list[int] = []
    embeddings: list[Tensor] = []
    texts: list[list[str]] = []
    basins: list[Tensor] = []
    near: list[Tensor] = []

    def observe() -> None:
        decoded = [codec.decode(row.tolist()) for row in state.tokens]
        with ledger.phase("semantics"):  # the sentence encoder's forwards
            embedded = encoder.embed_texts(decoded)
        traps.observe(state.step, embedded, state.tokens)
        steps.append(state.step)
        embeddings.append(embedded)
        texts.append(decoded)
        basins.append(torch.tensor([-1 if e is None else traps.events[e].basin for e in traps.open_event]))
        near.append(torch.stack([topic_similarity(embedded, anchor) >= thresholds[name]
                                 for name, anchor in zip(topics, anchors, strict=True)], 1))

    ledger.time_bare_forward(denoiser, tokens, tokens != pad)
    t1 = time.perf_counter()
    with ledger.phase("chains"):
        observe()
        for record in sampler.run(state, config.num_steps):
            if record.step % config.every == 0:
                observe()
    return CaseStudyResult(config=config, temperatures=temperatures, steps=steps, embeddings=torch.stack(embeddings),
                           texts=texts, basins=torch.stack(basins), near=torch.stack(near), topics=topics,
                           base_rates=base_rates, scale=scale, events=list(traps.events),
                           recurrent_basins=traps.recurrent_basins, thresholds=thresholds,
                           seconds={"setup": round(setup_seconds, 1), "chains": round(time.perf_counter() - t1, 1)},
                           cost=ledger)


__all__ = ["NEUTRAL_STARTS", "CaseStudyConfig", "CaseStudyResult", "run_case_study"]
