"""Serialising results: JSON and CSV writers, the ``run`` job's report and printed summary."""

from .run_report import run_report, run_summary, write_run_report
from .writers import finite, jsonable, write_csv, write_json, write_text

__all__ = ["finite", "jsonable", "run_report", "run_summary", "write_csv", "write_json", "write_run_report",
           "write_text"]
