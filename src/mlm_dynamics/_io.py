"""Atomic file writes: a temporary file in the target's directory, flushed and fsynced, then renamed over it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import BinaryIO


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a kill at any moment leaves the old file or the new one, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(temporary, 0o666 & ~umask)  # what open() would give, not mkstemp's 0600
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError as error:  # a full disk: named by the file it was writing, not the temporary's descriptor
        Path(temporary).unlink(missing_ok=True)
        raise OSError(error.errno, error.strerror, str(path)) from error
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself reaches the disk
    finally:
        os.close(directory)


class AppendLog:
    """A file that only grows: records are appended and made durable at :meth:`sync`, which returns the length a
    checkpoint stores. A resumed run opens it at that length (``resume_at``), dropping whatever a run wrote after its
    last checkpoint, so the file always continues the checkpoint. A save then costs the records since the last one,
    not the whole history.

    Args:
        path: the file; created (or emptied) with ``header`` when ``resume_at`` is ``None``.
        resume_at: the length stored by the checkpoint to continue from.
    """

    def __init__(self, path: Path, *, header: bytes = b"", resume_at: int | None = None) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.handle: BinaryIO
        if resume_at is None:
            self.handle = path.open("wb")
            self.handle.write(header)
            return
        length = path.stat().st_size if path.is_file() else -1
        if length < resume_at:
            raise ValueError(f"{path} holds {max(length, 0)} bytes, fewer than the {resume_at} its checkpoint "
                             "recorded: the records of this run are missing or were cut")
        self.handle = path.open("r+b")
        self.handle.truncate(resume_at)
        self.handle.seek(resume_at)

    def append(self, data: bytes) -> None:
        self.handle.write(data)

    def sync(self) -> int:
        """Flush and fsync; the length so far."""
        self.handle.flush()
        os.fsync(self.handle.fileno())
        return self.handle.tell()

    def close(self) -> None:
        self.handle.close()


__all__ = ["AppendLog", "atomic_write"]
