"""The ``rectangle-table`` job's outputs: ``report.json``, ``table.csv``, ``figures/*.png``, ``report.html``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..experiments.config import to_dict
from ..experiments.rectangles import RectangleTableConfig, TableRow
from ..models.cost import CostLedger
from . import figures
from .html import Section, render_html, write_figures
from .writers import jsonable, write_billed, write_csv, write_text


def write_rectangle_table(config: RectangleTableConfig, rows: list[TableRow], out_dir: Path,
                          cost: CostLedger | None = None) -> dict[str, Any]:
    """Write ``table.csv``, ``report.json`` and ``report.html`` of the rectangle table into ``out_dir``; return the
    report, with ``cost`` (:meth:`~mlm_dynamics.models.cost.CostLedger.record`, writing included; the job's ledger
    when given)."""
    return write_billed(out_dir, "rectangle-table", cost, lambda: _write_pages(config, rows, out_dir, cost))


def _write_pages(config: RectangleTableConfig, rows: list[TableRow], out_dir: Path,
                 cost: CostLedger | None) -> dict[str, Any]:
    table = [row.summary() for row in rows]
    report: dict[str, Any] = {"config": to_dict(config), "rectangles": table}
    write_csv(out_dir / "table.csv", jsonable(table), list(table[0]))
    drawn = []
    for row in rows:
        figure = figures.rectangle_histogram(row.report)
        figure.axes[0].set_title(f"{row.name}: {figure.axes[0].get_title()}", fontsize=9)
        drawn.append((figure, row.name))
    write_figures(out_dir, {re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-"): figure for figure, name in drawn})
    sections = [Section("Incompatibility across masked LMs", paragraphs=[
        "Each rectangle (a context, two sites, two candidate tokens at each) gives R = L1 - L2, the difference of the "
        "log-ratios along the two paths between its corners; R != 0 for one rectangle proves that no joint "
        "distribution has the model's conditionals. Prevalence: the fraction above the float tolerance. The "
        "compatible toy must show 0."], tables=[("", table)], figures=drawn)]
    write_text(out_dir / "report.html", render_html("mlm_dynamics rectangle table", sections, report["config"],
                                                    cost=None if cost is None else cost.record()))
    return report


def rectangle_table_summary(rows: list[TableRow]) -> str:
    """The table as printed text, one line per model."""
    lines = []
    for row in rows:
        summary = row.summary()
        lines.append(f"{row.name:>28}: prevalence {summary['prevalence']:.3f} of {int(summary['num_rectangles'])}, "
                     f"median |R| {summary['abs_r_median']:.3g}, q90 {summary['abs_r_q90']:.3g} nats "
                     f"(near {summary['near_prevalence']:.3f}, far {summary['far_prevalence']:.3f})")
    return "\n".join(lines)


__all__ = ["rectangle_table_summary", "write_rectangle_table"]
