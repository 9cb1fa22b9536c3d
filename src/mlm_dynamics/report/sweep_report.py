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
from .html import Section, claims_section, marked_changes, quantile_text, render_html, write_figures
from .writers import jsonable, write_billed, write_csv, write_text


def sweep_report(result: SweepResult) -> dict[str, Any]:
    """JSON-ready report: ``sweep.claims``, ``sweep.cells`` (every summary, plus each pair's ``meeting_times``,
    ``censored`` flag and ``start_kinds``, the resampled ``sites``, the pairs' mean distance every ``trace_every``
    steps in ``coupling_trace_mean``, and ``draws``: a pair of each start kind as text), ``sweep.fit``,
    ``sweep.slow_region``, ``sweep.rectangles``, ``sweep.influence``. A censored quantile is ``null`` beside its
    ``..._lower_bound``. Each cell's ``verdict`` (``slow``, ``fast``, ``undecided``) and ``verdict_text`` state both
    sides of ``t_mix(1/4)`` (``mixing_time_exceeds`` from the witness, ``forgotten_by`` from the coupling)."""
    tv_steps = result.config.lag.t_values if result.config.lag.enabled else ()
    cells = []
    for cell in result.cells:
        cells.append({**cell.summary(tv_steps), "sites": list(cell.sites), "meeting_times": cell.meeting.times.tolist(),
                      "censored": cell.meeting.censored.tolist(),
                      "start_kinds": [START_KINDS[k] for k in cell.kinds.tolist()],
                      "trace_every": cell.trace_every,
                      "coupling_trace_mean": (None if cell.coupling_trace is None
                                              else cell.coupling_trace.double().mean(1).tolist()),
                      "draws": cell.draws,
                      **({} if cell.bracket is None else {"verdict": cell.bracket.verdict,
                                                          "verdict_text": cell.bracket.text()})})
    analysis = result.analysis
    fits = [{"temperature": tau, **fit.summary(), "lengths": fit.lengths, "note": fit.note}
            for tau, fit in sorted(analysis.fits.items())]
    hitting = [{"temperature": tau, "threshold": threshold, **fit.summary()}
               for tau, by_threshold in sorted(analysis.hitting_fits.items())
               for threshold, fit in sorted(by_threshold.items())]
    slow = [{"num_sites": b.num_sites, "slow_up_to": b.slow_up_to, "fast_from": b.fast_from,
             "confidence": b.confidence} for b in analysis.brackets]
    sweep: dict[str, Any] = {"claims": result.claims.to_dict(), "cells": cells, "fit": fits, "hitting_fit": hitting,
                             "slow_region": slow, "rows": result.rows, "notes": result.notes}
    if result.rectangles is not None:
        sweep["rectangles"] = result.rectangles.summary()
    if result.influence is not None:
        sweep["influence"] = {**result.influence.summary(), "sites": result.influence.sites.tolist()}
    return {"config": to_dict(result.config), "sweep": sweep, "timings": result.timings,
            "environment": result.environment}


CELL_COLUMNS = ("temperature", "num_sites", "num_pairs", "censored_fraction", "budget", "meeting_time_median",
                "meeting_time_median_lower_bound", "meeting_time_median_low", "meeting_time_median_high",
                "meeting_time_median_confidence", "meeting_time_q90", "meeting_time_q90_lower_bound",
                "meeting_time_q90_low", "meeting_time_q90_high", "meeting_time_q90_confidence",
                "meeting_time_restricted_mean", "meeting_time_restricted_mean_low", "meeting_time_restricted_mean_high",
                "meeting_time_median_over_n_log_n", "meeting_time_restricted_mean_over_n_log_n", "change_rate")


def sweep_figures_of(result: SweepResult) -> dict[str, Figure]:
    """The figures of the report, by file stem."""
    out = {"phase_diagram": sweep_figures.phase_diagram(result), "survival": sweep_figures.survival_curves(result),
           "scaling_constant": sweep_figures.scaling_constants(result)}
    if result.config.lag.enabled:
        out["tv_bounds"] = sweep_figures.tv_bounds(result)
    if result.config.drift.enabled:
        out["drift"] = sweep_figures.drift_curves(result, result.config.drift.every)
    if all(cell.coupling_trace is not None for cell in result.cells):
        out["coupling_traces"] = sweep_figures.coupling_traces(result)
    return out


def write_sweep_report(result: SweepResult, out_dir: Path) -> dict[str, Any]:
    """Write every output into ``out_dir``; returns the JSON report, whose ``cost``
    (:meth:`~mlm_dynamics.models.cost.CostLedger.record`) includes writing them."""
    return write_billed(out_dir, "sweep", result.cost, lambda: _write_pages(result, out_dir))


def _write_pages(result: SweepResult, out_dir: Path) -> dict[str, Any]:
    report = sweep_report(result)
    rows = [{key: cell.get(key) for key in CELL_COLUMNS}
            | {k: v for k, v in cell.items() if k.startswith((*START_KINDS, "hitting", "tv_bound"))}
            for cell in report["sweep"]["cells"]]
    write_csv(out_dir / "cells.csv", jsonable(rows), list(dict.fromkeys(key for row in rows for key in row)))
    drawn = sweep_figures_of(result)
    write_figures(out_dir, drawn)
    write_text(out_dir / "report.html", render_html("mlm_dynamics sweep", _sections(result, report, drawn),
                                                    report["config"], result.environment,
                                                    None if result.cost is None else result.cost.record()))
    return report


def _sections(result: SweepResult, report: dict[str, Any], drawn: dict[str, Figure]) -> list[Section]:
    sweep = report["sweep"]
    confidence = f"{result.config.confidence:.0%}"
    overview = Section("Phase diagram", paragraphs=[
        "Each cell runs maximally coupled pairs of Glauber chains at temperature tau on n resampled sites until they "
        "meet or the step budget ends, and both sides of t_mix(1/4) are decided on its pairs from the natural start "
        "against random fillings. Each cell is coloured by its verdict and its bracket is written in it: slow "
        "('> t': a witness certifies t_mix(1/4) > t at 95 %), fast ('<= t': the pairs met, so the two starts' laws "
        "are within 1/4 by step t at 95 %; other starts may be slower), undecided (hatched: '?', or the smaller "
        "distance its witness does certify; the Cells table says what it would need). The median meeting time is "
        "written beneath where it is known; a censored one is not a value and colours nothing: a censored meeting "
        "time is no evidence of slow mixing. The thick edge marks where a row's slow cells end.",
        *[f'<span class="note">{html.escape(note)}</span>' for note in result.notes]],
        figures=[(drawn["phase_diagram"], "each cell's verdict and its bracket on t_mix(1/4) (each side at 95 %); "
                  "median meeting time beneath where known; hatched: undecided"),
                 (drawn["survival"], "Kaplan-Meier P(T_meet > t) (solid: natural-random, dashed: random-random)")])
    slow = [{"n": b["num_sites"], "slow up to tau": b["slow_up_to"], "fast from tau": b["fast_from"]}
            for b in sweep["slow_region"]]
    fits = [{"tau": fit["temperature"], "C(tau) on these lengths": _interval(fit["C"], fit["C_low"], fit["C_high"]),
             "B": fit["B"],
             "C_inf (finite-size term D/n)": _interval(fit["C_inf"], fit["C_inf_low"], fit["C_inf_high"]),
             "slope": _interval(fit["slope"], fit["slope_low"], fit["slope_high"]), "pairs": fit["num_pairs"],
             "lengths": str(fit["lengths"]), "note": fit["note"]} for fit in sweep["fit"]]
    scaling = Section("Scaling: T = n (C(tau) log n + B)", paragraphs=[
        "Fitted per temperature by least squares over every pair of every length, where every pair met (a censored "
        "time is only a lower bound, and leaving out lengths would select fast samples); C(tau) is the n log n "
        "constant, B the O(n) term. The slope of log T against log(n log n) is about 1 where meeting times grow like "
        f"n log n. Intervals: Student-t over the pairs at {confidence}."],
        tables=[("fit per temperature", fits),
                ("slow region per length (0: none confidently slow; inf: none above confidently fast)", slow)],
        figures=[(drawn["scaling_constant"], f"C(tau) and the log-log slope with {confidence} intervals")])
    sections = [claims_section(result.claims), overview, _draws_section(result, drawn), scaling]
    if "drift" in drawn:
        sections.append(Section("Drift", tables=[("C of threshold hitting times", sweep["hitting_fit"])],
                                figures=[(drawn["drift"], "mean drift of the drift chains")]))
    if "tv_bounds" in drawn:
        sections.append(Section("L-lag bounds", figures=[(drawn["tv_bounds"], "estimated bounds on TV(mu_0 P^t, pi), "
                                                          "dashed their 95 % upper confidence limits (meeting times up "
                                                          "to the budget); 1 where a pair never met")]))
    cells = [{"temperature": c["temperature"], "n": c["num_sites"], "sites": _span(c["sites"]),
              "pairs": c["num_pairs"], "censored": f"{c['censored_fraction']:.0%}", "budget": c["budget"],
              "median meeting time [interval] (coverage)": quantile_text(c, "meeting_time_median"),
              "q90": quantile_text(c, "meeting_time_q90"),
              "restricted mean": _interval(c["meeting_time_restricted_mean"], c["meeting_time_restricted_mean_low"],
                                           c["meeting_time_restricted_mean_high"]),
              "change rate": c["change_rate"], "t_mix(1/4) (95 %)": c.get("verdict_text", "—")}
             for c in sweep["cells"]]
    sections.append(Section("Cells", tables=[(f"every cell: Kaplan-Meier quantiles ('est. > b': the estimate lies "
                                              f"beyond the budget) with order-statistic intervals and the coverage "
                                              f"they achieve; restricted mean E min(T, budget) with its >= "
                                              f"{confidence} interval",
                                              cells)]))
    sections.append(Section("Run", tables=[("timings", [report["timings"]]), ("forward rows", [sweep["rows"]]),
                                           ("environment", [report["environment"]])]))
    return sections


def _draws_section(result: SweepResult, drawn: dict[str, Figure]) -> Section:
    """The pairs themselves at the largest length: their distance over steps, and a pair of each start kind per
    temperature as text (start, and the meeting or the budget), differences from x at step 0 marked."""
    n = max(c.num_sites for c in result.cells)
    column = "sequence (differences from x at step 0 marked)"
    rows: list[dict[str, Any]] = []
    for cell in sorted((c for c in result.cells if c.num_sites == n), key=lambda c: c.temperature):
        for draw in cell.draws:
            reference, met_at = draw["x_start"], int(draw["met_at"])
            ends = ([("x = y (met)", met_at, draw["x_end"])] if met_at >= 0 else
                    [("x (never met)", f"> {cell.meeting.max_steps}", draw["x_end"]),
                     ("y (never met)", f"> {cell.meeting.max_steps}", draw["y_end"])])
            for chain, step, sequence in [("x", 0, draw["x_start"]), ("y", 0, draw["y_start"]), *ends]:
                rows.append({"tau": f"{cell.temperature:g}", "start": draw["kind"], "chain": chain, "step": step,
                             column: marked_changes(sequence, reference)})
    figures = [(drawn["coupling_traces"], f"each pair's distance (sites where its chains differ) at n = {n}; thick: "
                "the mean; a line that ends above 0 is a pair that never met")] if "coupling_traces" in drawn else []
    return Section("Draws", paragraphs=[
        f"The coupled pairs themselves at n = {n}: a pair meets when its two chains agree on every site, and stays "
        "together from then on. Below, the first pair of each start kind at each temperature, at step 0 and where it "
        "met (or both chains at the budget, where it never did)."], tables=[("pairs as text", rows)], figures=figures)


def _interval(value: float | None, low: float | None, high: float | None) -> str:
    if value is None or math.isnan(value):
        return "—"
    return f"{value:.3g} [{low:.3g}, {high:.3g}]" if low is not None and high is not None else f"{value:.3g}"


def _span(sites: list[int]) -> str:
    """``a-b`` for consecutive positions, else the list."""
    if sites == list(range(sites[0], sites[0] + len(sites))):
        return f"{sites[0]}-{sites[-1]}"
    return ", ".join(map(str, sites))


def sweep_summary(result: SweepResult) -> str:
    """The lines the CLI prints."""
    saved = (f"; met pairs saved {result.rows['rows_saved_fraction']:.0%} of the forward rows"
             if result.timings["steps"] > 0 else "")
    grid = result.config.grid
    if grid.looks:  # rounds start later: the loop runs past one pair's budget
        spent = int(result.rows["pair_rows_spent"])
        budget = "" if grid.max_rows is None else f" of {grid.max_rows}"
        lines = [f"sweep: {len(result.cells)} cells, sequential design ({grid.pairs} pairs a cell first, up to "
                 f"{grid.looks[-1]}), {spent}{budget} pair rows, {result.timings['steps']:.0f} steps of the loop, each "
                 f"pair followed at most {grid.max_steps}, in {result.timings['chain_seconds']:.1f} s"]
    else:
        lines = [f"sweep: {len(result.cells)} cells, {result.timings['steps']:.0f} of {grid.max_steps} "
                 f"steps in {result.timings['chain_seconds']:.1f} s{saved}"]
    if result.stopped is not None:
        lines.append(f"stopped early ({result.stopped}): open pairs are censored at the step reached; what is below "
                     "is what was measured")
    for tau, fit in sorted(result.analysis.fits.items()):
        if fit.note:
            lines.append(f"  tau={tau:g}: no fit ({fit.note})")
        else:
            extrapolated = ("no C_inf (it needs four lengths)" if math.isnan(fit.C_inf) else
                            f"C_inf = {fit.C_inf:.3g} [{fit.C_inf_low:.3g}, {fit.C_inf_high:.3g}] (+ D / n)")
            lines.append(f"  tau={tau:g}: C = {fit.C:.3g} [{fit.C_low:.3g}, {fit.C_high:.3g}] (T = n (C log n + B) on "
                         f"these lengths, B = {fit.B:.3g}), {extrapolated}, log-log slope {fit.slope:.2f} "
                         f"[{fit.slope_low:.2f}, {fit.slope_high:.2f}] over {fit.num_pairs} pairs")
    states = [c.bracket.verdict for c in result.cells if c.bracket is not None]
    lines.append(f"  cells: {states.count('slow')} certified slow, {states.count('fast')} certified fast, "
                 f"{states.count('undecided')} undecided (t_mix(1/4), each side at 95 %)")
    lines += [f"  {bracket.describe()}" for bracket in result.analysis.brackets]
    for claim in result.claims.claims:
        power = "" if math.isnan(claim.power) else f" (plug-in power {claim.power:.2f})"
        lines.append(f"claim {claim.name}: {claim.verdict}{power}")
    lines += [f"note: {text}" for text in result.claims.contradictions]
    return "\n".join(lines)


__all__ = ["CELL_COLUMNS", "sweep_figures_of", "sweep_report", "sweep_summary", "write_sweep_report"]
