"""Checkpoints that survive kills and bad disks, cannot run code, and refuse to resume the wrong run.

File format: the magic line ``MLMDYN-CHECKPOINT 2``, one JSON header line ``{"sha256", "fingerprint", "step"}``,
then a ``torch.save`` payload of tensors and plain containers. The SHA-256 covers everything that drives the resumed
computation: the header's fingerprints and step (canonical JSON) and the payload, so an edited step is refused like
an edited payload. Writing goes to a temporary file in the same
directory, is flushed and fsynced, then renamed over the old checkpoint (``os.replace`` is atomic), so a kill at
any moment leaves either the previous or the new checkpoint, never a truncated one. Loading verifies the SHA-256 of
the payload and the fingerprint (config and start state) before unpickling with ``weights_only=True``: tensors,
numbers, strings and containers only, so a checkpoint carrying a pickled callable is refused.

:class:`OutputLock` keeps two runs from writing into one output directory at the same time (``flock`` on
``OUT/.lock``, released by the kernel when the process dies, so a killed run leaves no stale lock).
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import torch

from .._io import atomic_write

FORMAT = 2
MAGIC = b"MLMDYN-CHECKPOINT %d\n" % FORMAT
OLD_MAGIC = b"MLMDYN-CHECKPOINT 1\n"  # format 1: its checksum left the header out


class CheckpointError(ValueError):
    """A checkpoint is missing, corrupted, unsafe or belongs to another run; the message names the file."""


def fingerprint(value: Any) -> str:
    """SHA-256 of a JSON-ready value or of tensors (their bytes, dtype and shape), as hex."""
    digest = hashlib.sha256()

    def feed(item: Any) -> None:
        if isinstance(item, torch.Tensor):
            tensor = item.detach().cpu().contiguous()
            digest.update(f"tensor:{tensor.dtype}:{tuple(tensor.shape)}:".encode())
            digest.update(tensor.numpy().tobytes())
        elif isinstance(item, dict):
            for key in sorted(item):
                digest.update(f"key:{key}:".encode())
                feed(item[key])
        elif isinstance(item, (list, tuple)):
            digest.update(f"seq:{len(item)}:".encode())
            for element in item:
                feed(element)
        else:
            digest.update(f"{type(item).__name__}:{json.dumps(item)}:".encode())

    feed(value)
    return digest.hexdigest()


def save_checkpoint(path: Path, payload: dict[str, Any], *, fingerprints: dict[str, str], step: int) -> None:
    """Atomically write ``payload`` (tensors and plain containers) with its hash and ``fingerprints``."""
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    data = buffer.getvalue()
    header = json.dumps({"sha256": _digest(fingerprints, step, data), "fingerprint": fingerprints, "step": step})
    try:
        atomic_write(path, MAGIC + header.encode() + b"\n" + data)
    except OSError as error:  # a full disk, a file-size limit: the previous checkpoint is untouched
        raise CheckpointError(f"checkpoint {path} could not be written at step {step}: {error.strerror or error}; "
                              "the previous checkpoint, if any, is kept") from None
    for stale in path.parent.glob(f".{path.name}.*.tmp"):  # torn writes of killed runs (the lock is ours)
        stale.unlink(missing_ok=True)


def _digest(fingerprints: dict[str, str], step: int, data: bytes) -> str:
    """SHA-256 of the header's fields (canonical JSON) and the payload: what a resume reads, all of it."""
    covered = json.dumps({"fingerprint": fingerprints, "step": step}, sort_keys=True).encode()
    return hashlib.sha256(covered + b"\n" + data).hexdigest()


@contextmanager
def restoring(path: Path) -> Iterator[None]:
    """Around the code that rebuilds a run from a verified payload: a payload of another layout (a checkpoint of
    another version, or one resealed by hand) is a :class:`CheckpointError` naming the file, not a KeyError."""
    try:
        yield
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, RuntimeError) as error:
        raise CheckpointError(f"checkpoint {path} holds a payload this version cannot resume ({type(error).__name__}: "
                              f"{error})") from None


def load_checkpoint(path: Path, *, fingerprints: dict[str, str], map_location: torch.device | str = "cpu"
                    ) -> tuple[dict[str, Any], int]:
    """``(payload, step)`` of a checkpoint written by :func:`save_checkpoint`, verified against ``fingerprints``."""
    if not path.is_file():
        raise CheckpointError(f"--resume: no checkpoint at {path}" if not path.exists() else
                              f"--resume: {path} is not a file")
    raw = path.read_bytes()
    if raw.startswith(OLD_MAGIC):
        raise CheckpointError(f"checkpoint {path} was written by an earlier mlm_dynamics (format 1, whose checksum "
                              "does not cover its header) and cannot be resumed safely; start the run again")
    if not raw.startswith(MAGIC):
        newer = re.match(rb"MLMDYN-CHECKPOINT (\d+)\n", raw)
        if newer is not None and int(newer.group(1)) > FORMAT:
            raise CheckpointError(f"checkpoint {path} is of format {int(newer.group(1))}, written by a newer "
                                  f"mlm_dynamics; this one resumes format {FORMAT}: upgrade mlm_dynamics to resume it")
        raise CheckpointError(f"checkpoint {path} is not an mlm_dynamics checkpoint (empty, truncated or another "
                              "program's file)")
    header_line, separator, data = raw[len(MAGIC):].partition(b"\n")
    try:
        header = json.loads(header_line)
        expected_hash, saved, step = header["sha256"], header["fingerprint"], _step(header["step"])
    except (ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"checkpoint {path} has a damaged header: {error}") from None
    if not separator or not isinstance(saved, dict) or _digest(saved, step, data) != expected_hash:
        raise CheckpointError(f"checkpoint {path} is corrupted: its header and content do not match the SHA-256 "
                              "stored in its header (truncated write or changed bytes)")
    differing = sorted(key for key in set(saved) | set(fingerprints) if saved.get(key) != fingerprints.get(key))
    if differing:
        raise CheckpointError(f"checkpoint {path} belongs to a different run: {', '.join(differing)} differ from "
                              "this run's (resume with the same config and start sequences)")
    try:
        payload = torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except Exception as error:  # unpickling refused: the file holds objects other than tensors and containers
        raise CheckpointError(f"checkpoint {path} holds objects that are not tensors or plain containers and is "
                              f"not loaded (it could run code): {error}") from None
    return payload, step


class RunInterrupted(Exception):
    """The run was interrupted (SIGINT, SIGTERM) inside a job; ``detail`` says where (`` at step 55``). The CLI adds
    what was saved and the command that continues."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(f"interrupted{detail}")
        self.detail = detail


def checkpoint_step(path: Path) -> int | None:
    """The step in a checkpoint's header (``None`` if the file is not a readable checkpoint)."""
    try:
        with path.open("rb") as handle:
            if handle.read(len(MAGIC)) != MAGIC:
                return None
            return _step(json.loads(handle.readline())["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _step(value: Any) -> int:
    """A header's step: an integer >= 0 (never a bool, float or string), else a ValueError saying so."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"its step must be an integer >= 0, got {value!r}")
    return value


class OutputLock:
    """Exclusive lock on ``OUT/.lock`` for the lifetime of a job; a second job into the same ``OUT`` is refused."""

    def __init__(self, out_dir: Path) -> None:
        self.path = out_dir / ".lock"
        self.handle: IO[str] | None = None

    def __enter__(self) -> OutputLock:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle = self.path.open("a+")
        except OSError as error:
            raise CheckpointError(f"--out {self.path.parent}: its lock file {self.path} cannot be opened "
                                  f"({error.strerror}); another user's run may hold it, choose another --out") from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            owner = handle.read().strip() or "another process"
            handle.close()
            raise CheckpointError(f"--out {self.path.parent} is in use by {owner}; wait for it or choose another "
                                  "--out") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        self.handle = handle
        return self

    def __exit__(self, *exc: object) -> None:
        if self.handle is not None:
            fcntl.flock(self.handle, fcntl.LOCK_UN)
            self.handle.close()
            self.handle = None


__all__ = ["MAGIC", "CheckpointError", "OutputLock", "RunInterrupted", "checkpoint_step", "fingerprint",
           "load_checkpoint", "restoring", "save_checkpoint"]
