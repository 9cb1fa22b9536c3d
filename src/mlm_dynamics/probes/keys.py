"""The table of every metric the probes log, generated from their declared keys (for the docs and the README)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from .base import STAGES, MetricKey, Probe
from .chains import DriftProbe, TrapProbe
from .decoding import ParallelDecodingProbe
from .mixing import DobrushinProbe, MeetingTimeProbe, RectangleProbe

PROBES: tuple[type[Probe], ...] = (MeetingTimeProbe, RectangleProbe, DobrushinProbe, DriftProbe, TrapProbe,
                                   ParallelDecodingProbe)


def metric_key_page() -> str:
    """``docs/reference/metric-keys.md``: a title, a line on where it comes from, and :func:`metric_key_table`."""
    return ("# Metric keys\n\nEvery metric the diagnostic callbacks and probes log, generated from the keys each probe "
            "declares (`docs/generate.py`).\n\n" + metric_key_table() + "\n")


def metric_key_table() -> str:
    """A Markdown table: every metric name (``{stage}`` is one of train, val, predict), its meaning, unit and when
    it is logged, per probe."""
    lines = ["| metric | meaning | unit | logged |", "|---|---|---|---|"]
    for probe in PROBES:
        for key in probe.keys:
            when = key.when or "every run"
            cells = (f"`{probe.group}/{{stage}}/{key.name}`", key.meaning, key.unit, when)
            lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")  # |R| in a cell
    stages = ", ".join(STAGES)
    return "\n".join([*lines, "", f"`{{stage}}` is one of {stages}: a run every N optimizer steps, at validation end, "
                               "at predict end; a `prefix` given to a callback comes first."])


SECTION_TITLES = {"mixing": "Mixing: coupled chains", "rectangle": "Incompatibility: rectangle test",
                  "influence": "Influence: Dobrushin estimates", "drift": "Semantic drift", "traps": "Traps and basins",
                  "parallel": "Parallel decoding: K positions at once"}


UNIT_RANGES: dict[str, tuple[float, float]] = {
    "probability": (0.0, 1.0), "fraction": (0.0, 1.0), "flag": (0.0, 1.0), "cosine distance": (0.0, 2.0),
    "count": (0.0, math.inf), "single-site steps": (0.0, math.inf), "chain steps": (0.0, math.inf),
    "draws": (0.0, math.inf), "tokens": (0.0, math.inf), "nats": (0.0, math.inf), "temperature": (0.0, math.inf),
    "dimensionless": (0.0, math.inf), "probability sum": (0.0, math.inf), "logits": (-math.inf, math.inf)}
"""The values a key of each unit can take; a reader refuses others (``overhead``, a ratio of seconds, may pass 1)."""


def value_range(key: MetricKey) -> tuple[float, float]:
    """``(low, high)`` of the values ``key`` can take (:data:`UNIT_RANGES` by its unit)."""
    low, high = UNIT_RANGES.get(key.unit, (-math.inf, math.inf))
    return (low, math.inf) if key.name == "overhead" else (low, high)


def key_regex(name: str) -> str:
    """A declared metric name as a regular expression: ``{...}`` placeholders match any option value."""
    return r"[\w.-]+".join(re.escape(part) for part in re.split(r"\{[a-z]+\}", name))


def tensorboard_layout(groups: Sequence[str], prefix: str = "") -> dict[str, dict[str, list[Any]]]:
    """A TensorBoard custom-scalars layout (``SummaryWriter.add_custom_scalars``): one category per metric group,
    one chart per declared quantity with the train, validation and predict runs (and every temperature or threshold
    option) as lines (regular expressions over the logged tags)."""
    layout: dict[str, dict[str, list[Any]]] = {}
    for probe in PROBES:
        if probe.group not in groups:
            continue
        tags = rf"{re.escape(prefix)}{probe.group}/(train|val|predict)/"
        charts = {key.name: ["Multiline", [tags + key_regex(key.name)]] for key in probe.keys}
        layout[f"{prefix}{SECTION_TITLES[probe.group]}"] = charts
    return layout


def headline_keys(prefix: str = "", stage: str = "train") -> dict[str, list[str]]:
    """Per section title, the keys a dashboard shows first (a run every N steps: ``stage`` train): the meeting-time
    median (or its lower bound where censored) and censored fraction, rectangle prevalence and median ``|R|``, the
    influence estimates at tau = 1, drift and hitting fractions, trap rate, basins and dwell times."""
    chosen = {"mixing": ["meeting_time_median", "meeting_time_median_lower_bound", "censored_fraction",
                         "lagged/tv_bound_t{t}"],
              "rectangle": ["prevalence", "abs_r_median"], "influence": ["dobrushin_tau{t}", "tau_star"],
              "drift": ["drift_mean", "hit_fraction_d{d}", "rhat_drift"],
              "traps": ["trap_rate", "num_basins", "dwell_time_mean", "drift_mean", "topic/{name}"],
              "parallel": ["tv_k{n}", "{rule}/k", "{rule}/violated"]}
    return {SECTION_TITLES[group]: [f"{prefix}{group}/{stage}/{name}" for name in names]
            for group, names in chosen.items()}


__all__ = ["PROBES", "SECTION_TITLES", "UNIT_RANGES", "headline_keys", "key_regex", "metric_key_page",
           "metric_key_table", "tensorboard_layout", "value_range"]
