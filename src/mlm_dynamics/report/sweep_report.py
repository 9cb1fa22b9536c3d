"""The ``sweep`` job's outputs: ``report.json``, ``cells.csv``, ``figures/*.png``, ``report.html`` and a summary."""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from ..experiments.config import to_dict
from ..experiments.sweep import SweepResult
from ..sampling.grid import START_KINDS
from . import sweep_figures
from .html import Section, claims_section, render_html, write_figures
from .writers import jsonable, write_csv, write_json, write_text


def sweep_report(result: SweepResult) -> dict[str, Any]:
    """JSON-ready report: ``sweep.claims``, ``sweep.cells`` (every summary, plus each pair's ``meeting_times``,
    ``censored`` flag and ``start_kinds``, and the resampled ``sites``), ``sweep.fit``, ``sweep.phase_boundary``,
    ``sweep.rectangles``, ``sweep.influence``."""
    tv_steps = result.config.lag.t_values if result.config.lag.enabled else ()
    cells = []
    for cell in result.cells:
        cells.append({**cell.summary(tv_steps), "sites": list(cell.sites), "meeting_times": cell.meeting.times.tolist(),
                      "censored": cell.meeting.censored.tolist(),
                      "start_kinds": [START_KINDS[k] for k in cell.kinds.tolist()]})
    analysis = result.analysis
    fits = [{"temperature": tau, **fit.summary(), "lengths": fit.lengths} for tau, fit in sorted(analysis.fits.items())]
    hitting = [{"temperature": tau, "threshold": threshold, **fit.summary()}
               for tau, by_threshold in sorted(analysis.hitting_fits.items())
               for threshold, fit in sorted(by_threshold.items())]
    boundary = [{"num_sites": b.num_sites, "temperature": b.temperature, "status": b.status, "low": b.low,
                 "high": b.high} for b in analysis.boundary]
    sweep: dict[str, Any] = {"claims": result.claims.to_dict(), "cells": cells, "fit": fits, "hitting_fit": hitting,
                             "phase_boundary": boundary, "rows": result.rows, "notes": result.notes}
    if result.rectangles is not None:
        sweep["rectangles"] = result.rectangles.summary()
    if result.influence is not None:
        sweep["influence"] = {**result.influence.summary(), "sites": result.influence.sites.tolist()}
    return {"config": to_dict(result.config), "sweep": sweep, "timings": result.timings,
            "environment": result.environment}


CELL_COLUMNS = ("temperature", "num_sites", "num_pairs", "censored_fraction", "budget", "meeting_time_km_median",
                "meeting_time_km_median_censored", "meeting_time_restricted_mean", "meeting_time_restricted_mean_low",
                "meeting_time_restricted_mean_high", "restricted_mean_over_n_log_n", "meeting_time_median",
                "meeting_time_q90", "meeting_time_mean", "change_rate")


def sweep_figures_of(result: SweepResult) -> dict[str, Figure]:
    """The figures of the report, by file stem."""
    out = {"phase_diagram": sweep_figures.phase_diagram(result), "survival": sweep_figures.survival_curves(result),
           "scaling_constant": sweep_figures.scaling_constants(result)}
    if result.config.lag.enabled:
        out["tv_bounds"] = sweep_figures.tv_bounds(result)
    if result.config.drift.enabled:
        out["drift"] = sweep_figures.drift_curves(result, result.config.drift.every)
    return out


def write_sweep_report(result: SweepResult, out_dir: Path) -> dict[str, Any]:
    """Write every output into ``out_dir``; returns the JSON report."""
    report = sweep_report(result)
    rows = [{key: cell.get(key) for key in CELL_COLUMNS}
            | {k: v for k, v in cell.items() if k.startswith((*START_KINDS, "hitting", "tv_bound"))}
            for cell in report["sweep"]["cells"]]
    write_csv(out_dir / "cells.csv", jsonable(rows), list(dict.fromkeys(key for row in rows for key in row)))
    drawn = sweep_figures_of(result)
    write_figures(out_dir, drawn)
    write_text(out_dir / "report.html", render_html("mlm_dynamics sweep", _sections(result, report, drawn),
                                                    report["config"]))
    write_json(out_dir / "report.json", report)
    return report


def _sections(result: SweepResult, report: dict[str, Any], drawn: dict[str, Figure]) -> list[Section]:
    sweep = report["sweep"]
    overview = Section("Phase diagram", paragraphs=[
        "Each cell runs maximally coupled pairs of Glauber chains at temperature tau on n resampled sites until they "
        "meet or the step budget ends. The colour is the restricted mean meeting time E min(T, budget) over n log n: "
        "flat along a column where meeting times grow like n log n, rising where the chains slow down; hatched cells "
        "have half or more of their pairs censored (the value is then a lower bound).",
        *[f'<span class="note">{html.escape(note)}</span>' for note in result.notes]],
        figures=[(drawn["phase_diagram"], "restricted mean meeting time / (n log n); hatched: half or more censored"),
                 (drawn["survival"], "Kaplan-Meier P(T_meet > t) (solid: natural-random, dashed: random-random)")])
    boundary = [{"n": b["num_sites"], "tau_c": b["temperature"], "status": b["status"], "low": b["low"],
                 "high": b["high"]} for b in sweep["phase_boundary"]]
    fits = [{k: v for k, v in fit.items() if k != "lengths"} | {"lengths": str(fit["lengths"])} for fit in sweep["fit"]]
    scaling = Section("Scaling: E T = C(tau) n log n", paragraphs=[
        "Fitted per temperature on the lengths whose pairs all met (a censored mean is only a lower bound); the "
        "slope of log T against log(n log n) is about 1 where meeting times grow like n log n."],
        tables=[("fit per temperature (bootstrap 95% intervals over pairs)", fits),
                ("phase boundary: where half the pairs are censored (0: below the grid, inf: above it)", boundary)],
        figures=[(drawn["scaling_constant"], "C(tau) and the log-log slope with bootstrap intervals")])
    sections = [claims_section(result.claims), overview, scaling]
    if "drift" in drawn:
        sections.append(Section("Drift", tables=[("C of threshold hitting times", sweep["hitting_fit"])],
                                figures=[(drawn["drift"], "mean drift of the drift chains")]))
    if "tv_bounds" in drawn:
        sections.append(Section("L-lag bounds", figures=[(drawn["tv_bounds"], "upper bounds on TV(mu_0 P^t, pi)")]))
    cells = [{"temperature": c["temperature"], "n": c["num_sites"], "sites": _span(c["sites"]),
              **{k: c.get(k) for k in CELL_COLUMNS[2:]}} for c in sweep["cells"]]
    sections.append(Section("Cells", tables=[("every cell (sites: the resampled positions)", cells)]))
    sections.append(Section("Run", tables=[("timings", [report["timings"]]), ("forward rows", [sweep["rows"]]),
                                           ("environment", [report["environment"]])]))
    return sections


def _span(sites: list[int]) -> str:
    """``a-b`` for consecutive positions, else the list."""
    if sites == list(range(sites[0], sites[0] + len(sites))):
        return f"{sites[0]}-{sites[-1]}"
    return ", ".join(map(str, sites))


def _temperature(value: float, status: str) -> str:
    return f"{value:.3g}" if status == "interpolated" and math.isfinite(value) else status.replace("_", " ")


def sweep_summary(result: SweepResult) -> str:
    """The lines the CLI prints."""
    lines = [f"sweep: {len(result.cells)} cells, {result.timings['steps']:.0f} steps in "
             f"{result.timings['chain_seconds']:.1f} s; met pairs saved {result.rows['rows_saved_fraction']:.0%} of "
             "the forward rows"]
    for tau, fit in sorted(result.analysis.fits.items()):
        if fit.lengths:
            lines.append(f"  tau={tau:g}: C = {fit.C:.3g} [{fit.C_low:.3g}, {fit.C_high:.3g}] on n = {fit.lengths}, "
                         f"log-log slope {fit.slope:.2f}, censored {fit.censored_fraction:.2f}")
        else:
            lines.append(f"  tau={tau:g}: no length with every pair met (censored {fit.censored_fraction:.2f})")
    for point in result.analysis.boundary:
        lines.append(f"  n={point.num_sites}: tau_c = {_temperature(point.temperature, point.status)} "
                     f"[{point.low:.3g}, {point.high:.3g}]")
    for claim in result.claims.claims:
        lines.append(f"claim {claim.name}: {claim.verdict}")
    lines += [f"note: {text}" for text in result.claims.contradictions]
    return "\n".join(lines)


__all__ = ["CELL_COLUMNS", "sweep_figures_of", "sweep_report", "sweep_summary", "write_sweep_report"]
