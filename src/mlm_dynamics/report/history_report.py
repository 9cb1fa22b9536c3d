"""``mlm-dynamics report LOGDIR``: the mixing history of a training run, from its logs, as a self-contained page.

Reads the diagnostics a run logged (:func:`~mlm_dynamics.report.logs.read_logs`: Lightning CSV, TensorBoard, offline
W&B) and writes ``history.json`` (every series), ``figures/*.png`` and ``report.html``: what changed over training in
a few lines and a compact table (first and last value of each headline quantity), then one figure per section
(mixing, incompatibility, influence, drift and traps) with the train and validation runs as separate lines, and the
latest figures the run logged itself (survival curves, ``|R|`` histograms, landscapes). Several runs of one log
folder (``--run A --run B``: two fine-tunes, two checkpoints resumed into separate versions) are overlaid on the same
figures, one colour per run, with their findings and key figures side by side.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from ..probes.keys import key_regex
from .artifacts import artifact
from .figures import SERIES_MARKERS, legend_outside, new_figure
from .html import Section, generated_by, marked_changes, render_html, write_figures
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


def section_figure(runs: Sequence[LoggedRun], panels: list[tuple[str, list[str]]]) -> Figure | None:
    """One panel per quantity, a line per logged key (stage, temperature) against the training step; with several
    runs overlaid, one colour per run and one marker per key, each line labelled ``run: key``."""
    several = len(runs) > 1
    drawn = [(title, [(index, key) for index, run in enumerate(runs) for template in templates
                      for key in matching(run, template)]) for title, templates in panels]
    drawn = [(title, keys) for title, keys in drawn if keys]
    if not drawn:
        return None
    figure = new_figure(6.4, (2.6 + 0.5 * several * len(runs)) * len(drawn))
    for row, (title, keys) in enumerate(drawn):
        axes = figure.add_subplot(len(drawn), 1, row + 1)
        names = sorted({key for _, key in keys})
        for index, key in keys:
            steps, values = zip(*runs[index].scalars[key], strict=True)
            marker = SERIES_MARKERS[names.index(key) % len(SERIES_MARKERS)]
            style: dict[str, Any] = {"color": f"C{index}", "marker": marker} if several else {}
            label = f"{runs[index].name or '.'}: {key}" if several else key
            if key.endswith("_lower_bound"):  # a censored value: a bound, drawn open and unconnected
                axes.plot(steps, values, **{"marker": "^", **style}, ms=6, ls="none", fillstyle="none",
                          label=f"{label} (> this)")
            else:
                axes.plot(steps, values, **{"marker": "o", **style}, ms=3, label=label)
        axes.set_title(title, fontsize=9)
        axes.set_xlabel("training step")
        legend_outside(axes, below=True)
    return figure


def history_figures(runs: Sequence[LoggedRun]) -> dict[str, Figure]:
    """The sections' figures by file stem, the runs overlaid."""
    drawn = {name.lower().replace(" ", "-"): section_figure(runs, panels) for name, panels in SECTIONS.items()}
    return {stem: figure for stem, figure in drawn.items() if figure is not None}


def write_history_report(runs: Sequence[LoggedRun], out_dir: Path, title: str) -> list[dict[str, Any]]:
    """Write ``history.json`` (one run's :func:`history_report`, or ``{"runs": [...]}`` for several, with the
    ``environment`` that made it), ``figures/*.png`` (the runs overlaid) and ``report.html`` into ``out_dir``;
    return the runs' reports."""
    if not runs:
        raise ValueError("runs: give at least one logged run")
    reports = [history_report(run) for run in runs]
    several = len(runs) > 1
    drawn = history_figures(runs)
    write_figures(out_dir, drawn)
    table = [{**({"run": report["run"]} if several else {}), "metric": row["metric"], "first": row["first"],
              "at step": row["first_step"], "last": row["last"], "at step ": row["last_step"], "runs": row["runs"]}
             for report in reports for row in report["headline"]]
    found = [f"{report['run']}: {line}" if several else line for report in reports for line in findings(report)]
    read = [(f"Read the {html.escape(run.source)} log of run <code>{html.escape(report['run'])}</code> from "
             + ", ".join(f"<code>{html.escape(file)}</code>" for file in run.files) + ".")
            for run, report in zip(runs, reports, strict=True)]
    notes = [html.escape(f"{run.name}: {note}" if several else note) for run in runs for note in run.notes]
    sections = [Section("What the runs found" if several else "What the run found",
                        paragraphs=[*(html.escape(line) for line in found), *read, *notes]),
                Section("Key figures", tables=[("first and last value of each headline quantity", table)])]
    names = {stem: name for name in SECTIONS for stem in [name.lower().replace(" ", "-")]}
    overlaid = f"runs {', '.join(report['run'] for report in reports)} overlaid, " if several else ""
    sections += [Section(names[stem], figures=[(figure, f"{names[stem]} over training ({overlaid}"
                                                        f"{runs[0].source} log)")])
                 for stem, figure in drawn.items()]
    rows = draw_rows(runs)
    if rows:
        sections.append(Section("Draws", paragraphs=[
            "What the diagnostics drew, as the callbacks wrote it beside the log: at the first and the last run of "
            "each probe, its sequences (a coupled pair: the start row and a random filling of its sites, then where "
            "they met or both chains where the run ended), tokens that differ from the group's first marked."],
            tables=[("draws at the first and last run", rows)]))
    images = {(f"{run.name}: {tag}" if several else tag): data for run in runs for tag, data in run.images.items()}
    if images:  # the latest figures the runs logged themselves
        tags = "".join(f'<figure><img alt="{html.escape(tag)}" src="data:image/png;base64,'
                       f'{base64.b64encode(data).decode()}"><figcaption>{html.escape(tag)} (latest)</figcaption>'
                       "</figure>" for tag, data in sorted(images.items()))
        sections.append(Section("Latest logged figures", paragraphs=[tags]))
    made = generated_by()
    write_text(out_dir / "report.html", render_html(title, sections, {"source": runs[0].source,
                                                                      "run": ", ".join(r["run"] for r in reports)},
                                                    made))
    history = {"runs": reports} if several else reports[0]
    write_json(out_dir / "history.json", {"artifact": artifact("history"), **history, "environment": made})
    return reports


def draw_rows(runs: Sequence[LoggedRun]) -> list[dict[str, Any]]:
    """Table rows of the draws at the first and the last step each probe (``key``) wrote some, per run."""
    rows: list[dict[str, Any]] = []
    for run in runs:
        for key in sorted({record["key"] for record in run.draws}):
            records = [record for record in run.draws if record["key"] == key]
            for chosen in records[:1] + records[1:][-1:]:  # the first and the last (once if only one)
                for group in chosen["draws"]:
                    reference = next(iter(group.values()), "")
                    for label, sequence in group.items():
                        rows.append({**({"run": run.name} if len(runs) > 1 else {}), "probe": key,
                                     "step": chosen["step"], "sequence": label,
                                     "tokens (differences from the first marked)": marked_changes(sequence,
                                                                                                  reference)})
    return rows


__all__ = ["HEADLINE", "SECTIONS", "draw_rows", "findings", "history_figures", "history_report", "matching",
           "write_history_report"]
