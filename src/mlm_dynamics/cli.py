"""Command line: ``mlm-dynamics run|sweep --config FILE --out DIR [--set key=value ...]``.

Argument parsing and printing only; the jobs are library functions in :mod:`mlm_dynamics.experiments`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

import torch

from .experiments import ConfigError, OutputLock, RunConfig, RunInterrupted, load_config, run_chains
from .experiments.distributed import run_sweep_sharded
from .experiments.rectangles import RectangleTableConfig, run_rectangle_table
from .experiments.semantics import CaseStudyConfig, run_case_study
from .experiments.sweep import SweepConfig, run_sweep
from .report import run_summary, write_run_report
from .report.rectangle_report import rectangle_table_summary, write_rectangle_table
from .report.semantics_report import semantics_summary, write_semantics_report
from .report.sweep_report import sweep_summary, write_sweep_report

JOBS: dict[str, tuple[type, str]] = {"run": (RunConfig, "run Glauber chains and write a mixing report"),
                                     "sweep": (SweepConfig, "meeting times over a (temperature x length) grid, "
                                                            "C(tau) n log n fits, phase diagram, HTML report"),
                                     "semantics": (CaseStudyConfig, "the semantic case study on an English MLM: "
                                                                    "drift, traps, basins, topic attraction"),
                                     "rectangle-table": (RectangleTableConfig, "prevalence of incompatible "
                                                                               "conditionals across masked LMs")}


def config_keys(schema: Any, prefix: str = "") -> list[str]:
    """``section.key = default  (type)`` lines for every field of a config dataclass, for ``--help``."""
    lines = []
    for item in dataclasses.fields(schema):
        default = item.default_factory() if item.default_factory is not dataclasses.MISSING else item.default
        if dataclasses.is_dataclass(default):
            lines += config_keys(default, f"{prefix}{item.name}.")
        else:
            lines.append(f"  {prefix}{item.name} = {default!r}  ({item.type})")
    return lines


def check_out_dir(out: Path) -> None:
    """``--out`` must be a writable directory or creatable as one."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"--out {out} cannot be created: {error.strerror}") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise ConfigError(f"--out {out} is not writable")


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="mlm-dynamics", description=__doc__.split("\n")[0])
    commands = root.add_subparsers(dest="command", required=True)
    for name, (schema, help_text) in JOBS.items():
        job = commands.add_parser(name, help=help_text, formatter_class=argparse.RawDescriptionHelpFormatter,
                                  epilog="config keys (set in --config YAML or with --set key=value):\n"
                                         + "\n".join(config_keys(schema)))
        job.add_argument("--config", type=Path, default=None, help="YAML config (default: the built-in defaults)")
        job.add_argument("--out", type=Path, default=Path(f"runs/{name}"), help="output directory")
        job.add_argument("--resume", action="store_true", help="continue from the checkpoint in OUT")
        job.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                         help="override a config value, e.g. --set sampler.temperature=0.5")
        job.add_argument("--quiet", action="store_true", help="no progress bars")
        if name == "sweep":
            job.add_argument("--devices", type=int, default=1,
                             help="shard the cells over N processes (Lightning Fabric; GPUs or CPU cores)")
    return root


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    torch.set_num_threads(min(torch.get_num_threads(), 16))
    schema = JOBS[args.command][0]
    try:
        config: Any = load_config(schema, args.config, args.overrides)
        check_out_dir(args.out)
        with OutputLock(args.out):
            if args.command == "run":
                result = run_chains(config, args.out, resume=args.resume)
                write_run_report(result, args.out)
                summary = run_summary(result)
            elif args.command == "rectangle-table":
                table = run_rectangle_table(config)
                write_rectangle_table(config, table, args.out)
                summary = rectangle_table_summary(table)
            elif args.command == "semantics":
                studied = run_case_study(config)
                write_semantics_report(studied, args.out)
                summary = semantics_summary(studied)
            else:
                if args.devices > 1:
                    swept = run_sweep_sharded(config, args.out, devices=args.devices, resume=args.resume,
                                              progress=not args.quiet)
                else:
                    swept = run_sweep(config, args.out, resume=args.resume, progress=not args.quiet)
                write_sweep_report(swept, args.out)
                summary = sweep_summary(swept)
    except (ValueError, FileNotFoundError, ModuleNotFoundError, FloatingPointError) as error:  # ConfigError too
        print(f"mlm-dynamics: error: {error}", file=sys.stderr)
        return 2
    except RunInterrupted as interrupted:
        print(f"mlm-dynamics: {interrupted}", file=sys.stderr)
        return 130
    print(summary)
    print(f"report: {args.out / 'report.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
