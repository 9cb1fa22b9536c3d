"""What an output folder holds, and the rule that no command writes over another job's results.

Every file a reader takes carries ``"artifact": {"job": JOB, "version": SCHEMA_VERSION}`` (``report.json`` of the
jobs, ``compare.json`` of ``compare``, ``history.json`` of ``report``), written last, so a folder holds a job's
results exactly when its marker file is there. Reports written before the marker existed are recognised by their
sections (a run's ``mixing`` and ``chains``, a sweep's ``sweep``). A checkpoint without a report is an unfinished run.
Any other file a command writes (:data:`WRITTEN`) without its marker or checkpoint, and any file no command writes (the
user's own), keeps every command out of the folder: only a folder that is new, empty, or holds the same job's results
is written into.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
"""The version of the report schema this package writes and reads (:mod:`mlm_dynamics.report.schema`)."""

MARKERS = {"report.json": None, "compare.json": "compare", "history.json": "history"}
"""The file each command writes last, and the job it marks (``None``: read from the file, one per job)."""

CHECKPOINTS = {"run": "checkpoint.pt", "sweep": "sweep-checkpoint.pt"}
"""The checkpoint each resumable job keeps in its folder (``--resume`` reads it)."""

WRITTEN = frozenset({"report.json", "report.html", "figures", "trajectory.csv", "cells.csv", "table.csv",
                     "compare.json", "history.json", "checkpoint.pt", "sweep-checkpoint.pt", "semantics.bin", "shards"})
"""Every entry a command writes into its ``--out`` (besides its ``.lock``, and the hidden temporaries of its atomic
writes, ``.NAME.*.tmp``)."""

NOUNS = {"compare": "comparison", "history": "history report", "rectangle-table": "rectangle table",
         "parallel-decoding": "parallel-decoding job", "semantics": "semantics case study"}
"""How the messages name a job's results where its command's name is not a noun."""


def artifact(job: str) -> dict[str, Any]:
    """The marker a ``job``'s result file carries: ``{"job": job, "version": SCHEMA_VERSION}``."""
    return {"job": job, "version": SCHEMA_VERSION}


@dataclass(frozen=True)
class Held:
    """What an output folder holds: the ``job`` that wrote it (``None`` if it cannot be told), the ``file`` that shows
    it, and whether the job ``finished`` (a result) or left a checkpoint only."""

    job: str | None
    file: str
    finished: bool

    def text(self) -> str:
        """``"the results of a run (report.json)"``, ``"an unfinished sweep (sweep-checkpoint.pt)"``."""
        if self.job is None:
            return f"another job's results ({self.file})"
        noun = NOUNS.get(self.job, self.job)
        return f"an unfinished {noun} ({self.file})" if not self.finished else f"the results of a {noun} ({self.file})"


def job_in(report: Any) -> str | None:
    """The job that wrote a parsed result file: its marker, or for reports older than the marker the sections only
    a run or a sweep writes; ``None`` if neither tells."""
    if not isinstance(report, dict):
        return None
    marker = report.get("artifact")
    if isinstance(marker, dict) and isinstance(marker.get("job"), str):
        return str(marker["job"])
    if "mixing" in report and "chains" in report:
        return "run"
    if "sweep" in report:
        return "sweep"
    return None


def held_by(folder: Path) -> Held | None:
    """What ``folder`` holds (see the module docstring); ``None`` when it holds no job's results or checkpoint."""
    for name, job in MARKERS.items():
        path = folder / name
        if path.is_file():
            if job is None:
                try:
                    job = job_in(json.loads(path.read_bytes()))
                except (OSError, ValueError, RecursionError):
                    job = None
            return Held(job, name, finished=True)
    for job, name in CHECKPOINTS.items():
        if (folder / name).is_file():
            return Held(job, name, finished=False)
    return None


def _is_written(name: str) -> bool:
    """Whether an entry of an output folder is one a command writes (:data:`WRITTEN`, its lock, a temporary)."""
    temporary = re.fullmatch(r"\.(.+)\.\w+\.tmp", name)  # atomic_write's ".NAME.RANDOM.tmp"
    return name == ".lock" or name in WRITTEN or (temporary is not None and temporary.group(1) in WRITTEN)


def strays(folder: Path) -> tuple[list[str], list[str]]:
    """``(written, foreign)``: the entries of ``folder`` a command writes (:data:`WRITTEN`, lock left out) and those
    no command writes, sorted; both empty for a new or empty folder. Cost: one directory listing."""
    names = sorted(entry.name for entry in folder.iterdir()) if folder.is_dir() else []
    return [name for name in names if _is_written(name) and name != ".lock"], \
        [name for name in names if not _is_written(name)]


def _listed(names: list[str], most: int = 4) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def claim_out(folder: Path, job: str, *, resume: bool = False, overwrite: bool = False,
              unmarked: bool = False) -> bool:
    """Check that ``job`` may write into ``folder`` before any work: a ValueError naming what the folder holds when
    it holds another job's results (always refused: choose another ``--out``), results of the same job without
    ``overwrite`` or ``resume`` (which continues that run from its checkpoint), or no job's results but files:
    a command's without their marker (a job cut short, or results whose report was removed) or the user's own
    (never written over, whatever the flags; ``unmarked`` admits the former with ``overwrite``: a cluster run's
    nodes, whose first removed the marker of the results they replace). Returns whether the job replaces results
    already there (``overwrite``): it must then write them whole elsewhere first (:func:`replacing`)."""
    held = held_by(folder)
    if held is None:
        written, foreign = strays(folder)
        if foreign:
            raise ValueError(f"--out {folder} holds files no mlm-dynamics command wrote ({_listed(foreign)}); a "
                             f"{NOUNS.get(job, job)} is written only into a new or empty folder, or over results of "
                             "its own: choose another --out")
        if written and not (unmarked and overwrite):
            raise ValueError(f"--out {folder} holds {_listed(written)} but no finished results or checkpoint (a job "
                             "cut short, or results whose report.json was removed), which no command writes over: "
                             "move them away or choose another --out")
        return False
    if held.job != job:
        raise ValueError(f"--out {folder} holds {held.text()}; a {NOUNS.get(job, job)} never writes over another "
                         "job's results: choose another --out")
    if resume:  # the same run, continued: its report is replaced by a more complete one
        return False
    if overwrite:
        return True
    options = "add --resume to continue it, --overwrite to start again" if not held.finished else \
        "add --overwrite to replace it" + (", --resume to continue it" if job in CHECKPOINTS else "")
    raise ValueError(f"--out {folder} holds {held.text()}; {options}, or choose another --out")


def failure(error: BaseException) -> str:
    """What went wrong, in words: an OSError by its reason and file (``"No space left on device writing
    figures/x.png"``, the staging folder left out of the path), anything else as it says."""
    if isinstance(error, OSError) and error.strerror:
        name = Path(str(error.filename)).name if error.filename else None
        return f"{error.strerror}" + (f" writing {name}" if name else "")
    return str(error)


class KeptResults(Exception):
    """A job that did not finish writing: ``folder`` is as it was (its results kept, or nothing written into it
    when it held none); ``staged`` holds what the job wrote when it is worth keeping (an interrupted run's
    checkpoint), else ``None``."""

    def __init__(self, error: BaseException, folder: Path, staged: Path | None, *, replaced: bool = True) -> None:
        where = f"; what this job wrote is in {staged}" if staged is not None else ""
        kept = f"the results already in --out {folder} are kept as they were" if replaced else \
            f"nothing was written into --out {folder}"
        super().__init__(f"{failure(error)}; {kept}{where}")
        self.error, self.folder, self.staged = error, folder, staged


@contextmanager
def replacing(folder: Path, *, keep_staged: tuple[type[BaseException], ...] = (),
              replaced: bool = True) -> Iterator[Path]:
    """Write ``folder``'s results only whole: yields a fresh sibling folder (same file system) to write into; when
    the block ends normally the staged files take their place (the old folder renamed aside, its other entries,
    files the new job did not write and the held ``.lock``, moved into the new one, then the old one removed), so a
    reader sees the old results (or none) or the new ones, never a mix or a part. Any exception, a full disk
    included, leaves ``folder`` as it was and is raised as :class:`KeptResults` saying so (``replaced``: whether
    ``folder`` held results, for its words); the staged folder is removed, or kept and named for the exceptions in
    ``keep_staged`` (an interrupted run: its report and checkpoint). Cost: two renames."""
    staging = folder.parent / f".{folder.name}.staging-{os.getpid()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
    except OSError as error:  # an unwritable parent: nothing written anywhere
        raise KeptResults(error, folder, None, replaced=replaced) from error
    try:
        yield staging
    except BaseException as error:
        keep = isinstance(error, keep_staged)
        if not keep:
            shutil.rmtree(staging, ignore_errors=True)
        if isinstance(error, (KeyboardInterrupt, SystemExit)):
            raise
        raise KeptResults(error, folder, staging if keep else None, replaced=replaced) from error
    aside = folder.parent / f".{folder.name}.replaced-{os.getpid()}"
    folder.rename(aside)
    staging.rename(folder)
    for entry in aside.iterdir():  # the user's own files, old ones the new job does not write, and the lock, stay
        if not (folder / entry.name).exists():
            entry.rename(folder / entry.name)
    shutil.rmtree(aside, ignore_errors=True)


def written_into(folder: Path, replace: bool, *, staged: bool = False,
                 keep_staged: tuple[type[BaseException], ...] = ()) -> AbstractContextManager[Path]:
    """The folder a command writes its results into: ``folder`` itself, or with ``replace`` (what
    :func:`claim_out` returned) or ``staged`` (a command without a checkpoint, whose results are written at once:
    ``compare``, ``report``) a staged sibling that takes its place only when whole (:func:`replacing`)."""
    if replace or staged:
        return replacing(folder, keep_staged=keep_staged, replaced=replace)
    return nullcontext(folder)


__all__ = ["CHECKPOINTS", "MARKERS", "NOUNS", "SCHEMA_VERSION", "WRITTEN", "Held", "KeptResults", "artifact",
           "claim_out", "failure", "held_by", "job_in", "replacing", "strays", "written_into"]
