"""Write the documentation pages that are generated from the code and from measured results:
``python docs/generate.py``.

Results: ``python docs/generate.py --collect runs/default:default-run runs/sweep-ising:sweep-ising ...`` keeps a
trimmed copy of each run's ``report.json`` in ``docs/data/NAME.json`` (the numbers, not every pair's time); the
tables the Results page and the README show are rendered from those files into ``docs/results/NAME.md`` (included
with ``--8<--``), so a number in the docs has one source. ``tests/test_docs_generated.py`` fails when a committed page
differs from what this writes.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlm_dynamics.cli import JOBS, parser
from mlm_dynamics.experiments.config import field_default, presets
from mlm_dynamics.probes.keys import metric_key_page
from mlm_dynamics.report.artifacts import SCHEMA_VERSION
from mlm_dynamics.report.html import quantile_text
from mlm_dynamics.report.run_report import key_figures
from mlm_dynamics.report.schema import json_schemas


def _doc(schema: type) -> str:
    """The class docstring as one paragraph (dataclasses without one get their generated signature: skipped)."""
    doc = inspect.getdoc(schema) or ""
    if doc.startswith(f"{schema.__name__}("):
        return ""
    doc = re.sub(r":\w+:`~?(?:[\w.]+\.)?(\w+)`", r"`\1`", " ".join(doc.split()))  # :class:`~a.B` -> `B`
    return doc.replace("``", "`")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _section(schema: type, prefix: str, lines: list[str]) -> None:
    """One table per config dataclass: key, type, default; nested dataclasses get their own table after it."""
    nested = []
    rows = []
    for field in dataclasses.fields(schema):
        default = field_default(field)
        if dataclasses.is_dataclass(default):
            nested.append((type(default), f"{prefix}{field.name}."))
        else:
            rows.append(f"| `{prefix}{field.name}` | `{_cell(str(field.type))}` | `{_cell(repr(default))}` |")
    if rows:
        title = prefix.rstrip(".") or "top level"
        lines += [f"### `{title}`", ""]
        if _doc(schema):
            lines += [_doc(schema), ""]
        lines += ["| key | type | default |", "|---|---|---|", *rows, ""]
    for child, child_prefix in nested:
        _section(child, child_prefix, lines)


def config_page() -> str:
    """``reference/config.md``: every key of every job's config with its type, default and section docstring."""
    lines = ["# Configuration reference", "",
             "Generated from the config dataclasses by `python docs/generate.py`; a test keeps it current. Set keys in",
             "a YAML file (`--config FILE` or a packaged preset's name) or with `--set key.sub=value`; wrong keys,",
             "types and values are refused with the key's name before anything loads.", ""]
    listing = presets()
    for name, (schema, help_text) in JOBS.items():
        mine = sorted(preset for preset, job in listing.items() if job == name)
        lines += [f"## `mlm-dynamics {name}`", "", f"{help_text[0].upper()}{help_text[1:]}. Config class:",
                  f"`{schema.__module__}.{schema.__name__}`; presets: {', '.join(f'`{p}`' for p in mine) or 'none'}.",
                  ""]
        _section(schema, "", lines)
    return "\n".join(lines).rstrip() + "\n"


def cli_page() -> str:
    """``reference/cli.md``: the ``--help`` of the command and of each subcommand."""
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "110"  # argparse wraps to the terminal: the page must not depend on it
    try:
        root = parser()
        helps = {"": root.format_help()}
        actions = [action for action in root._actions if isinstance(action, argparse._SubParsersAction)]
        helps |= {name: sub.format_help() for name, sub in actions[0].choices.items()}
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    lines = ["# Command line", "", "Generated from the argument parser by `python docs/generate.py`.", "",
             "```text", helps.pop("").rstrip(), "```", ""]
    for name, text in helps.items():
        lines += [f"## `mlm-dynamics {name}`", "", "```text", text.rstrip(), "```", ""]
    return "\n".join(lines).rstrip() + "\n"


API_PAGES = {"models": "models", "embedders": "models", "sampling": "sampling", "_random": "sampling",
             "tracking": "tracking", "probes": "probes", "callbacks": "callbacks", "metrics": "metrics",
             "diagnostics": "diagnostics", "experiments": "jobs"}


def api_page() -> str:
    """``reference/api.md``: every top-level name, the module that defines it and a link to its reference entry."""
    import mlm_dynamics

    exports: dict[str, str] = mlm_dynamics._EXPORTS
    lines = ["# Public API", "",
             "Everything `from mlm_dynamics import ...` offers (generated from the package's export table by",
             "`python docs/generate.py`). Helpers stay in their subpackages, documented on the same pages.", "",
             "| name | defined in | reference |", "|---|---|---|"]
    for name in sorted(exports, key=lambda n: (list(API_PAGES).index(exports[n].split(".")[0]), n.lower())):
        module = f"mlm_dynamics.{exports[name]}"
        page = API_PAGES[exports[name].split(".")[0]]
        lines.append(f"| `{name}` | `{module}` | [{page}]({page}.md#{module}.{name}) |")
    return "\n".join(lines) + "\n"


DATA = Path(__file__).parent / "data"
_PER_PAIR = ("sites", "meeting_times", "censored", "start_kinds", "coupling_trace_mean", "draws")


def trim(report: dict[str, Any]) -> dict[str, Any]:
    """What the docs show of a run's ``report.json``: everything but per-pair arrays, trajectories and per-kind rows."""
    if "sweep" in report:
        sweep = report["sweep"]
        cells = [{k: v for k, v in cell.items() if k not in _PER_PAIR and "/" not in k} for cell in sweep["cells"]]
        kept = {k: sweep[k] for k in ("claims", "fit", "slow_region", "notes", "rectangles") if k in sweep}
        return {"config": report["config"], "environment": report["environment"], "timings": report["timings"],
                "sweep": {**kept, "cells": cells}, "cost": report.get("cost", {})}
    mixing = report.get("mixing", {})
    ladder = [{k: v for k, v in row.items() if not isinstance(v, list)} for row in mixing.get("by_temperature", [])]
    semantics = report.get("semantics", {})
    return {"config": report["config"], "environment": report["environment"],
            "chains": {k: v for k, v in report["chains"].items() if not isinstance(v, list)},
            "mixing": {"by_temperature": ladder}, "semantics": {"by_temperature": semantics.get("by_temperature", [])},
            "influence": {k: v for k, v in report.get("influence", {}).items() if not isinstance(v, dict)},
            "rectangle": report.get("rectangle", {}), "claims": report["claims"], "cost": report.get("cost", {})}


def _table(rows: list[dict[str, Any]]) -> list[str]:
    columns = list(dict.fromkeys(key for row in rows for key in row))
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns),
            *("| " + " | ".join(_cell(str(row.get(c, ""))) for c in columns) + " |" for row in rows)]


def _interval(value: float | None, low: float | None, high: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3g} [{low:.3g}, {high:.3g}]" if low is not None and high is not None else f"{value:.3g}"


def _claims(claims: dict[str, Any]) -> list[str]:
    rows = [{"claim": c["name"], "verdict": c["verdict"], "sample": c["sample"],
             "plug-in power": "-" if c["power"] is None else f"{c['power']:.2f}"} for c in claims["claims"]]
    return _table(rows)


def results_page(data: dict[str, Any]) -> str:
    """The tables of one collected run: per temperature (run) or per fit and cell (sweep), and the claims."""
    source = data["environment"]
    lines = [f"<!-- generated from docs/data by docs/generate.py: {source.get('command', '')} -->", ""]
    if "witness_power" in data:
        lines += _table([{"model": r["model"], "tau": f"{r['temperature']:g}", "witness": f"`{r['witness']}`",
                          "groups certified (unpaired / paired)":
                              f"{r['unpaired_certified_groups']} / {r['paired_certified_groups']}",
                          "tv_lower on all pairs at each time, unpaired / paired":
                              f"{r['unpaired_tv_lower']} / {r['paired_tv_lower']}",
                          "observed gap": str(r["gap"])} for r in data["witness_power"]])
        return "\n".join(lines) + "\n"
    if "sweep" in data:
        sweep = data["sweep"]
        fits = [{"tau": f"{f['temperature']:g}", "C(tau)": _interval(f["C"], f["C_low"], f["C_high"]),
                 "B": "-" if f["B"] is None else f"{f['B']:.3g}",
                 "C_inf (+ D / n)": _interval(f["C_inf"], f["C_inf_low"], f["C_inf_high"]),
                 "log-log slope": _interval(f["slope"], f["slope_low"], f["slope_high"]),
                 "pairs": int(f["num_pairs"])} for f in sweep["fit"]]
        cells: dict[float, dict[str, str]] = {}
        sides: dict[float, dict[str, str]] = {}
        for cell in sweep["cells"]:
            row = cells.setdefault(cell["temperature"], {"tau": f"{cell['temperature']:g}"})
            row[f"n = {cell['num_sites']:g}"] = (f"{quantile_text(cell, 'meeting_time_median')}, "
                                                 f"{cell['censored_fraction']:.0%} censored")
            if cell.get("verdict"):
                pairs = f" ({cell['pairs']:.0f} pairs)" if cell.get("pairs") is not None else ""
                sides.setdefault(cell["temperature"], {"tau": f"{cell['temperature']:g}"})[
                    f"n = {cell['num_sites']:g}"] = (
                    f"slow: t_mix > {cell['mixing_time_exceeds']:g}" if cell["verdict"] == "slow" else
                    f"fast: TV <= 1/4 by {cell['forgotten_by']:g}" if cell["verdict"] == "fast" else
                    "undecided" + (f", d({cell['witness_horizon']:g}) >= {cell['d_lower']:.2f}"
                                   if cell.get("d_lower") and cell.get("witness_horizon") else "")) + pairs
        if sides:
            lines += ["Both sides of t_mix(1/4) per cell, each at 95 % (slow: t_mix(1/4) beyond the step, certified "
                      "by the witness; fast: TV <= 1/4 between the two starts by the step, certified by the coupling; "
                      "undecided: report.json's verdict_text says what it would need):", "",
                      *_table(list(sides.values())), ""]
        else:
            lines += ["(Measured before the sweep bracketed t_mix(1/4) per cell: no cell verdicts; the claims "
                      "below are as that release decided them.)", ""]
        lines += ["Median meeting time [order-statistic interval] (its coverage), and the censored fraction:", "",
                  *_table(list(cells.values())), "",
                  "Fits of T = n (C(tau) log n + B) on these lengths, and extrapolated with a finite-size term D / n "
                  "(C_inf), where every pair met:", "",
                  *_table([f for f in fits if f["C(tau)"] != "-"] or [{"fit": "none: pairs censored at every "
                                                                              "temperature"}]),
                  "", "The claims:", "", *_claims(sweep["claims"])]
    else:
        lines += [*_table(key_figures(data)), "", "The claims:", "", *_claims(data["claims"])]
    return "\n".join(lines + _cost(data.get("cost", {}))) + "\n"


def _cost(cost: dict[str, Any]) -> list[str]:
    """The job's bill: its one line and the phases (seconds, forward rows, forward equivalents)."""
    if not cost:
        return []
    rows = [{"phase": row["phase"], "seconds": f"{row['seconds']:.1f}", "forward rows": row["forward_rows"],
             "bare forwards": f"{row['forward_equivalents']:.0f}"} for row in cost["phases"]]
    return ["", f"What it cost ({cost['line'].removeprefix('cost: ')}):", "", *_table(rows)]


def schema_page() -> str:
    """``reference/report-schema.md``: the JSON Schema of every result file, from the pydantic models."""
    lines = ["# Report schema", "",
             "<!-- generated by docs/generate.py from mlm_dynamics.report.schema: do not edit -->", "",
             f"Every result file carries `\"artifact\": {{\"job\": JOB, \"version\": {SCHEMA_VERSION}}}` and is "
             "checked on read against the schema of its job (`mlm_dynamics.report.schema.read_report`): types, "
             "ranges (counts are integers, fractions, coverages and powers lie in [0, 1], steps and times are >= 0, "
             "every number is finite) and the relations a run guarantees (a median meeting time at most its budget "
             "and inside its interval, one start and one final sequence per chain, a fit's interval around its "
             "value). A reader refuses a file that fails in one line naming the file and the key, and names a newer "
             "version as such. Keys not listed are kept and not checked. `tests/test_schema.py` validates what every "
             "job writes against the same models.", ""]
    for job, schema in json_schemas().items():
        lines += [f"## `{job}`", "", "```json", json.dumps(schema, indent=1), "```", ""]
    return "\n".join(lines)


def results_pages() -> dict[str, Callable[[], str]]:
    """``results/NAME.md`` for each ``docs/data/NAME.json``."""
    return {f"results/{path.stem}.md": (lambda path=path: results_page(json.loads(path.read_text())))
            for path in sorted(DATA.glob("*.json"))}


PAGES: dict[str, Callable[[], str]] = {"reference/api.md": api_page, "reference/metric-keys.md": metric_key_page,
                                       "reference/config.md": config_page, "reference/cli.md": cli_page,
                                       "reference/report-schema.md": schema_page,
                                       **results_pages()}


def collect(pairs: list[str]) -> None:
    """``RUN_DIR:NAME`` pairs: write ``docs/data/NAME.json`` from ``RUN_DIR/report.json``."""
    DATA.mkdir(exist_ok=True)
    for pair in pairs:
        folder, _, name = pair.rpartition(":")
        report = json.loads((Path(folder) / "report.json").read_text())
        (DATA / f"{name}.json").write_text(json.dumps(trim(report), indent=1) + "\n")
        print(f"wrote {DATA / name}.json")


def main() -> None:
    if sys.argv[1:2] == ["--collect"]:
        collect(sys.argv[2:])
    here = Path(__file__).parent
    for name, page in {**PAGES, **results_pages()}.items():
        (here / name).parent.mkdir(parents=True, exist_ok=True)
        (here / name).write_text(page())
        print(f"wrote {here / name}")


if __name__ == "__main__":
    main()
