"""The ``run`` job's outputs: ``report.json`` (sections from each result's ``summary()``), ``trajectory.csv``,
``figures/*.png``, ``report.html``, and the printed summary."""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from matplotlib.figure import Figure

from ..diagnostics.bracket import MixingBracket
from ..experiments.config import to_dict
from ..experiments.run import TRAJECTORY_FIELDS, ChainRunResult, CouplingResult
from . import figures
from .decoding_report import setting_text
from .html import Section, claims_section, marked_changes, quantile_text, render_html, write_figures
from .writers import write_billed, write_csv, write_text


def run_report(result: ChainRunResult) -> dict[str, Any]:
    """JSON-ready report. Section names match the callbacks' metric groups (``mixing``, ``rectangle``, ...); the
    ``mixing`` scalars are those at the run's main temperature (:attr:`RunConfig.main_temperature`),
    ``mixing.by_temperature`` has the whole ladder."""
    temperature = result.config.main_temperature
    report: dict[str, Any] = {"config": to_dict(result.config), "model": result.model,
                              "chains": {**result.chains, "start_sequences": result.start_sequences,
                                         "final_sequences": result.final_sequences},
                              "notes": result.notes, "environment": result.environment,
                              "stopped": result.stopped}
    if result.semantics is not None:
        semantics = result.semantics
        report["semantics"] = {"scale": semantics.scale, **semantics.metrics,
                               "drift_over_scale_final": float(semantics.drift[-1].mean()) / semantics.scale,
                               **semantics.traps(),
                               "by_temperature": semantics.by_temperature()}
    if result.coupling is not None:
        coupling = result.coupling
        main = temperature
        brackets = coupling.brackets()
        ladder = [{"temperature": tau, **times.summary(), "meeting_times": times.times.tolist(),
                   "censored": times.censored.tolist(), **_lower_side(coupling, tau, brackets[tau])}
                  for tau, times in coupling.times.items()]
        report["mixing"] = {"temperature": main, **coupling.times[main].summary(), "by_temperature": ladder,
                            "hamming_between_pairs_start": coupling.hamming_start,
                            "hamming_between_pairs_end": coupling.hamming_end, "seconds": coupling.seconds,
                            "forward_rows": coupling.rows}
    if result.rectangle is not None:
        report["rectangle"] = result.rectangle.summary()
    if result.margins is not None:
        report["margins"] = {name: margins.summary(temperature) for name, margins in result.margins.items()}
    if result.influence is not None:
        report["influence"] = {**result.influence.summary(), "sites": result.influence.sites.tolist(),
                               "temperatures": result.influence.temperatures.tolist()}
    if result.parallel is not None:
        report["parallel"] = result.parallel.summary()
    if result.claims is not None:
        report["claims"] = result.claims.to_dict()
    return report


def _lower_side(coupling: CouplingResult, tau: float, bracket: MixingBracket) -> dict[str, Any]:
    """The certified slow side of one temperature and the verdict of both sides, for ``mixing.by_temperature``."""
    lower = coupling.lower.get(tau)
    sides = bracket.summary()
    out: dict[str, Any] = {key: sides[key] for key in ("mixing_time_exceeds", "forgotten_by", "horizon")}
    if lower is not None:
        summary = lower.summary()
        out.update({key: summary[key] for key in ("tv_lower", "d_lower", "chains_needed")})
        out["witness_pairs"] = lower.num_chains
    out.update({"pairs": sides["pairs"], "look": sides["look"], "looks": len(bracket.looks or ()) or 1,
                "pair_rows": coupling.rows_by_temperature.get(tau, 0)})
    return {**out, "verdict": bracket.verdict, "verdict_text": bracket.text()}


def _verdict_cell(row: Mapping[str, Any]) -> str:
    """The verdict of both sides in a few words, from the numbers of ``mixing.by_temperature`` (``verdict_text`` says
    what an undecided temperature would need)."""
    if row["verdict"] == "slow":
        return f"slow: t_mix(1/4) > {row['mixing_time_exceeds']:g}"
    if row["verdict"] == "fast":
        return f"fast from these starts: TV <= 1/4 by step {row['forgotten_by']:g}"
    if row.get("tv_lower") is None:
        return "undecided (no witness test)"
    return (f"undecided: tv_lower {row['tv_lower']:.2f} at step {row['horizon']:g} from {row['witness_pairs']} pairs "
            "(above 0.5 certifies slow)")


def _design_cell(row: Mapping[str, Any]) -> str:
    """``12 (look 1 of 6), 3840 rows``: the pairs the verdict rests on, the look, and the pairs' forward rows."""
    look = f" (look {row['look']:.0f} of {row['looks']})" if row.get("look") is not None and row.get("looks", 1) > 1 \
        else ""
    return f"{row['pairs']:.0f}{look}, {row.get('pair_rows', 0):.0f} rows"


def key_figures(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per temperature of the ladder with the run's headline numbers, for the top of the HTML report: the
    coupled pairs' median meeting time with its interval and the coverage it achieves (``> budget`` when censored),
    the pairs and the censored fraction, the chains' final drift in units of the distance to random fillings and the
    fraction of time trapped, and the influence estimate."""
    temperatures = sorted({*(row["temperature"] for row in report.get("semantics", {}).get("by_temperature", [])),
                           *(row["temperature"] for row in report.get("mixing", {}).get("by_temperature", [])),
                           *report.get("influence", {}).get("temperatures", [])})
    mixing = {row["temperature"]: row for row in report.get("mixing", {}).get("by_temperature", [])}
    semantics = {row["temperature"]: row for row in report.get("semantics", {}).get("by_temperature", [])}
    rows = []
    for tau in temperatures:
        row: dict[str, Any] = {"tau": f"{tau:g}"}
        if tau in mixing:
            pairs = mixing[tau]
            row["median meeting time [interval] (coverage)"] = quantile_text(pairs, "meeting_time_median")
            row["pairs censored"] = f"{pairs['censored_fraction']:.0%} of {pairs['num_pairs']:.0f}"
            if "verdict" in pairs:
                row["mixing (each side 95 %)"] = _verdict_cell(pairs)
                if "pairs" in pairs:
                    row["pairs (look), pair rows"] = _design_cell(pairs)
        if tau in semantics:
            row["drift (1 = forgot start)"] = f"{semantics[tau]['drift_over_scale_final']:.2f}"
            row["time in a trap (descriptive)"] = f"{semantics[tau]['trapped_fraction']:.0%}"
        key = f"dobrushin_tau{tau:g}"
        if key in report.get("influence", {}):
            row["influence estimate"] = f"{report['influence'][key]:.2f}"
        rows.append(row)
    return rows


def draws(result: ChainRunResult, trajectory: Sequence[Mapping[str, Any]], per_temperature: int = 1
          ) -> list[dict[str, Any]]:
    """A few chains as text: for the first ``per_temperature`` chains of each temperature, the sequence at the start,
    at the recorded step nearest the middle of the run and at the end, with the tokens changed since the start
    marked (:func:`~.html.marked_changes`)."""
    temperatures = result.config.per_chain_temperatures()
    steps = int(result.chains["num_steps"])
    rows: list[dict[str, Any]] = []
    for tau in sorted(set(temperatures)):
        for chain in [c for c, t in enumerate(temperatures) if t == tau][:per_temperature]:
            start, end = result.start_sequences[chain], result.final_sequences[chain]
            recorded = [r for r in trajectory if int(r["chain"]) == chain and 0 < int(r["step"]) < steps]
            middle = min(recorded, key=lambda r: abs(int(r["step"]) - steps / 2), default=None)
            shown = [(0, start), *([] if middle is None else [(int(middle["step"]), str(middle["sequence"]))]),
                     (steps, end)]
            for step, sequence in shown:
                rows.append({"tau": f"{tau:g}", "chain": chain, "step": step,
                             "sequence (changed since the start marked)": marked_changes(sequence, start)})
    return rows


def chain_traces(result: ChainRunResult, trajectory: Sequence[Mapping[str, Any]]) -> Figure | None:
    """The trace figure (:func:`~.figures.chain_traces`) from the recorded rows of ``trajectory.csv``, from step 0
    (distance 0); ``None`` when nothing was recorded."""
    temperatures = result.config.per_chain_temperatures()
    distance = {(int(row["step"]), int(row["chain"])): int(row["hamming_to_start"]) for row in trajectory}
    steps = sorted({0, *(step for step, _ in distance)})
    if len(steps) < 2:
        return None
    hamming = torch.tensor([[distance.get((step, chain), 0 if step == 0 else -1) for chain in range(len(temperatures))]
                            for step in steps])
    if (hamming < 0).any():
        raise ValueError("trajectory.csv misses chains at some recorded steps; every record has all chains")
    return figures.chain_traces(steps, hamming, temperatures, int(result.chains["num_sites"]))


def run_figures(result: ChainRunResult) -> dict[str, Figure]:
    """The run's figures, by file stem."""
    out: dict[str, Figure] = {}
    if result.semantics is not None:
        semantics = result.semantics
        out["landscape"] = figures.landscape_by_temperature(semantics.embeddings, semantics.basins,
                                                            semantics.temperatures)
        out["drift"] = figures.drift_over_time(semantics.steps, semantics.drift, semantics.scale,
                                               semantics.temperatures)
    if result.coupling is not None:
        out["coupling"] = figures.ladder_survival(result.coupling.times)
    if result.rectangle is not None:
        out["rectangle"] = figures.rectangle_histogram(result.rectangle)
    if result.margins is not None:
        out["margins"] = figures.margin_distribution(result.margins)
    if result.influence is not None:
        out["influence"] = figures.dobrushin_curve(result.influence)
    if result.parallel is not None:
        out["parallel"] = figures.parallel_error_by_k({result.config.model.source: result.parallel})
    return out


CAPTIONS = {
    "landscape": "PCA of the chains' hidden-state trajectories; coloured points: states inside a trap (by basin)",
    "drift": "drift from the start, in units of the distance to random fillings of the sites",
    "traces": "trace of each chain per temperature: positions changed since its start (thick: the mean); flat near "
              "0: the chain stays where it started",
    "coupling": "fraction of coupled pairs not yet met, per temperature: the transition from trapped to mixing",
    "rectangle": "rectangle statistics |R|: every rectangle above the tolerance certifies incompatibility",
    "margins": "local margins at the start and at the end of the chains",
    "influence": "estimated influence coefficient against temperature, a lower estimate of Dobrushin's coefficient: "
                 "1 or more certifies that the condition fails, below 1 certifies nothing",
    "parallel": "parallel decoding on the final states: the error of committing the K most confident positions of a "
                "masked window at once against one at a time (band: interval of the mean), with the confidence "
                "certificate (dashed) and the influence estimate (dotted)",
}


def write_run_report(result: ChainRunResult, out_dir: Path) -> dict[str, Any]:
    """Write ``report.json``, ``trajectory.csv``, ``figures/*.png`` and ``report.html``; returns the report, whose
    ``cost`` (:meth:`~mlm_dynamics.models.cost.CostLedger.record`) includes writing them."""
    return write_billed(out_dir, "run", result.cost, lambda: _write_pages(result, out_dir))


def _write_pages(result: ChainRunResult, out_dir: Path) -> dict[str, Any]:
    report = run_report(result)
    if result.trajectory:  # a run with an output directory appended its rows to trajectory.csv there already
        write_csv(out_dir / "trajectory.csv", result.trajectory, TRAJECTORY_FIELDS)
    with (out_dir / "trajectory.csv").open(newline="") as handle:
        recorded = list(csv.DictReader(handle))
    drawn = run_figures(result)
    traces = chain_traces(result, recorded)
    if traces is not None:
        drawn = {"traces": traces, **drawn}
    write_figures(out_dir, drawn)
    sections = [] if result.claims is None else [claims_section(result.claims)]
    overall = [{"measure": "rectangles that certify incompatibility",
                "value": f"{report['rectangle']['prevalence']:.1%} of {report['rectangle']['num_rectangles']:.0f}"}
               ] if "rectangle" in report else []
    sections.append(Section("Key figures", tables=[("by temperature", key_figures(report)), ("overall", overall)]))
    sections.append(Section("Draws", tables=[("one chain per temperature at the start, the middle and the end of the "
                                              "run", draws(result, recorded))]))
    sections += [Section(name.capitalize(), figures=[(figure, CAPTIONS[name])]) for name, figure in drawn.items()]
    sections.append(Section("Summary", preformatted=[run_summary(result)]))
    tables = []
    if "semantics" in report:  # every temperature the chains ran at
        tables.append(("semantics per temperature", report["semantics"]["by_temperature"]))
    if "mixing" in report:  # every temperature the pairs ran at
        tables.append(("mixing per temperature", [{k: v for k, v in row.items() if not isinstance(v, list)}
                                                  for row in report["mixing"]["by_temperature"]]))
    for name in ("rectangle", "influence", "parallel"):
        if name in report:
            tables.append((name, [{k: v for k, v in report[name].items() if not isinstance(v, (list, dict))}]))
    sections.append(Section("Numbers", tables=tables))
    cost = None if result.cost is None else result.cost.record()
    write_text(out_dir / "report.html", render_html("mlm_dynamics run", sections, report["config"],
                                                    result.environment, cost))
    return report


def run_summary(result: ChainRunResult) -> str:
    """The lines the CLI prints."""
    chains = result.chains
    lines = [f"note: {note}" for note in result.notes] + [
        f"chains: {chains['num_chains']} x {chains['num_steps']} steps on {chains['num_sites']} sites "
        f"({chains['steps_per_second']} steps/s)",
        f"change rate per step: {chains['change_rate']:.3f}; mean log q(proposal): "
        f"{chains['mean_log_prob_of_proposal']:.3f}",
        f"Hamming distance to start: mean {chains['hamming_to_start_mean']:.2f}, max {chains['hamming_to_start_max']}",
        f"window PLL energy: start {chains['pll_energy_start_mean']:.3f} -> end {chains['pll_energy_end_mean']:.3f}",
        f"unique final sequences: {chains['unique_final_sequences']}",
    ]
    brackets = {} if result.coupling is None else result.coupling.brackets()
    if result.semantics is not None:
        for row in result.semantics.by_temperature():
            bracket = brackets.get(row["temperature"])
            certified = "; descriptive, the slow side " + (
                f"certified: {bracket.text()}" if bracket is not None and bracket.verdict == "slow" else
                "not certified")
            traps = (f"{row['num_traps']:.0f} traps in {row['num_basins']:.0f} basins, trapped "
                     f"{row['trapped_fraction']:.0%} of the time (median dwell "
                     f"{quantile_text(row, 'dwell_time_median')} steps{certified})"
                     if row["num_traps"] else "no traps")
            lines.append(f"semantics at tau={row['temperature']:g}: drift {row['drift_over_scale_final']:.2f} of the "
                         f"distance to random fillings; {traps}")
    if result.coupling is not None:
        coupling = result.coupling
        parts = []
        for tau, times in coupling.times.items():
            parts.append(f"tau={tau:g}: {quantile_text(times.summary(), 'meeting_time_median')} "
                         f"({times.censored_fraction:.0%} of {times.times.numel()} censored at {int(times.budget)})")
        lines.append(f"coupled pairs, median meeting time: {', '.join(parts)}")
        lines += [f"mixing at tau={tau:g}: {bracket.text()}" for tau, bracket in brackets.items()]
        decided = sum(bracket.verdict != "undecided" for bracket in brackets.values())
        lines.append(f"decided {decided} of {len(brackets)} temperatures with {coupling.rows} pair rows (each side at "
                     "95 % per temperature, kept through the design's looks)")
    if result.rectangle is not None:
        summary = result.rectangle.summary()
        lines.append(f"rectangle test: {summary['prevalence']:.3f} of {int(summary['num_rectangles'])} rectangles "
                     f"certify incompatibility; median |R| {summary['abs_r_median']:.3f} nats")
    if result.margins is not None:
        tau = result.config.main_temperature
        start, final = (result.margins[k].summary(tau) for k in ("start", "final"))
        lines.append(f"local margin: start {start['margin_mean']:.2f}, final {final['margin_mean']:.2f} (mean change "
                     f"probability per site update {final['change_probability_mean']:.3f})")
    if result.influence is not None:
        influence = result.influence
        pairs = ", ".join(f"tau={t:g}: {a:.2f}" for t, a in zip(influence.temperatures.tolist(),
                                                                  influence.dobrushin.tolist(), strict=True))
        lines.append(f"Dobrushin coefficient on {len(influence.sites)} sites: {pairs}")
    if result.parallel is not None:
        summary, k = result.parallel.summary(), result.parallel.max_k
        lines.append(f"parallel decoding: error of committing the {k} most confident at once "
                     f"{summary[f'tv_k{k}']:.3g} (interval to {summary[f'tv_high_k{k}']:.3g}); "
                     f"{setting_text(result.parallel)}")
    return "\n".join(lines)


__all__ = ["CAPTIONS", "chain_traces", "draws", "key_figures", "run_figures", "run_report", "run_summary",
           "write_run_report"]
