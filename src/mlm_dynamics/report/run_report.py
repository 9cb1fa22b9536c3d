"""The ``run`` job's report: ``report.json`` sections from each result's ``summary()``, the printed summary."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..experiments.config import to_dict
from ..experiments.run import ChainRunResult
from .writers import write_csv, write_json

TRAJECTORY_FIELDS = ("step", "chain", "hamming_to_start", "sequence")


def run_report(result: ChainRunResult) -> dict[str, Any]:
    """JSON-ready report. Section names match the callbacks' metric groups (``mixing``, ``rectangle``, ...)."""
    temperature = result.config.sampler.temperature
    report: dict[str, Any] = {"config": to_dict(result.config), "model": result.model,
                              "chains": {**result.chains, "final_sequences": result.final_sequences}}
    if result.coupling is not None:
        coupling = result.coupling
        report["mixing"] = {**coupling.times.summary(), "meeting_times": coupling.times.times.tolist(),
                            "censored": coupling.times.censored.tolist(),
                            "hamming_between_pairs_start": coupling.hamming_start,
                            "hamming_between_pairs_end": coupling.hamming_end, "seconds": coupling.seconds}
    if result.rectangle is not None:
        report["rectangle"] = result.rectangle.summary()
    if result.margins is not None:
        report["margins"] = {name: margins.summary(temperature) for name, margins in result.margins.items()}
    if result.influence is not None:
        report["influence"] = {**result.influence.summary(), "sites": result.influence.sites.tolist(),
                               "temperatures": result.influence.temperatures.tolist()}
    return report


def write_run_report(result: ChainRunResult, out_dir: Path) -> dict[str, Any]:
    """Write ``report.json`` and ``trajectory.csv`` into ``out_dir``; returns the report."""
    report = run_report(result)
    write_csv(out_dir / "trajectory.csv", result.trajectory, TRAJECTORY_FIELDS)
    write_json(out_dir / "report.json", report)
    return report


def run_summary(result: ChainRunResult) -> str:
    """The lines the CLI prints."""
    chains = result.chains
    lines = [
        f"chains: {chains['num_chains']} x {chains['num_steps']} steps on {chains['num_sites']} sites "
        f"({chains['steps_per_second']} steps/s)",
        f"change rate per step: {chains['change_rate']:.3f}; mean log q(proposal): "
        f"{chains['mean_log_prob_of_proposal']:.3f}",
        f"Hamming distance to start: mean {chains['hamming_to_start_mean']:.2f}, max {chains['hamming_to_start_max']}",
        f"window PLL energy: start {chains['pll_energy_start_mean']:.3f} -> end {chains['pll_energy_end_mean']:.3f}",
        f"unique final sequences: {chains['unique_final_sequences']}",
    ]
    if result.coupling is not None:
        times = result.coupling.times
        median = float(times.quantiles([0.5])[0])
        lines.append(f"coupled pairs: median meeting time {'> budget' if math.isinf(median) else f'{median:g}'}, "
                     f"{times.censored_fraction:.2f} censored at {int(times.budget)} steps; pair Hamming distance "
                     f"{result.coupling.hamming_start} -> {result.coupling.hamming_end}")
    if result.rectangle is not None:
        summary = result.rectangle.summary()
        lines.append(f"rectangle test: {summary['prevalence']:.3f} of {int(summary['num_rectangles'])} rectangles "
                     f"certify incompatibility; median |R| {summary['abs_r_median']:.3f} nats")
    if result.margins is not None:
        tau = result.config.sampler.temperature
        start, final = (result.margins[k].summary(tau) for k in ("start", "final"))
        lines.append(f"local margin: start {start['margin_mean']:.2f}, final {final['margin_mean']:.2f} (mean change "
                     f"probability per site update {final['change_probability_mean']:.3f})")
    if result.influence is not None:
        influence = result.influence
        pairs = ", ".join(f"tau={t:g}: {a:.2f}" for t, a in zip(influence.temperatures.tolist(),
                                                                  influence.dobrushin.tolist(), strict=True))
        lines.append(f"Dobrushin coefficient on {len(influence.sites)} sites: {pairs}")
    return "\n".join(lines)
