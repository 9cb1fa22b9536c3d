"""The ``sweep`` job's outputs: ``report.json``, ``cells.csv``, ``figures/*.png``, ``report.html`` and a summary."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from ..experiments.config import to_dict
from ..experiments.sweep import SweepResult
from . import figures
from .html import Section, render_html, write_figures
from .writers import jsonable, write_csv, write_json, write_text


def sweep_report(result: SweepResult) -> dict[str, Any]:
    """JSON-ready report; ``sweep.cells``, ``sweep.fit``, ``sweep.phase_boundary``, ``sweep.dobrushin_tau_star``."""
    tv_steps = result.config.lag.t_values if result.config.lag.enabled else ()
    cells = []
    for cell in result.cells:
        cells.append({**cell.summary(tv_steps), "meeting_times": cell.meeting.times.tolist(),
                      "censored": cell.meeting.censored.tolist()})
    fits = [{"temperature": tau, **fit.summary()} for tau, fit in sorted(result.fits.items())]
    hitting = [{"temperature": tau, "threshold": threshold, **fit.summary()}
               for tau, by_threshold in sorted(result.hitting_fits.items())
               for threshold, fit in sorted(by_threshold.items())]
    boundary = [{"num_sites": b.num_sites, "temperature": b.temperature, "status": b.status}
                for b in result.boundary]
    sweep: dict[str, Any] = {"cells": cells, "fit": fits, "hitting_fit": hitting, "phase_boundary": boundary,
                             "dobrushin_tau_star": math.nan, "rows": result.rows, "notes": result.notes}
    if result.influence is not None:
        sweep["dobrushin_tau_star"] = result.influence.contraction_temperature()
        sweep["influence"] = {**result.influence.summary(), "sites": result.influence.sites.tolist()}
    return {"config": to_dict(result.config), "sweep": sweep, "timings": result.timings,
            "environment": result.environment}


CELL_COLUMNS = ("temperature", "num_sites", "num_pairs", "meeting_time_median", "meeting_time_q90",
                "meeting_time_mean", "censored_fraction", "budget", "meeting_time_over_n_log_n", "change_rate")


def sweep_figures(result: SweepResult) -> dict[str, Figure]:
    """The figures of the report, by file stem."""
    out = {"phase_diagram": figures.phase_diagram(result), "survival": figures.survival_curves(result),
           "scaling_constant": figures.scaling_constants(result)}
    if result.config.lag.enabled:
        out["tv_bounds"] = figures.tv_bounds(result)
    if result.config.drift.enabled:
        out["drift"] = figures.drift_curves(result, result.config.drift.every)
    return out


def write_sweep_report(result: SweepResult, out_dir: Path) -> dict[str, Any]:
    """Write every output into ``out_dir``; returns the JSON report."""
    report = sweep_report(result)
    rows = [{key: cell.get(key) for key in CELL_COLUMNS} | {k: v for k, v in cell.items()
                                                           if k.startswith(("hitting", "tv_bound"))}
            for cell in report["sweep"]["cells"]]
    write_csv(out_dir / "cells.csv", jsonable(rows), list(rows[0]))
    drawn = sweep_figures(result)
    write_figures(out_dir, drawn)
    write_text(out_dir / "report.html", render_html("mlm_dynamics sweep", _sections(result, report, drawn),
                                                    report["config"]))
    write_json(out_dir / "report.json", report)
    return report


def _sections(result: SweepResult, report: dict[str, Any], drawn: dict[str, Figure]) -> list[Section]:
    sweep = report["sweep"]
    overview = Section("Phase diagram", paragraphs=[
        "Each cell runs maximally coupled pairs of Glauber chains at temperature tau on n resampled sites until they "
        "meet or the step budget ends. Fast mixing shows as meeting times that grow like n log n (a flat colour along "
        "a column); metastability as meeting times beyond the budget (hatched).",
        *[f'<span class="note">{note}</span>' for note in result.notes]],
        figures=[(drawn["phase_diagram"], "median meeting time / (n log n); hatched: censored median"),
                 (drawn["survival"], "P(T_meet > t): bounds TV between the chains from the two starts")])
    boundary = [{"n": b["num_sites"], "tau_c": b["temperature"], "status": b["status"]}
                for b in sweep["phase_boundary"]]
    probed = len(sweep.get("influence", {}).get("sites", []))
    scaling = Section("C(tau): E T = C n log n", paragraphs=[
        f"Dobrushin contraction temperature tau* on the model (sums over {probed} sites): "
        f"{_number(sweep['dobrushin_tau_star'])}. Above tau* the path-coupling bound guarantees O(n log n)."],
        tables=[("fit per temperature (bootstrap 95% interval over pairs)", sweep["fit"]),
                ("phase boundary: where half the pairs are censored", boundary)],
        figures=[(drawn["scaling_constant"], "C(tau) with bootstrap intervals")])
    sections = [overview, scaling]
    if "drift" in drawn:
        sections.append(Section("Drift", tables=[("C of threshold hitting times", sweep["hitting_fit"])],
                                figures=[(drawn["drift"], "mean drift of the drift chains")]))
    if "tv_bounds" in drawn:
        sections.append(Section("L-lag bounds", figures=[(drawn["tv_bounds"], "upper bounds on TV(mu_0 P^t, pi)")]))
    cells = [{k: v for k, v in cell.items() if k not in ("meeting_times", "censored")} for cell in sweep["cells"]]
    sections.append(Section("Cells", tables=[("every cell", cells)]))
    sections.append(Section("Run", tables=[("timings", [report["timings"]]), ("forward rows", [sweep["rows"]]),
                                           ("environment", [report["environment"]])]))
    return sections


def _number(value: float) -> str:
    return f"{value:.3g}" if math.isfinite(value) else "not reached on the grid"


def sweep_summary(result: SweepResult) -> str:
    """The lines the CLI prints."""
    lines = [f"sweep: {len(result.cells)} cells, {result.timings['steps']:.0f} steps in "
             f"{result.timings['chain_seconds']:.1f} s; met pairs saved {result.rows['rows_saved_fraction']:.0%} of "
             "the forward rows"]
    for tau, fit in sorted(result.fits.items()):
        lines.append(f"  tau={tau:g}: C = {fit.C:.3g} [{fit.C_low:.3g}, {fit.C_high:.3g}], R^2 {fit.r2:.3f}, "
                     f"censored {fit.censored_fraction:.2f}")
    for point in result.boundary:
        where = f"{point.temperature:.3g}" if point.status == "interpolated" else point.status.replace("_", " ")
        lines.append(f"  n={point.num_sites}: tau_c = {where}")
    if result.influence is not None:
        lines.append(f"Dobrushin tau* = {_number(result.influence.contraction_temperature())}")
    return "\n".join(lines)
