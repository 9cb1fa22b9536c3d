"""What an output folder holds, and the rule that no command writes over another job's results.

Every file a reader takes carries ``"artifact": {"job": JOB, "version": SCHEMA_VERSION}`` (``report.json`` of the
jobs, ``compare.json`` of ``compare``, ``history.json`` of ``report``), written last, so a folder holds a job's
results exactly when its marker file is there. Reports written before the marker existed are recognised by their
sections (a run's ``mixing`` and ``chains``, a sweep's ``sweep``). A checkpoint without a report is an unfinished run.
"""

from __future__ import annotations

import json
import os
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


def claim_out(folder: Path, job: str, *, resume: bool = False, overwrite: bool = False) -> bool:
    """Check that ``job`` may write into ``folder`` before any work: a ValueError naming what the folder holds when
    it holds another job's results (always refused: choose another ``--out``), or results of the same job without
    ``overwrite`` or ``resume`` (which continues that run from its checkpoint). Returns whether the job replaces
    results already there (``overwrite``): it must then write them whole elsewhere first (:func:`replacing`)."""
    held = held_by(folder)
    if held is None:
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


class KeptResults(Exception):
    """A replacement that did not finish: ``folder``'s results are kept as they were; ``staged`` holds what the
    replacing job wrote when it is worth keeping (an interrupted run's checkpoint), else ``None``."""

    def __init__(self, error: BaseException, folder: Path, staged: Path | None) -> None:
        where = f"; what this job wrote is in {staged}" if staged is not None else ""
        super().__init__(f"{error}; the results already in --out {folder} are kept as they were{where}")
        self.error, self.folder, self.staged = error, folder, staged


@contextmanager
def replacing(folder: Path, *, keep_staged: tuple[type[BaseException], ...] = ()) -> Iterator[Path]:
    """Replace ``folder``'s results only by whole ones: yields a fresh sibling folder (same file system) to write
    into; when the block ends normally the staged files take their place (the old folder renamed aside, its other
    entries, files the new job did not write, moved into the new one, then the old one removed), so a reader sees
    the old results or the new ones, never a mix. Any exception leaves ``folder`` as it was and is raised as
    :class:`KeptResults` saying so; the staged folder is removed, or kept and named for the exceptions in
    ``keep_staged`` (an interrupted run: its report and checkpoint). Cost: two renames."""
    staging = folder.parent / f".{folder.name}.staging-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        yield staging
    except BaseException as error:
        keep = isinstance(error, keep_staged)
        if not keep:
            shutil.rmtree(staging, ignore_errors=True)
        if isinstance(error, (KeyboardInterrupt, SystemExit)):
            raise
        raise KeptResults(error, folder, staging if keep else None) from error
    aside = folder.parent / f".{folder.name}.replaced-{os.getpid()}"
    folder.rename(aside)
    staging.rename(folder)
    for entry in aside.iterdir():  # the user's own files, and old ones the new job does not write, stay
        if entry.name != ".lock" and not (folder / entry.name).exists():
            entry.rename(folder / entry.name)
    shutil.rmtree(aside, ignore_errors=True)


def written_into(folder: Path, replace: bool, *,
                 keep_staged: tuple[type[BaseException], ...] = ()) -> AbstractContextManager[Path]:
    """The folder a command writes its results into: ``folder`` itself, or with ``replace`` (what
    :func:`claim_out` returned) a staged sibling that takes its place only when whole (:func:`replacing`)."""
    return replacing(folder, keep_staged=keep_staged) if replace else nullcontext(folder)


__all__ = ["CHECKPOINTS", "MARKERS", "NOUNS", "SCHEMA_VERSION", "Held", "KeptResults", "artifact", "claim_out",
           "held_by", "job_in", "replacing", "written_into"]
