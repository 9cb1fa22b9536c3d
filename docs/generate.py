"""Write the documentation pages that are generated from the code: ``python docs/generate.py``.

``tests/test_docs_generated.py`` fails when a committed page differs from what this writes.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import os
import re
from collections.abc import Callable
from pathlib import Path

from mlm_dynamics.cli import JOBS, parser
from mlm_dynamics.experiments.config import field_default, presets
from mlm_dynamics.probes.keys import metric_key_page


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


PAGES: dict[str, Callable[[], str]] = {"reference/api.md": api_page,"reference/metric-keys.md": metric_key_page,
                                       "reference/config.md": config_page,
                                       "reference/cli.md": cli_page}


def main() -> None:
    here = Path(__file__).parent
    for name, page in PAGES.items():
        (here / name).parent.mkdir(parents=True, exist_ok=True)
        (here / name).write_text(page())
        print(f"wrote {here / name}")


if __name__ == "__main__":
    main()
