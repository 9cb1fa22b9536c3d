"""Online trap and basin detection, and attraction to topic anchors.

A chain is **trapped** when, since some anchor step s, every observed state stayed within ``radius`` (cosine
distance of embeddings to the anchor's) and, optionally, within ``hamming_radius`` tokens of the anchor, for at
least ``dwell`` steps. The trap opens at s and closes at the first observation outside; leaving the radius moves the
anchor to the current state. Trap anchors are grouped into **basins** by leader clustering (a new anchor joins the
nearest basin within ``basin_radius``, else founds one); a basin entered again after the chain left it is
**recurrent**. The local margin at entry (:mod:`.margin`) is kept with each trap as supporting evidence: a positive
margin means no single-site change is likely (escape probability bound ``q(Delta, tau)``).

Topic attraction: the fraction of observations whose embedding has cosine similarity >= ``threshold`` with a
topic's anchor sentences.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import Tensor

from ..diagnostics.survival import estimate_quantile
from ..embedders.base import cosine_distance


@dataclass
class TrapEvent:
    """One trap: the chain, its basin, the step it entered and left (``None``: still open) and its margin."""
    chain: int
    basin: int
    entry_step: int
    exit_step: int | None = None
    margin: float | None = None

    def dwell(self, now: int) -> int:
        """Steps spent in the trap up to ``now`` (or its end)."""
        return (self.exit_step if self.exit_step is not None else now) - self.entry_step


def trap_statistics(events: Sequence[TrapEvent], basins: Tensor, chains: Sequence[int], now: int
                    ) -> dict[str, float]:
    """The traps of ``chains``: ``num_traps``, ``num_basins`` (distinct), ``trapped_fraction`` (of their observations
    with a basin in ``basins [observations, all chains]``, ``-1`` = not trapped) and the median dwell time with its
    interval (:meth:`~mlm_dynamics.diagnostics.survival.QuantileEstimate.summary`: a trap still open at ``now`` is a
    censored dwell, so ``dwell_time_median`` is missing, with ``dwell_time_median_lower_bound``, when more than half
    of the traps are still open; nan without traps)."""
    mine = [e for e in events if e.chain in chains]
    dwell = torch.tensor([float(e.dwell(now)) for e in mine], dtype=torch.float64)
    still_open = torch.tensor([e.exit_step is None for e in mine], dtype=torch.bool)
    return {"num_traps": float(len(mine)), "num_basins": float(len({e.basin for e in mine})),
            "trapped_fraction": float((basins[:, list(chains)] >= 0).double().mean()),
            **estimate_quantile(dwell, still_open, 0.5).summary("dwell_time")}


class TrapTracker:
    """Trap and basin bookkeeping for ``B`` chains observed at increasing steps."""

    def __init__(self, *, radius: float = 0.05, dwell: int = 100, hamming_radius: int | None = None,
                 basin_radius: float = 0.1) -> None:
        if not 0 < radius < 2 or not 0 < basin_radius < 2:
            raise ValueError(f"radius and basin_radius must be cosine distances in (0, 2), got {radius}, "
                             f"{basin_radius}")
        if dwell < 1:
            raise ValueError(f"dwell must be >= 1 step, got {dwell}")
        if hamming_radius is not None and hamming_radius < 0:
            raise ValueError(f"hamming_radius must be >= 0 or None, got {hamming_radius}")
        self.radius, self.dwell, self.hamming_radius, self.basin_radius = radius, dwell, hamming_radius, basin_radius
        self.anchor: Tensor | None = None
        self.anchor_tokens: Tensor | None = None
        self.anchor_step: Tensor | None = None
        self.open_event: list[int | None] = []
        self.events: list[TrapEvent] = []
        self.basins: Tensor = torch.zeros(0, 0)
        self.basin_visits: list[int] = []
        self.now = 0

    def fresh(self) -> TrapTracker:
        """A new tracker with the same options (for a new phase of a decoding loop)."""
        return TrapTracker(radius=self.radius, dwell=self.dwell, hamming_radius=self.hamming_radius,
                           basin_radius=self.basin_radius)

    def observe(self, step: int, embeddings: Tensor, tokens: Tensor | None = None,
                margin: Tensor | None = None) -> Tensor:
        """Update with states at ``step``; returns ``[B]`` True for trapped chains."""
        embeddings = embeddings.float().cpu()
        if self.anchor is None:
            self._reset_anchor(torch.ones(len(embeddings), dtype=torch.bool), step, embeddings, tokens)
            self.open_event = [None] * len(embeddings)
        self.now = step
        anchor, anchor_step = self.anchor, self.anchor_step
        assert anchor is not None and anchor_step is not None  # set by the first observation
        inside = cosine_distance(embeddings, anchor) <= self.radius
        if self.hamming_radius is not None:
            if tokens is None or self.anchor_tokens is None:
                raise ValueError("tokens are required when hamming_radius is set")
            inside &= (tokens.cpu() != self.anchor_tokens).sum(1) <= self.hamming_radius
        for chain in (~inside).nonzero().squeeze(1).tolist():
            if self.open_event[chain] is not None:
                self.events[self.open_event[chain]].exit_step = step
                self.open_event[chain] = None
        self._reset_anchor(~inside, step, embeddings, tokens)
        ready = inside & (step - anchor_step >= self.dwell)
        for chain in ready.nonzero().squeeze(1).tolist():
            if self.open_event[chain] is None:
                basin = self._assign_basin(anchor[chain])
                evidence = None if margin is None else float(margin[chain])
                self.events.append(TrapEvent(chain, basin, int(anchor_step[chain]), margin=evidence))
                self.open_event[chain] = len(self.events) - 1
        return self.trapped

    def _reset_anchor(self, where: Tensor, step: int, embeddings: Tensor, tokens: Tensor | None) -> None:
        if self.anchor is None or self.anchor_step is None:
            self.anchor = embeddings.clone()
            self.anchor_step = torch.full((len(embeddings),), step, dtype=torch.long)
            self.anchor_tokens = None if tokens is None else tokens.cpu().clone()
            return
        self.anchor[where] = embeddings[where]
        self.anchor_step[where] = step
        if tokens is not None and self.anchor_tokens is not None:
            self.anchor_tokens[where] = tokens.cpu()[where]

    def _assign_basin(self, center: Tensor) -> int:
        if len(self.basin_visits):
            distances = cosine_distance(self.basins, center[None])
            nearest = int(distances.argmin())
            if distances[nearest] <= self.basin_radius:
                self.basin_visits[nearest] += 1
                return nearest
        self.basins = torch.cat([self.basins.reshape(-1, len(center)), center[None]])
        self.basin_visits.append(1)
        return len(self.basin_visits) - 1

    @property
    def trapped(self) -> Tensor:
        """``[B]`` True for chains inside an open trap."""
        return torch.tensor([event is not None for event in self.open_event])

    def dwell_times(self, include_open: bool = False) -> Tensor:
        """Dwell times of closed traps (and of open ones, censored at now, if ``include_open``)."""
        return torch.tensor([e.dwell(self.now) for e in self.events if include_open or e.exit_step is not None],
                            dtype=torch.float64)

    @property
    def recurrent_basins(self) -> list[int]:
        """Basins entered more than once."""
        return [b for b, visits in enumerate(self.basin_visits) if visits > 1]

    def state_dict(self) -> dict:
        """Open and closed traps, basins and per-chain anchors, for checkpoints."""
        return {"anchor": self.anchor, "anchor_tokens": self.anchor_tokens, "anchor_step": self.anchor_step,
                "open_event": list(self.open_event), "events": [asdict(e) for e in self.events],
                "basins": self.basins, "basin_visits": list(self.basin_visits), "now": self.now}

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.anchor, self.anchor_tokens = state["anchor"], state["anchor_tokens"]
        self.anchor_step = state["anchor_step"]
        self.open_event, self.basins = list(state["open_event"]), state["basins"]
        self.events = [TrapEvent(**e) for e in state["events"]]
        self.basin_visits, self.now = list(state["basin_visits"]), state["now"]


TOPIC_SETS = Path(__file__).resolve().parents[1] / "assets" / "topics"


def topic_sets() -> list[str]:
    """The names of the topic sets shipped in the package (``politics``: the paper's case study and controls)."""
    return sorted(file.stem for file in TOPIC_SETS.glob("*.yaml"))


def topics_file(value: str | Path) -> Path | None:
    """``value`` when it is a file, else the packaged topic set of that name, else ``None``."""
    if Path(value).is_file():
        return Path(value)
    packaged = TOPIC_SETS / f"{value}.yaml"
    return packaged if str(value) in topic_sets() else None


def load_topics(path: str | Path, *, key: str) -> tuple[dict[str, Any], float | None]:
    """The topics and the optional threshold of a YAML file ``{threshold: ..., topics: {name: [anchor sentences]}}``,
    or of a packaged set by name (:func:`topic_sets`); ``key`` names the option in the error."""
    file = topics_file(path)
    spec = yaml.safe_load(file.read_text(encoding="utf-8")) if file is not None else None
    if not isinstance(spec, dict) or not isinstance(spec.get("topics"), dict) or not spec["topics"]:
        raise ValueError(f"{key}: {str(path)!r} is not a YAML file mapping 'topics' to {{name: [anchor sentences]}}")
    threshold = spec.get("threshold")
    return spec["topics"], None if threshold is None else float(threshold)


def topic_similarity(embeddings: Tensor, anchors: Tensor) -> Tensor:
    """``[N]`` cosine similarity of each unit embedding ``[N, D]`` to its closest unit anchor ``[K, D]``."""
    return (embeddings @ anchors.T).amax(1)


class TopicAttraction:
    """Fraction of observed states near each topic: ``max_k cos(e(x), a_k) >= threshold`` over its anchors."""

    def __init__(self, anchors: dict[str, Tensor], *, threshold: float = 0.5) -> None:
        if not anchors:
            raise ValueError("anchors must name at least one topic")
        self.names = list(anchors)
        self.anchors = [torch.nn.functional.normalize(a.float().cpu().reshape(-1, a.shape[-1]), dim=-1)
                        for a in anchors.values()]
        self.threshold = threshold
        self.near = torch.zeros(len(self.names), dtype=torch.float64)
        self.observations = 0

    def observe(self, embeddings: Tensor) -> Tensor:
        """``[topics, B]`` similarity of each state to its closest anchor of each topic; updates the counts."""
        similarity = torch.stack([topic_similarity(embeddings.float().cpu(), a) for a in self.anchors])
        self.near += (similarity >= self.threshold).sum(1)
        self.observations += embeddings.shape[0]
        return similarity

    def fractions(self) -> dict[str, float]:
        """Fraction of observed states near each topic."""
        return {name: float(self.near[k] / max(self.observations, 1)) for k, name in enumerate(self.names)}

    def state_dict(self) -> dict:
        """Counts per topic, for checkpoints."""
        return {"near": self.near, "observations": self.observations}

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.near, self.observations = state["near"], state["observations"]


__all__ = ["TopicAttraction", "TrapEvent", "TrapTracker", "load_topics", "topic_similarity", "trap_statistics"]
