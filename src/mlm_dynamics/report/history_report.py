"""``mlm-dynamics report LOGDIR``: the mixing history of a training run, from its logs, as a self-contained page.

Reads the diagnostics a run logged (:func:`~mlm_dynamics.report.logs.read_logs`: Lightning CSV, TensorBoard, offline
W&B) and writes ``history.json`` (every series), ``figures/*.png`` and ``report.html``: what changed over training in
a few lines and a compact table (first and last value of each headline quantity), then one figure per section
(mixing, incompatibility, influence, drift and traps) with the train and validation runs as separate lines, and the
latest figures the run logged itself (survival curves, ``|R|`` histograms, landscapes).
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from ..probes.keys import key_regex
from .figures import new_figure
from .html import Section, render_html, write_figures
from .logs import LoggedRun
from .writers import write_json, write_text

# section -> (panel title, the metric names it draws, after {group}/{stage}/); {t} matches every temperature
SECTIONS: dict[str, list[tuple[str, list[str]]]] = {
    "Mixing": [("median meeting time (steps; open triangles: beyond the budget, only a lower bound)",
                ["mixing/{stage}/meeting_time_median", "mixing/{stage}/meeting_time_median_lower_bound"]),
               ("censored fraction of coupled pairs", ["mixing/{stage}/censored_fraction"])],
    "Incompatibility": [("rectangles that certify incompatibility", ["rectangle/{stage}/prevalence"]),
                        ("median |R| (nats)", ["rectangle/{stage}/abs_r_median"])],
    "Influence": [("influence estimate (a lower estimate of Dobrushin's coefficient)",
                   ["influence/{stage}/dobrushin_tau{t}"])],
    "Drift and traps": [("drift from the start", ["drift/{stage}/drift_mean", "traps/{stage}/drift_mean"]),
                        ("fraction of chains in a trap", ["traps/{stage}/trap_rate"])],
}
HEADLINE = ["mixing/{stage}/meeting_time_median", "mixing/{stage}/meeting_time_median_lower_bound",
            "mixing/{stage}/censored_fraction", "rectangle/{stage}/prevalence",
            "influence/{stage}/dobrushin_tau{t}", "drift/{stage}/drift_mean", "traps/{stage}/drift_mean",
            "traps/{stage}/trap_rate"]


def matching(run: LoggedRun, template: str) -> list[str]:
    """The logged keys that ``template`` names (``{stage}``, ``{t}``: any stage or temperature; the logged keys are
    declared ones, whose stage is train, val or predict)."""
    pattern = re.compile(key_regex(template))
    return [key for key in run.scalars if pattern.fullmatch(key)]


def history_report(run: LoggedRun) -> dict[str, Any]:
    """JSON-ready: the log ``source``, the ``run`` read, its ``files`` and ``notes`` (what was read past), every
    series (``scalars``: key -> ``[[step, value], ...]``), and per headline key its first and last logged value with
    their steps, its minimum, maximum and number of runs."""
    headline = []
    for template in HEADLINE:
        for key in matching(run, template):
            series = run.scalars[key]
            values = [value for _, value in series]
            headline.append({"metric": key, "first": values[0], "first_step": series[0][0], "last": values[-1],
                             "last_step": series[-1][0], "min": min(values), "max": max(values), "runs": len(values)})
    return {"source": run.source, "run": run.name or ".", "files": run.files, "notes": run.notes,
            "headline": headline,
            "scalars": {key: [list(point) for point in series] for key, series in run.scalars.items()}}


def findings(report: dict[str, Any]) -> list[str]:
    """One sentence per headline quantity that was measured more than once: where it started and where it ended."""
    lines = []
    for row in report["headline"]:
        if row["runs"] < 2:
            continue
        if row["last"] == row["first"]:
            lines.append(f"{row['metric']} stayed at {row['first']:.4g} from step {row['first_step']} to step "
                         f"{row['last_step']} ({row['runs']} runs)")
            continue
        change = "rose" if row["last"] > row["first"] else "fell"
        lines.append(f"{row['metric']} {change} from {row['first']:.4g} (step {row['first_step']}) to "
                     f"{row['last']:.4g} (step {row['last_step']}) over {row['runs']} runs")
    return lines or ["every quantity was measured once: run longer, or more often, to see a history"]


def section_figure(run: LoggedRun, panels: list[tuple[str, list[str]]]) -> Figure | None:
    """One panel per quantity, a line per logged key (stage, temperature) against the training step."""
    drawn = [(title, [key for template in templates for key in matching(run, template)])
             for title, templates in panels]
    drawn = [(title, keys) for title, keys in drawn if keys]
    if not drawn:
        return None
    figure = new_figure(6.4, 2.6 * len(drawn))
    for index, (title, keys) in enumerate(drawn):
        axes = figure.add_subplot(len(drawn), 1, index + 1)
        for key in keys:
            steps, values = zip(*run.scalars[key], strict=True)
            if key.endswith("_lower_bound"):  # a censored value: a bound, drawn open and unconnected
                axes.plot(steps, values, marker="^", ms=6, ls="none", fillstyle="none", label=f"{key} (> this)")
            else:
                axes.plot(steps, values, marker="o", ms=3, label=key)
        axes.set_title(title, fontsize=9)
        axes.set_xlabel("training step")
        axes.legend(fontsize=7)
    return figure


def history_figures(run: LoggedRun) -> dict[str, Figure]:
    """The sections' figures by file stem."""
    drawn = {name.lower().replace(" ", "-"): section_figure(run, panels) for name, panels in SECTIONS.items()}
    return {stem: figure for stem, figure in drawn.items() if figure is not None}


def write_history_report(run: LoggedRun, out_dir: Path, title: str) -> dict[str, Any]:
    """Write ``history.json``, ``figures/*.png`` and ``report.html`` into ``out_dir``; return the report."""
    report = history_report(run)
    drawn = history_figures(run)
    write_figures(out_dir, drawn)
    table = [{"metric": row["metric"], "first": row["first"], "at step": row["first_step"], "last": row["last"],
              "at step ": row["last_step"], "runs": row["runs"]} for row in report["headline"]]
    read = (f"Read the {html.escape(run.source)} log of run <code>{html.escape(report['run'])}</code> from "
            + ", ".join(f"<code>{html.escape(file)}</code>" for file in run.files) + ".")
    sections = [Section("What the run found", paragraphs=[*(html.escape(line) for line in findings(report)), read,
                                                          *(html.escape(note) for note in run.notes)]),
                Section("Key figures", tables=[("first and last value of each headline quantity", table)])]
    names = {stem: name for name in SECTIONS for stem in [name.lower().replace(" ", "-")]}
    sections += [Section(names[stem], figures=[(figure, f"{names[stem]} over training ({run.source} log)")])
                 for stem, figure in drawn.items()]
    if run.images:  # the latest figures the run logged itself
        images = "".join(f'<figure><img alt="{html.escape(tag)}" src="data:image/png;base64,'
                         f'{base64.b64encode(data).decode()}"><figcaption>{html.escape(tag)} (latest)</figcaption>'
                         "</figure>" for tag, data in sorted(run.images.items()))
        sections.append(Section("Latest logged figures", paragraphs=[images]))
    write_text(out_dir / "report.html", render_html(title, sections, {"source": run.source, "run": report["run"]}))
    write_json(out_dir / "history.json", report)
    return report


__all__ = ["HEADLINE", "SECTIONS", "findings", "history_figures", "history_report", "matching",
           "write_history_report"]
