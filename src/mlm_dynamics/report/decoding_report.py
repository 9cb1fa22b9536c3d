"""The ``parallel-decoding`` job's outputs: ``report.json``, ``table.csv``, ``figures/*.png``, ``report.html``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..diagnostics.parallel import LEVEL, ROWS_NEEDED, SHARE, ConfidenceProfile
from ..experiments.config import to_dict
from ..experiments.decoding import DecodingResult, ParallelDecodingConfig
from ..models.cost import CostLedger
from . import figures
from .html import Section, render_html, write_figures
from .writers import jsonable, write_billed, write_csv, write_text

EXPLANATION = (
    "Committing K masked positions in one step draws them from the product of their marginals; committing them one at"
    " a time (most confident first, recomputing in between) draws from the model's sequential law. The error is the "
    "total variation between the two: the smallest probability that the parallel commit differs from the sequential "
    "one. Exact by enumeration where the tree of forwards is small, else a Monte Carlo estimate with a betting "
    "confidence interval (Waudby-Smith and Ramdas; each row at level 1 - alpha / rows, so the band of the mean covers"
    " at the config's level). The certificate sum (1 - c_i) bounds the error whenever the conditionals are "
    "compatible; the confidence rules (Fast-dLLM's threshold and factor rules, a Frechet-Hoeffding profile rule) rest"
    " on it, and a violation shows conditionals whose sequential law does not keep their own marginals. The influence"
    " estimate reads one committed position at a time: a bound for K <= 2 only.")


def write_parallel_decoding(config: ParallelDecodingConfig, results: list[DecodingResult], out_dir: Path,
                            cost: CostLedger | None = None) -> dict[str, Any]:
    """Write ``table.csv``, ``report.json`` and ``report.html`` into ``out_dir``; return the report, with ``cost``
    (the job's ledger when given, writing included)."""
    return write_billed(out_dir, "parallel-decoding", cost, lambda: _write_pages(config, results, out_dir, cost))


def parallel_section(results: list[DecodingResult], thresholds: list[float]) -> Section:
    """The section of the report: the explanation, one table row per model, the two figures."""
    table = [_row(result) for result in results]
    profiles = {result.name: result.profile for result in results}
    drawn = [(figures.parallel_error_by_k(profiles), "Error against K (band: the interval of the mean)"),
             (figures.parallel_error_by_threshold(profiles, thresholds),
              "The threshold rule: error of the set it commits, its certificate, and K")]
    return Section("Parallel decoding: how many positions at once?", paragraphs=[EXPLANATION],
                   tables=[("", table)], figures=drawn)


GUARANTEE = f"kept on >= {100 * SHARE:g} % of fresh rows, at {100 * LEVEL:g} %"
"""How a report states the default guarantee of a setting."""


def _numbers(result: DecodingResult) -> dict[str, float]:
    return {key: value for key, value in result.summary().items() if isinstance(value, float)}


def _row(result: DecodingResult) -> dict[str, Any]:
    summary = _numbers(result)
    shown: dict[str, Any] = {"model": result.name}
    for n in (2, result.profile.max_k // 2, result.profile.max_k):
        shown[f"error K={n}"] = f"{summary[f'tv_k{n}']:.3g} [{summary[f'tv_low_k{n}']:.3g}, " \
                                f"{summary[f'tv_high_k{n}']:.3g}]"
    rows = result.profile.confidence.shape[0]
    for target in result.profile.targets:
        if rows < ROWS_NEEDED:
            shown[f"setting for error <= {target:g}"] = f"none: a guarantee needs {ROWS_NEEDED} rows, measured {rows}"
            continue
        setting = result.profile.setting(target)
        shown[f"setting for error <= {target:g}"] = f"K {setting.k}, threshold {setting.threshold:.3g} ({GUARANTEE})"
    violated = [f"{rule} {parameter:g}" for rule, parameter in result.profile.rules
                if summary[f"{rule}{parameter:g}/violated"] > 0]
    shown["certificates violated"] = ", ".join(violated) or "none"
    shown["exact"] = "yes" if summary["exact"] else "Monte Carlo"
    return shown


def _write_pages(config: ParallelDecodingConfig, results: list[DecodingResult], out_dir: Path,
                 cost: CostLedger | None) -> dict[str, Any]:
    rows = [result.summary() for result in results]
    report: dict[str, Any] = {"config": to_dict(config), "parallel": rows}
    write_csv(out_dir / "table.csv", jsonable(rows), list(rows[0]))
    section = parallel_section(results, config.thresholds)
    write_figures(out_dir, {"parallel-error-by-k": section.figures[0][0],
                            "parallel-error-by-threshold": section.figures[1][0]})
    write_text(out_dir / "report.html", render_html("mlm_dynamics parallel decoding", [section], report["config"],
                                                    cost=None if cost is None else cost.record()))
    return report


def setting_text(profile: ConfidenceProfile) -> str:
    """The settings a profile certifies for its targets (:data:`GUARANTEE`), or why there are none."""
    rows = profile.confidence.shape[0]
    if rows < ROWS_NEEDED:
        return f"no setting: a guarantee needs {ROWS_NEEDED} rows, measured {rows}"
    settings = [profile.setting(target) for target in profile.targets]
    return ", ".join(f"error <= {s.target:g}: K {s.k} or threshold {s.threshold:.3g}" for s in settings) + \
        f" (each {GUARANTEE})"


def parallel_decoding_summary(results: list[DecodingResult]) -> str:
    """One line per model: the error at K = 2 and at the window, and the K each target allows."""
    lines = []
    for result in results:
        summary = _numbers(result)
        k = result.profile.max_k
        lines.append(f"{result.name:>24}: error K=2 {summary['tv_k2']:.3g}, K={k} {summary[f'tv_k{k}']:.3g} "
                     f"[{summary[f'tv_low_k{k}']:.3g}, {summary[f'tv_high_k{k}']:.3g}]; {setting_text(result.profile)}")
    return "\n".join(lines)


__all__ = ["parallel_decoding_summary", "parallel_section", "setting_text", "write_parallel_decoding"]
