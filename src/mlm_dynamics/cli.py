"""Command line: ``mlm-dynamics run|sweep|semantics|rectangle-table|parallel-decoding --config FILE --out DIR
[--set key=value ...]``, ``mlm-dynamics report LOGDIR``, ``mlm-dynamics presets``.

Argument parsing and printing only; the jobs are library functions in :mod:`mlm_dynamics.experiments`.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import shlex
import signal
import sys
import threading
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from .experiments import ConfigError, OutputLock, RunConfig, RunInterrupted, load_config, run_chains
from .experiments.checkpoint import checkpoint_step
from .experiments.common import machine_threads
from .experiments.config import PRESETS, field_default, presets
from .experiments.decoding import ParallelDecodingConfig, run_parallel_decoding
from .experiments.rectangles import RectangleTableConfig, run_rectangle_table
from .experiments.semantics import CaseStudyConfig, run_case_study
from .experiments.sweep import SweepConfig, run_sweep
from .models.cost import CostLedger, process_started
from .report.artifacts import CHECKPOINTS, KeptResults, claim_out, failure, held_by, written_into
from .report.compare_report import compare_summary, write_compare_report
from .report.decoding_report import parallel_decoding_summary, write_parallel_decoding
from .report.history_report import findings, write_history_report
from .report.logs import read_logs
from .report.rectangle_report import rectangle_table_summary, write_rectangle_table
from .report.run_report import run_summary, write_run_report
from .report.semantics_report import semantics_summary, write_semantics_report
from .report.sweep_report import sweep_summary, write_sweep_report

JOBS: dict[str, tuple[type, str]] = {"run": (RunConfig, "run Glauber chains and write a mixing report"),
                                     "sweep": (SweepConfig, "meeting times over a (temperature x length) grid, "
                                                            "C(tau) n log n fits, phase diagram, HTML report"),
                                     "semantics": (CaseStudyConfig, "the semantic case study on an English MLM: "
                                                                    "drift, traps, basins, topic attraction"),
                                     "rectangle-table": (RectangleTableConfig, "prevalence of incompatible "
                                                                               "conditionals across masked LMs"),
                                     "parallel-decoding": (ParallelDecodingConfig, "the error of committing K "
                                                                                   "positions at once, and the "
                                                                                   "confidence rules checked")}


def config_keys(schema: Any, prefix: str = "") -> list[str]:
    """``section.key = default  (type)`` lines for every field of a config dataclass, for ``--help``."""
    lines = []
    for item in dataclasses.fields(schema):
        default = field_default(item)
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


def out_path(text: str) -> Path:
    """``--out``: a directory name; an empty one would write into the current directory."""
    if not text.strip():
        raise argparse.ArgumentTypeError("--out must name a directory, got an empty string")
    return Path(text)


def interrupted_line(args: argparse.Namespace, argv: list[str], detail: str) -> str:
    """One line after Ctrl-C or SIGTERM: where it happened, what was saved, the command that continues."""
    name = CHECKPOINTS.get(args.command)
    found = [] if name is None else [args.out / name, *sorted(args.out.glob(f"shards/rank*/{name}"))]
    saved = [(path, checkpoint_step(path)) for path in found if path.is_file()]
    if not saved:
        keep = {"run": " (set run.checkpoint_every to keep progress)", "sweep": " (set checkpoint_every)"}
        return f"mlm-dynamics: interrupted{detail}; nothing was saved to resume from{keep.get(args.command, '')}"
    path, step = saved[0]
    where = f"last checkpoint at step {step}: {path}" if len(saved) == 1 else \
        f"{len(saved)} shards keep their last checkpoints under {args.out / 'shards'}"
    command = shlex.join(["mlm-dynamics", *argv, *([] if args.resume else ["--resume"])])
    return f"mlm-dynamics: interrupted{detail}; {where}; continue with: {command}"


def seconds(text: str) -> float:
    """``--budget``: a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text!r}")
    return value


def one_line(text: str) -> str:
    """A message on one line (YAML and transformers errors span several)."""
    return "; ".join(" ".join(line.split()) for line in text.splitlines() if line.strip())


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM ends a job like Ctrl-C: one line, exit 130


def parser() -> argparse.ArgumentParser:
    """The ``mlm-dynamics`` argument parser: one subcommand per job (with its config keys in ``--help``) and
    ``presets``."""
    root = argparse.ArgumentParser(prog="mlm-dynamics", description=__doc__.split("\n")[0])
    commands = root.add_subparsers(dest="command", required=True)
    for name, (schema, help_text) in JOBS.items():
        job = commands.add_parser(name, help=help_text, formatter_class=argparse.RawDescriptionHelpFormatter,
                                  epilog="config keys (set in --config YAML or with --set key=value):\n"
                                         + "\n".join(config_keys(schema)))
        job.add_argument("--config", "--preset", dest="config", default=None,
                         help="YAML config file, or the name of a packaged preset (`mlm-dynamics presets` lists them;"
                              " default: the built-in defaults)")
        job.add_argument("--out", type=out_path, default=Path(f"runs/{name}"), help="output directory")
        job.add_argument("--resume", action="store_true", help="continue from the checkpoint in OUT")
        job.add_argument("--overwrite", action="store_true",
                         help="replace the results of this job already in OUT (never another job's)")
        job.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                         help="override a config value, e.g. --set 'temperatures=[0.5, 1.0]'")
        job.add_argument("--quiet", action="store_true", help="no progress bars")
        if name in ("run", "sweep"):
            job.add_argument("--budget", type=seconds, default=None, metavar="SECONDS",
                             help="wall-clock seconds for the whole job: it stops at the deadline and writes the "
                                  "report of what it measured, saying what stays open (Ctrl-C does the same)")
        if name == "sweep":
            job.add_argument("--devices", type=int, default=1,
                             help="shard the cells over N processes per node (Lightning Fabric; GPUs or CPU cores)")
            job.add_argument("--num-nodes", type=int, default=1,
                             help="nodes of a cluster run started by its launcher (srun, torchrun); rank 0 merges")
    listing = commands.add_parser("presets", help="list the packaged presets, or print one (to copy and edit)")
    listing.add_argument("name", nargs="?", help="a preset to print")
    history = commands.add_parser("report", help="the mixing history of a training run, from its logs (Lightning CSV,"
                                                 " TensorBoard event files or an offline W&B run): report.html")
    history.add_argument("logdir", type=Path, help="the run's log directory")
    history.add_argument("--run", action="append", default=None,
                         help="the run to read when LOGDIR holds several (its folder, as the error lists them); "
                              "repeat it to overlay several runs on one page")
    history.add_argument("--out", type=out_path, default=None,
                         help="output directory (default: LOGDIR/mlm-dynamics-report)")
    history.add_argument("--overwrite", action="store_true", help="replace the history report already in OUT")
    compare = commands.add_parser("compare", help="several run or sweep reports side by side: report.html")
    compare.add_argument("runs", type=Path, nargs="+", help="the --out folders of two or more runs (or sweeps)")
    compare.add_argument("--out", type=out_path, default=Path("compare"),
                         help="output directory (default: ./compare)")
    compare.add_argument("--overwrite", action="store_true", help="replace the comparison already in OUT")
    return root


def presets_text(name: str | None) -> str:
    """The presets, one line each (name, job, what it runs), or the YAML of preset ``name``."""
    if name is not None:
        known = presets()
        if Path(name).parent != Path(".") or name.removesuffix(".yaml") not in known:
            raise ConfigError(f"presets: {name!r} is not a packaged preset (presets: {', '.join(known)}); a config "
                              "file of your own is checked by running its job with --config FILE")
        return (PRESETS / f"{name.removesuffix('.yaml')}.yaml").read_text(encoding="utf-8")
    lines = []
    for preset, job in presets().items():
        text = (PRESETS / f"{preset}.yaml").read_text(encoding="utf-8").splitlines()
        what = next((line.lstrip("# ") for line in text[1:] if line.startswith("#")), "")
        lines.append(f"{preset:<20} mlm-dynamics {job} --config {preset}\n{'':<20} {what}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code (0 done, 2 bad input, 130 interrupted)."""
    started = process_started() if argv is None else None  # the command itself: its bill counts the imports
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    args.started = started
    if args.command == "presets":
        try:
            print(presets_text(args.name), end="" if args.name else "\n")
        except ConfigError as error:
            print(f"mlm-dynamics: error: {error}", file=sys.stderr)
            return 2
        return 0
    if args.command == "report":
        return _history(args)
    if args.command == "compare":
        return _compare(args)
    torch.set_num_threads(machine_threads())
    schema = JOBS[args.command][0]
    previous = signal.signal(signal.SIGTERM, _interrupt) if threading.current_thread() is threading.main_thread() \
        else None
    try:
        if args.resume and args.command not in CHECKPOINTS:
            raise ConfigError(f"--resume: the {args.command} job keeps no checkpoint (it takes a few minutes); run it "
                              "again without --resume")
        config: Any = load_config(schema, args.config, args.overrides)
        check_out_dir(args.out)
        cluster = getattr(args, "num_nodes", 1) > 1  # every rank of a cluster run writes into the shared --out
        with nullcontext() if cluster else OutputLock(args.out):
            replace = claim_out(args.out, args.command, resume=args.resume, overwrite=args.overwrite,
                                unmarked=cluster)
            if replace and cluster:  # every rank of a cluster writes into --out itself: the old marker goes first
                _drop_marker(args.out)
            # elsewhere the old results stay until the new ones are whole
            with written_into(args.out, replace and not cluster, keep_staged=(RunInterrupted,)) as target:
                summary = _run_job(argparse.Namespace(**{**vars(args), "out": target}), config)
        if summary is None:  # another rank of a cluster run: global rank 0 writes the report
            return 0
    except KeptResults as kept:
        if isinstance(kept.error, RunInterrupted) and kept.staged is not None:  # continued where it was written
            in_staging = argparse.Namespace(**{**vars(args), "out": kept.staged})
            print(interrupted_line(in_staging, _out_replaced(argv, kept.staged), f"{kept.error.detail}; the results "
                                   f"already in --out {args.out} are kept as they were"), file=sys.stderr)
            return 130
        if not isinstance(kept.error, (ValueError, FileNotFoundError, ModuleNotFoundError, FloatingPointError,
                                       OSError)):
            raise kept.error from kept
        print(f"mlm-dynamics: error: {one_line(str(kept))}", file=sys.stderr)
        return 2
    except (ValueError, FileNotFoundError, ModuleNotFoundError, FloatingPointError) as error:  # ConfigError too
        print(f"mlm-dynamics: error: {one_line(str(error))}", file=sys.stderr)
        return 2
    except OSError as error:  # a full disk or a folder made unwritable during the run
        print(f"mlm-dynamics: error: {_write_failed(error, args.out)}", file=sys.stderr)
        return 2
    except RunInterrupted as interrupted:
        print(interrupted_line(args, argv, interrupted.detail), file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print(interrupted_line(args, argv, ""), file=sys.stderr)
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    print(summary)
    print(f"report: {args.out / 'report.json'}")
    return 0


def _out_replaced(argv: list[str], out: Path) -> list[str]:
    """``argv`` with ``--out`` set to ``out`` and ``--overwrite`` left out: the command that continues a replacing
    run that was interrupted, in the folder it was writing."""
    kept: list[str] = []
    skip = False
    for item in argv:
        if skip:
            skip = False
        elif item == "--out":
            skip = True
        elif not item.startswith("--out=") and item != "--overwrite":
            kept.append(item)
    return [*kept, "--out", str(out)]


def _write_failed(error: OSError, out: Path) -> str:
    """One line for an OSError while a job wrote into ``out`` directly (no ``--overwrite``): what failed, and that
    every file there is whole (each is written atomically) and the last checkpoint continues the run."""
    inside = error.filename is not None and Path(str(error.filename)).resolve().is_relative_to(out.resolve())
    if not inside:
        return one_line(f"{error.strerror or error}" + (f": {error.filename}" if error.filename else ""))
    resume = " (--resume continues from its last checkpoint once it can write)" if (
        any((out / name).is_file() for name in CHECKPOINTS.values())) else ""
    return f"--out {out}: {failure(error)}; its report is incomplete (no report.json; each file written is whole)" \
        f"{resume}"


def _drop_marker(out: Path) -> None:
    """Remove the marker of the finished results in ``out`` (a cluster run writes into ``out`` itself), so that a
    report cut short is never read as the old one or as whole."""
    held = held_by(out)
    if held is not None and held.finished:
        (out / held.file).unlink()


def _history(args: argparse.Namespace) -> int:
    """``mlm-dynamics report LOGDIR [--run A --run B]``: read the logs (one run, or several overlaid), write the
    history report, print where it is."""
    out = args.out if args.out is not None else args.logdir / "mlm-dynamics-report"
    try:
        names = list(dict.fromkeys(args.run)) if args.run else [None]
        runs = [read_logs(args.logdir, run=name) for name in names]
        check_out_dir(out)
        title = f"mlm_dynamics: mixing history of {args.logdir.name}"
        with OutputLock(out), written_into(out, claim_out(out, "history", overwrite=args.overwrite),
                                           staged=True) as target:
            reports = write_history_report(runs, target, title)
    except (ValueError, KeptResults) as error:  # ConfigError too
        print(f"mlm-dynamics: error: {one_line(str(error))}", file=sys.stderr)
        return 2
    for run, report in zip(runs, reports, strict=True):
        prefix = f"{report['run']}: " if len(runs) > 1 else ""
        print("\n".join(prefix + line for line in findings(report)))
        for note in run.notes:
            print(f"note: {prefix}{note}")
        print(f"read: run {report['run']} ({run.source}): {', '.join(run.files)}")
    print(f"report: {out / 'report.html'}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    """``mlm-dynamics compare RUN RUN ...``: one page with the runs side by side; print the verdicts and where it
    is."""
    try:
        check_out_dir(args.out)
        with OutputLock(args.out), \
                written_into(args.out, claim_out(args.out, "compare", overwrite=args.overwrite),
                             staged=True) as target:
            compared = write_compare_report(args.runs, target)
    except (ValueError, KeptResults) as error:
        print(f"mlm-dynamics: error: {one_line(str(error))}", file=sys.stderr)
        return 2
    print(compare_summary(compared))
    print(f"report: {args.out / 'report.html'}")
    return 0


def _raise_if_interrupted(stopped: str | None, out: Path) -> None:
    """After a job that Ctrl-C ended has written its report: the interruption, for the one line and exit 130."""
    if stopped is not None and stopped.startswith("interrupted"):
        raise RunInterrupted(stopped.removeprefix("interrupted") + f" (report of what was measured: "
                             f"{out / 'report.json'})")


def _run_job(args: argparse.Namespace, config: Any) -> str | None:
    """Run the job, write its report; the printed summary (``None`` on a cluster rank that does not merge)."""
    if args.command == "run":
        result = run_chains(config, args.out, resume=args.resume, budget=args.budget,
                            ledger=CostLedger(args.started), progress_bar=not args.quiet)
        report = write_run_report(result, args.out)
        _raise_if_interrupted(result.stopped, args.out)
        return f"{run_summary(result)}\n{report['cost']['line']}"
    if args.command == "rectangle-table":
        ledger = CostLedger(args.started)
        table = run_rectangle_table(config, ledger=ledger)
        report = write_rectangle_table(config, table, args.out, cost=ledger)
        return f"{rectangle_table_summary(table)}\n{report['cost']['line']}"
    if args.command == "parallel-decoding":
        ledger = CostLedger(args.started)
        results = run_parallel_decoding(config, ledger=ledger)
        report = write_parallel_decoding(config, results, args.out, cost=ledger)
        return f"{parallel_decoding_summary(results)}\n{report['cost']['line']}"
    if args.command == "semantics":
        studied = run_case_study(config, ledger=CostLedger(args.started))
        report = write_semantics_report(studied, args.out)
        return f"{semantics_summary(studied)}\n{report['cost']['line']}"
    if args.devices < 1 or args.num_nodes < 1:
        raise ConfigError(f"--devices and --num-nodes must be >= 1, got {args.devices}, {args.num_nodes}")
    cores = os.cpu_count() or 1
    if args.devices > cores and not torch.cuda.is_available():
        print(f"mlm-dynamics: warning: --devices {args.devices} is above this machine's {cores} CPU cores: the "
              "processes share them and the sweep is slower, not faster", file=sys.stderr)
    if args.devices > 1 or args.num_nodes > 1:
        from .launch import run_sweep_sharded  # Lightning is loaded only to launch processes

        if args.budget is not None:
            raise ConfigError("--budget: a sharded sweep has no common clock yet; run it on one process, or set "
                              "grid.max_steps")
        swept = run_sweep_sharded(config, args.out, devices=args.devices, num_nodes=args.num_nodes,
                                  resume=args.resume, progress=not args.quiet)
        if swept is None:
            return None
    else:
        swept = run_sweep(config, args.out, resume=args.resume, progress=not args.quiet,
                          ledger=CostLedger(args.started), budget=args.budget)
    report = write_sweep_report(swept, args.out)
    _raise_if_interrupted(swept.stopped, args.out)
    return f"{sweep_summary(swept)}\n{report['cost']['line']}"


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["CHECKPOINTS", "JOBS", "check_out_dir", "config_keys", "interrupted_line", "main", "one_line", "out_path",
           "parser"]
