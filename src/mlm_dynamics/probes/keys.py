"""The table of every metric the probes log, generated from their declared keys (for the docs and the README)."""

from __future__ import annotations

from .base import STAGES, Probe
from .chains import DriftProbe, TrapProbe
from .mixing import DobrushinProbe, MeetingTimeProbe, RectangleProbe

PROBES: tuple[type[Probe], ...] = (MeetingTimeProbe, RectangleProbe, DobrushinProbe, DriftProbe, TrapProbe)


def metric_key_page() -> str:
    """``docs/metric-keys.md``: a title, a line on where it comes from, and :func:`metric_key_table`."""
    return ("# Metric keys\n\nEvery metric the diagnostic callbacks and probes log, generated from the keys each probe "
            "declares (`docs/generate.py`).\n\n" + metric_key_table() + "\n")


def metric_key_table() -> str:
    """A Markdown table: every metric name (``{stage}`` is one of train, val, predict), its meaning, unit and when
    it is logged, per probe."""
    lines = ["| metric | meaning | unit | logged |", "|---|---|---|---|"]
    for probe in PROBES:
        for key in probe.keys:
            when = key.when or "every run"
            lines.append(f"| `{probe.group}/{{stage}}/{key.name}` | {key.meaning} | {key.unit} | {when} |")
    stages = ", ".join(STAGES)
    return "\n".join([*lines, "", f"`{{stage}}` is one of {stages}: a run every N optimizer steps, at validation end, "
                               "at predict end; a `prefix` given to a callback comes first."])


__all__ = ["PROBES", "metric_key_page", "metric_key_table"]

