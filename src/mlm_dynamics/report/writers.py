"""Writing results: JSON (unbounded values as ``null``: JSON has no infinity) and CSV, both atomically."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._io import atomic_write
from ..models.cost import CostLedger
from .artifacts import artifact


def jsonable(value: Any) -> Any:
    """``value`` with non-finite floats (censored, unbounded, undefined) replaced by ``None``, recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def finite(metrics: Mapping[str, float]) -> dict[str, float]:
    """The entries of ``metrics`` with finite values: what loggers receive (TensorBoard warns on inf and nan)."""
    return {k: float(v) for k, v in metrics.items() if math.isfinite(float(v))}


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temporary file in the same directory, fsync, rename)."""
    atomic_write(path, text.encode("utf-8"))


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON (non-finite numbers as ``null``), atomically."""
    write_text(path, json.dumps(jsonable(data), indent=2) + "\n")


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]], fieldnames: Sequence[str]) -> None:
    """Write ``rows`` as CSV with the columns ``fieldnames``, atomically."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(fieldnames), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_text(path, buffer.getvalue())


def write_billed(out_dir: Path, job: str, cost: CostLedger | None, pages: Callable[[], dict[str, Any]]
                 ) -> dict[str, Any]:
    """Write a ``job``'s report: ``pages()`` writes its files and returns what ``report.json`` holds, charged to the
    phase ``report and figures`` of ``cost`` (the job's ledger; a new one when there is none); then, last,
    ``report.json`` with its :func:`~mlm_dynamics.report.artifacts.artifact` marker and the whole bill under ``cost``
    (:meth:`~mlm_dynamics.models.cost.CostLedger.record`, with ``until``: where it stops counting). Returns the
    report."""
    ledger = cost if cost is not None else CostLedger()
    with ledger.phase("report and figures"):
        report = pages()
    bill = {**ledger.record(), "until": "report.json written (the process prints its summary and exits)"}
    report = {"artifact": artifact(job), **report, "cost": bill}
    write_json(out_dir / "report.json", report)
    return report


__all__ = ["finite", "jsonable", "write_billed", "write_csv", "write_json", "write_text"]
