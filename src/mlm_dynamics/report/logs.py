"""Read a training run's logged diagnostics back: Lightning CSV logs, TensorBoard event files, offline W&B runs.

Each reader returns a :class:`LoggedRun`: every scalar series as ``{key: [(step, value), ...]}`` (sorted by step,
the last value of a step kept) and the latest image of each tag (PNG bytes). Keys are normalised to the
callbacks' ``{group}/{stage}/{name}``: a logger's own prefix (the Hugging Face integrations' ``train/``) is
dropped, so one fit logged to the three formats reads back as the same series.

No TensorBoard or W&B installation is needed to read: event files are TFRecord files of ``Event`` protos (read
with tensorboardX's protos), a ``.wandb`` file is a LevelDB-style log of ``Record`` protos (read with wandb's
protos), parsed here without their services.
"""

from __future__ import annotations

import csv
import json
import math
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from ..probes.keys import PROBES, key_regex

GROUPS = tuple(probe.group for probe in PROBES)


# a declared key at the end of a logged name, after whatever prefix a logger or the user put before it
_DECLARED = [rf"{p.group}/(?:train|val|predict)/{key_regex(k.name)}" for p in PROBES for k in p.keys]
_KEY = re.compile(r"(?:^|/)(" + "|".join(_DECLARED) + r")$")


@dataclass
class LoggedRun:
    """What a run logged: ``scalars`` per normalised key, ``images`` (latest PNG per tag) and the ``source`` format."""

    source: str
    scalars: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    images: dict[str, bytes] = field(default_factory=dict)

    def add(self, key: str, step: int, value: float) -> None:
        """One logged value, if ``key`` is a diagnostics key (others, the module's own loss say, are skipped)."""
        match = _KEY.search(key)
        if match is not None and math.isfinite(value):
            self.scalars.setdefault(match.group(1), []).append((int(step), float(value)))

    def finish(self) -> LoggedRun:
        """Sort each series by step, keeping the last value logged at a step."""
        self.scalars = {key: sorted(dict(series).items()) for key, series in sorted(self.scalars.items())}
        return self


def read_logs(folder: Path) -> LoggedRun:
    """The diagnostics logged under ``folder``: a Lightning CSV log (``metrics.csv``), TensorBoard event files
    (``events.out.tfevents.*``) or an offline W&B run (``*.wandb``), found anywhere below it; a ValueError naming
    the folder when none is there or when several formats are (point at one run)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"LOGDIR: {folder} is not a directory")
    found = {"csv": sorted(folder.rglob("metrics.csv")), "tensorboard": sorted(folder.rglob("events.out.tfevents.*")),
             "wandb": sorted(folder.rglob("*.wandb"))}
    kinds = [kind for kind, files in found.items() if files]
    if not kinds:
        raise ValueError(f"LOGDIR: no metrics.csv, TensorBoard event file or offline W&B run under {folder}")
    if len(kinds) > 1:
        raise ValueError(f"LOGDIR: {folder} holds several log formats ({', '.join(kinds)}); point at one of them")
    run = LoggedRun(kinds[0])
    reader = {"csv": _read_csv, "tensorboard": _read_events, "wandb": _read_wandb}[kinds[0]]
    for file in found[kinds[0]]:
        reader(file, run)
    return run.finish()


def _read_csv(path: Path, run: LoggedRun) -> None:
    with path.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            step = row.get("step")
            if not step:
                continue
            for key, text in row.items():
                if key != "step" and text not in (None, ""):
                    run.add(key, int(float(step)), float(text))


def tfrecords(path: Path) -> list[bytes]:
    """The records of a TFRecord file: ``uint64 length, uint32 crc, data, uint32 crc`` each (checksums not
    verified); a record cut short by a writer that was killed ends the list."""
    data, records, offset = path.read_bytes(), [], 0
    while offset + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, offset)
        start, end = offset + 12, offset + 12 + length
        if end + 4 > len(data):
            break
        records.append(data[start:end])
        offset = end + 4
    return records


def _read_events(path: Path, run: LoggedRun) -> None:
    from tensorboardX.proto.event_pb2 import Event

    for record in tfrecords(path):
        event = Event.FromString(record)
        for value in event.summary.value:
            kind = value.WhichOneof("value")
            if kind == "simple_value":
                run.add(value.tag, event.step, value.simple_value)
            elif kind == "tensor" and (value.tensor.float_val or value.tensor.double_val):
                run.add(value.tag, event.step, (value.tensor.float_val or value.tensor.double_val)[0])
            elif kind == "image":
                run.images[value.tag] = value.image.encoded_image_string


def leveldb_records(path: Path) -> list[bytes]:
    """The records of a ``.wandb`` file: a 7-byte header (``:W&B``, magic, version), then 32 KiB blocks of
    chunks with a 7-byte header each (crc32c, length, type: full, first, middle, last), LevelDB's log format."""
    data = path.read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path}: not a W&B run file")
    block, records, pending, offset = 32768, [], b"", 7
    while offset + 7 <= len(data):
        if block - offset % block < 7:  # a block's tail too short for a header is padding
            offset += block - offset % block
            continue
        _, length, kind = struct.unpack_from("<IHB", data, offset)
        chunk = data[offset + 7: offset + 7 + length]
        if len(chunk) < length or kind not in (1, 2, 3, 4):
            break  # a record cut short by a writer that was killed
        offset += 7 + length
        if kind == 1:
            records.append(chunk)
        elif kind == 2:
            pending = chunk
        else:
            pending += chunk
            if kind == 4:
                records.append(pending)
    return records


def _read_wandb(path: Path, run: LoggedRun) -> None:
    from wandb.proto.wandb_internal_pb2 import Record  # type: ignore[attr-defined]  # generated, untyped

    for data in leveldb_records(path):
        record = Record.FromString(data)
        if record.WhichOneof("record_type") != "history":
            continue
        row = {}
        for item in record.history.item:
            try:
                row[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
            except json.JSONDecodeError:
                continue
        # the trainer's step, which Lightning and the Hugging Face integration log beside each row; W&B's own
        # ``_step`` counts rows
        step = row.get("trainer/global_step", row.get("train/global_step", record.history.step.num))
        for key, value in row.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                run.add(key, int(step), value)
    media = path.parent / "files" / "media" / "images"
    found = sorted(media.glob("**/*.png"), key=lambda path: _step_of(path.stem)) if media.is_dir() else []
    for image in found:  # in step order: the latest image of a tag is kept
        relative = image.relative_to(media).with_suffix("").as_posix()
        run.images[re.sub(r"_\d+_[0-9a-f]+$", "", relative)] = image.read_bytes()  # {key}_{step}_{hash}.png


def _step_of(stem: str) -> int:
    """The step in a W&B media file name ``{key}_{step}_{hash}``."""
    match = re.search(r"_(\d+)_[0-9a-f]+$", stem)
    return int(match.group(1)) if match else -1


__all__ = ["GROUPS", "LoggedRun", "leveldb_records", "read_logs", "tfrecords"]
