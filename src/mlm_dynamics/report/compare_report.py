"""Several runs side by side: ``mlm-dynamics compare OUT_A OUT_B [...]``.

Reads the ``report.json`` each ``run`` or ``sweep`` job wrote (all of one job) and writes one page: where each run
comes from (model and weights hash, package version, date, command), the verdicts of the paper's claims in one table
(with the sample each rests on), the key numbers with their intervals and censoring, and the key figures with the
runs overlaid: the median meeting time against temperature for ``run`` reports, ``C(tau)`` and the end of the slow
region for sweeps. A censored median is drawn as an open triangle at its lower bound, never as a value. Runs are
named by their folders (made unique by their parents where two share a name).
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from .artifacts import artifact
from .figures import SERIES_MARKERS, legend_outside, new_figure, temperature_axis
from .html import Section, generated_by, marked_changes, quantile_text, render_html, write_figures
from .schema import read_report
from .writers import write_json, write_text


def load_reports(folders: Sequence[Path]) -> list[tuple[str, dict[str, Any]]]:
    """``(name, report.json)`` of each folder, in order, each read and checked against its schema
    (:func:`~mlm_dynamics.report.schema.read_report`); a ValueError in one line naming the folder that has no readable
    report, the file and key of a value that is missing or impossible, a folder (or a report, whatever its layout)
    given twice, and reports of different jobs or fewer than two."""
    if len(folders) < 2:
        raise ValueError(f"RUNS: compare needs at least two run folders, got {len(folders)}")
    named: list[tuple[Path, str, dict[str, Any]]] = []
    seen: dict[object, Path] = {}
    for folder in folders:
        path = Path(folder) / "report.json"
        if not path.is_file():
            raise ValueError(f"RUNS: {folder} has no report.json (point at a run or sweep --out folder)")
        try:
            job, report = read_report(path, ("run", "sweep"))
        except ValueError as error:
            raise ValueError(f"RUNS: {error}") from None
        content = json.dumps(report, sort_keys=True)  # the same report in another layout is the same run
        for key in (Path(folder).resolve(), content):
            if key in seen:
                raise ValueError(f"RUNS: {folder} is the same run as {seen[key]} (the same "
                                 f"{'folder' if isinstance(key, Path) else 'report'}); compare different runs")
            seen[key] = folder
        named.append((Path(folder), job, report))
    kinds = {job for _, job, _ in named}
    if len(kinds) > 1:
        raise ValueError(f"RUNS: the folders hold reports of different jobs ({', '.join(sorted(kinds))}); compare "
                         "runs with runs and sweeps with sweeps")
    return list(zip(run_names([folder for folder, _, _ in named]), [report for _, _, report in named], strict=True))


def run_names(folders: Sequence[Path]) -> list[str]:
    """Each folder's name, with as many parent folders as it takes to tell it from the others."""
    depth = 1
    while True:
        names = ["/".join(Path(folder).resolve().parts[-depth:]) for folder in folders]
        if len(set(names)) == len(names) or depth > 8:
            return names
        depth += 1


def provenance_rows(named: Sequence[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per run: where it comes from."""
    rows = []
    for name, report in named:
        environment = report.get("environment", {})
        rows.append({"run": name, **{column: environment.get(key) or "—" for column, key in (
            ("model", "model"), ("weights", "weights_sha256"), ("mlm_dynamics", "mlm_dynamics"), ("date", "date"),
            ("command", "command"))}})
    return rows


def claim_rows(named: Sequence[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per claim, a column per run: its verdict, the sample it rests on and its plug-in power."""
    rows: dict[str, dict[str, Any]] = {}
    for name, report in named:
        claims = (report.get("claims") or report.get("sweep", {}).get("claims") or {}).get("claims", [])
        for claim in claims:
            row = rows.setdefault(claim["name"], {"claim": claim["statement"]})
            power = claim.get("power")
            row[name] = (f"{claim['verdict']} ({claim.get('sample', '')}"
                         + ("" if power is None or (isinstance(power, float) and math.isnan(power))
                            else f"; power {power:.2f}") + ")")
    return list(rows.values())


def meeting_rows(named: Sequence[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """``run`` reports: per temperature, each run's median meeting time (censoring-aware, with its interval and
    coverage) and the fraction of pairs censored."""
    rows: dict[float, dict[str, Any]] = {}
    for name, report in named:
        for entry in report["mixing"].get("by_temperature", []):
            row = rows.setdefault(float(entry["temperature"]), {"tau": float(entry["temperature"])})
            row[f"{name}: median meeting time"] = quantile_text(entry, "meeting_time_median")
            row[f"{name}: censored"] = f"{entry['censored_fraction']:.2f} of {int(entry['num_pairs'])}"
    return [rows[tau] for tau in sorted(rows)]


def scaling_rows(named: Sequence[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Sweeps: per temperature, each run's ``C(tau)`` with its interval, or why there is none (censored pairs)."""
    rows: dict[float, dict[str, Any]] = {}
    for name, report in named:
        for fit in report["sweep"].get("fit", []):
            row = rows.setdefault(float(fit["temperature"]), {"tau": float(fit["temperature"])})
            row[f"{name}: C(tau)"] = (f"{fit['C']:.3g} [{fit['C_low']:.3g}, {fit['C_high']:.3g}]"
                                      if fit.get("C") is not None else "no fit: " + str(fit.get("note", "")))
    return [rows[tau] for tau in sorted(rows)]


def draw_rows(named: Sequence[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """One draw per run at its lowest and its highest temperature, as text, changes from the start marked: a run's
    first chain of that temperature at its start and at the end; a sweep's first pair (natural start against a random
    filling where there is one) at its largest length, at step 0 and where it met or both chains at the budget."""
    column = "sequence (differences from the start marked)"
    rows: list[dict[str, Any]] = []
    for name, report in named:
        if "sweep" in report:
            largest = max(cell["num_sites"] for cell in report["sweep"]["cells"])
            cells = sorted((c for c in report["sweep"]["cells"] if c["num_sites"] == largest and c.get("draws")),
                           key=lambda c: c["temperature"])
            for cell in cells[:1] + cells[1:][-1:]:
                draw = cell["draws"][0]
                budget = f"> {cell['budget']:g}"
                ends = ([("x = y (met)", draw["met_at"], draw["x_end"])] if draw["met_at"] >= 0 else
                        [("x (never met)", budget, draw["x_end"]), ("y (never met)", budget, draw["y_end"])])
                for chain, step, text in [("x", 0, draw["x_start"]), ("y", 0, draw["y_start"]), *ends]:
                    rows.append({"run": name, "tau": f"{cell['temperature']:g}", "chain": chain, "step": step,
                                 column: marked_changes(text, draw["x_start"])})
            continue
        chains, ladder = report["chains"], report["config"]["temperatures"]
        if not chains.get("start_sequences") or not chains.get("final_sequences"):
            continue  # a trimmed report keeps no sequences (the one the docs ship)
        block = chains["num_chains"] // len(ladder)
        for tau in sorted({min(ladder), max(ladder)}):
            chain = ladder.index(tau) * block
            start = chains["start_sequences"][chain]
            for step, text in ((0, start), (chains["num_steps"], chains["final_sequences"][chain])):
                rows.append({"run": name, "tau": f"{tau:g}", "chain": chain, "step": step,
                             column: marked_changes(text, start)})
    return rows


def meeting_entries(report: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """The per-temperature meeting-time summaries of a report and what they are of: a run's ladder, or a sweep's
    cells at its largest length."""
    if "mixing" in report:
        return report["mixing"].get("by_temperature", []), "the run's pairs"
    cells = report["sweep"].get("cells", [])
    largest = max((cell["num_sites"] for cell in cells), default=0)
    return [cell for cell in cells if cell["num_sites"] == largest], f"n = {largest:g}"


def meeting_figure(named: Sequence[tuple[str, dict[str, Any]]]) -> Figure:
    """Median meeting time against temperature, a series per run: filled markers with their order-statistic
    intervals where the median is known, open triangles at the lower bound where it is censored."""
    figure = new_figure()
    axes = figure.add_subplot()
    for k, (name, report) in enumerate(named):
        color, marker = f"C{k % 10}", SERIES_MARKERS[k % len(SERIES_MARKERS)]
        known, censored = [], []
        entries, of = meeting_entries(report)
        name = f"{name} ({of})" if "sweep" in report else name
        for entry in entries:
            median = entry.get("meeting_time_median")
            if median is not None:
                low, high = entry.get("meeting_time_median_low"), entry.get("meeting_time_median_high")
                known.append((entry["temperature"], median, low if low is not None else median,
                              high if high is not None else median))
            elif entry.get("meeting_time_median_lower_bound") is not None:
                censored.append((entry["temperature"], entry["meeting_time_median_lower_bound"]))
        offset = 1 + 0.03 * (k - (len(named) - 1) / 2)  # a small multiplicative nudge: equal values stay visible
        if known:
            taus, medians, lows, highs = zip(*known, strict=True)
            axes.errorbar([t * offset for t in taus], medians,
                          yerr=[[m - lo for m, lo in zip(medians, lows, strict=True)],
                                [hi - m for m, hi in zip(medians, highs, strict=True)]],
                          fmt=marker, color=color, capsize=3, label=f"{name}: median [interval]")
        if censored:
            taus, bounds = zip(*censored, strict=True)
            axes.plot([t * offset for t in taus], bounds, ls="none", marker="^", ms=8, fillstyle="none",
                      color=color, label=f"{name}: censored, > this")
    temperature_axis(axes.xaxis, [entry["temperature"] for _, report in named for entry in meeting_entries(report)[0]])
    axes.set_yscale("log")
    axes.set_xlabel("temperature tau")
    axes.set_ylabel("median meeting time (steps)")
    axes.set_title("Coupled pairs: median meeting time by run")
    legend_outside(axes)
    return figure


def scaling_figure(named: Sequence[tuple[str, dict[str, Any]]]) -> Figure:
    """Sweeps: ``C(tau)`` with its interval per run, and the end of the slow region per length (a bar from the last
    slow to the first fast temperature), a series per run."""
    figure = new_figure(9.6, 3.8)
    left, right = figure.add_subplot(1, 2, 1), figure.add_subplot(1, 2, 2)
    for k, (name, report) in enumerate(named):
        color, marker = f"C{k % 10}", SERIES_MARKERS[k % len(SERIES_MARKERS)]
        fits = [fit for fit in report["sweep"].get("fit", []) if fit.get("C") is not None]
        if fits:
            left.errorbar([fit["temperature"] for fit in fits], [fit["C"] for fit in fits],
                          yerr=[[fit["C"] - fit["C_low"] for fit in fits], [fit["C_high"] - fit["C"] for fit in fits]],
                          fmt=marker, color=color, capsize=3, label=name)
        for j, bracket in enumerate(report["sweep"].get("slow_region", [])):
            height = bracket["num_sites"] * (1 + 0.15 * (k - (len(named) - 1) / 2))  # runs apart at equal n
            # the last slow and the first fast temperature, where the sweep found them (0 or null: not in the grid)
            ends = [t for t in (bracket["slow_up_to"], bracket["fast_from"]) if t is not None and t > 0]
            if ends:
                right.plot(ends, [height] * len(ends), color=color, marker="|", ms=10, lw=2,
                           label=name if j == 0 else None)
    temperature_axis(left.xaxis, [fit["temperature"] for _, report in named for fit in report["sweep"].get("fit", [])
                                  if fit.get("C") is not None])
    left.set_xlabel("temperature tau")
    left.set_ylabel("C(tau)")
    left.set_title("T = n (C(tau) log n + B), where every pair met", fontsize=10)
    right.set_xlabel("temperature tau (slow up to | fast from)")
    right.set_ylabel("resampled sites n")
    right.set_title("End of the slow region")
    if right.get_lines():
        brackets = [b for _, report in named for b in report["sweep"].get("slow_region", [])]
        temperature_axis(right.xaxis, [t for b in brackets for t in (b["slow_up_to"], b["fast_from"])
                                       if t is not None])
        temperature_axis(right.yaxis, [b["num_sites"] for b in brackets])
        legend_outside(right)
    else:
        right.text(0.5, 0.5, "no run bracketed a slow region", ha="center", va="center", transform=right.transAxes)
    if left.containers:
        legend_outside(left, below=True)
    return figure


def write_compare_report(folders: Sequence[Path], out_dir: Path) -> dict[str, Any]:
    """Write ``compare.json``, ``figures/*.png`` and ``report.html`` into ``out_dir``; return what compare.json
    holds."""
    named = load_reports(folders)
    kind = "sweep" if "sweep" in named[0][1] else "run"
    claims = claim_rows(named)
    numbers = meeting_rows(named) if kind == "run" else scaling_rows(named)
    drawn = {"meeting": meeting_figure(named)}
    if kind == "sweep":
        drawn["scaling"] = scaling_figure(named)
    made = generated_by()
    compared = {"artifact": artifact("compare"), "job": kind, "runs": [name for name, _ in named],
                "folders": [str(f) for f in folders], "provenance": provenance_rows(named), "claims": claims,
                "numbers": numbers, "environment": made}
    title = {"run": "Meeting times by temperature", "sweep": "Meeting times, C(tau) and the slow region"}[kind]
    sections = [
        Section("What the runs found: the paper's claims, side by side", tables=[("claims", claims)]),
        Section("Where each run comes from", tables=[("runs", provenance_rows(named))]),
        Section(title, tables=[("key numbers (censored: > lower bound)", numbers)],
                figures=[(figure, f"{html.escape(title)}, runs overlaid") for figure in drawn.values()]),
        Section("Draws", tables=[("each run at its lowest and highest temperature", draw_rows(named))]),
    ]
    write_figures(out_dir, drawn)
    write_text(out_dir / "report.html", render_html(f"mlm_dynamics: {len(named)} {kind}s side by side", sections,
                                                    {"runs": compared["runs"], "folders": compared["folders"]},
                                                    made))
    write_json(out_dir / "compare.json", compared)
    return compared


def compare_summary(compared: dict[str, Any]) -> str:
    """Printed by the command: the runs and each claim's verdicts."""
    lines = [f"compared {len(compared['runs'])} {compared['job']}s: {', '.join(compared['runs'])}"]
    for row in compared["claims"]:
        verdicts = ", ".join(f"{name}: {str(row.get(name, '—')).split(' (')[0]}" for name in compared["runs"])
        lines.append(f"  {row['claim']}: {verdicts}")
    return "\n".join(lines)


__all__ = ["claim_rows", "compare_summary", "draw_rows", "load_reports", "meeting_entries",
           "meeting_rows", "provenance_rows", "scaling_rows", "write_compare_report"]
