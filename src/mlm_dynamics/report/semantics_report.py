"""The ``semantics`` job's outputs: ``report.json``, ``figures/*.png``, ``report.html`` and the printed summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from ..experiments.config import to_dict
from ..experiments.semantics import CaseStudyResult
from . import figures
from .html import Section, render_html, write_figures
from .writers import write_billed, write_text


def semantics_report(result: CaseStudyResult) -> dict[str, Any]:
    """JSON-ready report: per temperature drift, traps, basins and topic attraction with base rates and intervals."""
    return {"config": to_dict(result.config),
            "semantics": {"scale": result.scale, "topic_thresholds": result.thresholds, "base_rates": result.base_rates,
                          "by_temperature": result.by_temperature(), "basins": result.basin_exemplars(),
                          "recurrent_basins": result.recurrent_basins,
                          "final_states": [{"chain": c, "temperature": t, "text": result.texts[-1][c]}
                                           for c, t in enumerate(result.temperatures)]},
            "timings": result.seconds}


def semantics_figures(result: CaseStudyResult) -> dict[str, Figure]:
    """The case study's figures by name: landscape, drift and topic fractions over time, dwell times."""
    now = result.steps[-1]
    dwell = {tau: [float(e.dwell(now)) for e in result.events if result.temperatures[e.chain] == tau]
             for tau in sorted(set(result.temperatures))}
    return {"landscape": figures.landscape_by_temperature(result.embeddings, result.basins, result.temperatures),
            "topics": figures.topic_fractions_over_time(result.steps, result.near, result.temperatures, result.topics,
                                                        result.base_rates),
            "dwell": figures.dwell_distribution(dwell)}


CAPTIONS = {"landscape": "PCA of the sentence embeddings of every chain state; coloured points: states in a trap",
            "topics": "running fraction of observations near each topic, per temperature; dashed: corpus base rate",
            "dwell": "trap dwell times per temperature"}


def write_semantics_report(result: CaseStudyResult, out_dir: Path) -> dict[str, Any]:
    """Write ``report.json``, the figures and ``report.html`` of the case study into ``out_dir``; return the report,
    whose ``cost`` (:meth:`~mlm_dynamics.models.cost.CostLedger.record`) includes writing them."""
    return write_billed(out_dir, "semantics", result.cost, lambda: _write_pages(result, out_dir))


def _write_pages(result: CaseStudyResult, out_dir: Path) -> dict[str, Any]:
    report = semantics_report(result)
    drawn = semantics_figures(result)
    write_figures(out_dir, drawn)
    data = report["semantics"]
    sections = [Section("Summary", paragraphs=[
        "Glauber chains from neutral sentences; every observation is decoded and embedded with the sentence "
        f"encoder. Distances are in units of its scale ({result.scale:.3f}: the median cosine distance between two "
        "random corpus sentences). Attraction is the fraction of time near a topic minus the corpus base rate, with a "
        "95% bootstrap interval over chains."], preformatted=[semantics_summary(result)],
        tables=[("per temperature", data["by_temperature"])])]
    sections += [Section(name.capitalize(), figures=[(figure, CAPTIONS[name])]) for name, figure in drawn.items()]
    sections.append(Section("Basins", tables=[("decoded state where each basin was first entered", data["basins"])]))
    sections.append(Section("Final states", tables=[("", data["final_states"])]))
    write_text(out_dir / "report.html", render_html("mlm_dynamics semantic case study", sections, report["config"],
                                                    cost=None if result.cost is None else result.cost.record()))
    return report


def semantics_summary(result: CaseStudyResult) -> str:
    """The case study's findings as printed text."""
    lines = [f"{len(result.temperatures)} chains x {result.steps[-1]} steps; encoder scale {result.scale:.3f}; "
             "base rates " + ", ".join(f"{t} {r:.3f}" for t, r in result.base_rates.items())]
    for row in result.by_temperature():
        attraction = ", ".join(f"{t} {row[f'topic_{t}_attraction']:+.3f} [{row[f'topic_{t}_attraction_low']:+.3f}, "
                               f"{row[f'topic_{t}_attraction_high']:+.3f}]" for t in result.topics)
        lines.append(f"tau={row['temperature']:g}: drift {row['drift_final']:.2f} scales, {row['num_traps']:.0f} "
                     f"traps in {row['num_basins']:.0f} basins, trapped {row['trapped_fraction']:.0%}; "
                     f"attraction {attraction}")
    return "\n".join(lines)


__all__ = ["CAPTIONS", "semantics_figures", "semantics_report", "semantics_summary", "write_semantics_report"]
