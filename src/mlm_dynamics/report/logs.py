"""Read a training run's logged diagnostics back: Lightning CSV logs, TensorBoard event files, offline W&B runs.

Each reader returns a :class:`LoggedRun`: every scalar series as ``{key: [(step, value), ...]}`` (sorted by step,
the last value of a step kept) and the latest image of each tag (PNG bytes). Keys are normalised to the
callbacks' ``{group}/{stage}/{name}``: a logger's own prefix (the Hugging Face integrations' ``train/``) is
dropped, so one fit logged to the three formats reads back as the same series.

No TensorBoard or W&B installation is needed to read: event files are TFRecord files of ``Event`` protos (read
with tensorboardX's protos), a ``.wandb`` file is a LevelDB-style log of ``Record`` protos (read with wandb's
protos), parsed here without their services.

**Damaged logs are refused, never read as findings**: every TFRecord and LevelDB checksum is verified, a record that
does not decode, a CSV cell that is not a number or a CSV line cut short is a ValueError naming the file and the
record or line. A record cut short at the very end of a TensorBoard or W&B file (the writer was killed while
writing it) is the one damage that is read past: everything before it is intact, and :attr:`LoggedRun.notes` says
so. A folder with no diagnostics key is an error, not an empty report; a folder holding several runs (Lightning's
``version_*``, several W&B runs) is read only with ``run=`` naming one of them.
"""

from __future__ import annotations

import csv
import json
import math
import re
import struct
import zlib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from ..probes.base import DRAWS_FILE
from ..probes.keys import PROBES, key_regex, value_range

GROUPS = tuple(probe.group for probe in PROBES)


# a declared key at the end of a logged name, after whatever prefix a logger or the user put before it
_DECLARED = {rf"{p.group}/(?:train|val|predict)/{key_regex(k.name)}": k for p in PROBES for k in p.keys}
_KEY = re.compile(r"(?:^|/)(" + "|".join(_DECLARED) + r")$")


@cache
def _range_of(name: str) -> tuple[float, float]:
    """The values the declared key ``name`` (normalised) can take: :func:`value_range` of the key it matches, found
    once per name."""
    return next(value_range(key) for pattern, key in _DECLARED.items() if re.fullmatch(pattern, name))


@dataclass
class LoggedRun:
    """What a run logged: ``scalars`` per normalised key, ``images`` (latest PNG per tag), the ``source`` format,
    the run's ``name`` (its folder, relative to the one read), the ``files`` read, ``notes`` on what was read
    past (a record cut short at a file's end) and the ``draws`` the callbacks wrote beside the log
    (:data:`~mlm_dynamics.probes.base.DRAWS_FILE`: one record per run, ``step``, ``key`` and the sequences)."""

    source: str
    scalars: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    images: dict[str, bytes] = field(default_factory=dict)
    name: str = ""
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    draws: list[dict[str, Any]] = field(default_factory=list)

    def add(self, key: str, step: int, value: float, where: str = "") -> None:
        """One logged value, if ``key`` is a diagnostics key (others, the module's own loss say, are skipped); a
        ValueError naming ``where`` (the file and line or record) and the key when the step is negative or the value
        is one its unit cannot take (a probability of 7, a negative meeting time: :func:`value_range`)."""
        match = _KEY.search(key)
        if match is None or not math.isfinite(value):
            return
        name = match.group(1)
        low, high = _range_of(name)
        if step < 0 or not low <= value <= high:
            what = f"step {step} is negative" if step < 0 else f"{value!r} is outside [{low:g}, {high:g}]"
            raise ValueError(f"{where}: {key} at step {step}: {what}, which no run logs (a damaged or edited log?)")
        self.scalars.setdefault(name, []).append((int(step), float(value)))

    def finish(self) -> LoggedRun:
        """Sort each series by step, keeping the last value logged at a step; a ValueError naming the files and the
        key when a median meeting time (or its lower bound) is above the pairs' budget logged at the same step, or
        logged without that budget (every probe logs it beside them: without it no value can be checked)."""
        self.scalars = {key: sorted(dict(series).items()) for key, series in sorted(self.scalars.items())}
        for key, series in self.scalars.items():
            match = re.fullmatch(r"(mixing/\w+/(?:lagged/)?)meeting_time_median(?:_lower_bound)?", key)
            if match is None:
                continue
            budget = dict(self.scalars.get(match.group(1) + "budget", []))
            for step, value in series:
                if step not in budget:
                    raise ValueError(f"{', '.join(self.files)}: {key} at step {step} is logged without the pairs' "
                                     f"budget ({match.group(1)}budget) at that step, which every run logs beside it "
                                     "(a damaged or edited log?)")
                if value > budget[step]:
                    raise ValueError(f"{', '.join(self.files)}: {key} at step {step}: {value:g} is above the pairs' "
                                     f"budget {budget[step]:g} ({match.group(1)}budget), which no "
                                     "run logs (a damaged or edited log?)")
        return self


def read_logs(folder: Path, run: str | None = None) -> LoggedRun:
    """The diagnostics logged under ``folder``: a Lightning CSV log (``metrics.csv``), TensorBoard event files
    (``events.out.tfevents.*``) or an offline W&B run (``*.wandb``), found anywhere below it.

    One run is a folder holding log files (a resumed TensorBoard run writes several event files into one); with
    several, ``run`` names the one to read (its folder relative to ``folder``, or its last component). A ValueError
    names the folder when none is there, when several formats or runs are (listing them), when nothing read is a
    diagnostics key, and names the file and record or line of a damaged log (see the module docstring)."""
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
    runs: dict[str, list[Path]] = {}
    for file in found[kinds[0]]:
        runs.setdefault(file.parent.relative_to(folder).as_posix(), []).append(file)
    name = _pick_run(folder, runs, run)
    logged = LoggedRun(kinds[0], name=name, files=[str(f) for f in runs[name]])
    reader = {"csv": _read_csv, "tensorboard": _read_events, "wandb": _read_wandb}[kinds[0]]
    for file in runs[name]:
        try:
            reader(file, logged)
        except OSError as error:  # unreadable (permissions), vanished, a directory named like a log
            raise ValueError(f"{file}: cannot be read ({error.strerror or error})") from None
    for draws in (folder / name / DRAWS_FILE, folder / name / "files" / DRAWS_FILE):  # W&B: the run's files/
        if draws.is_file():
            logged.files.append(str(draws))
            logged.draws = _read_draws(draws)
    if not logged.scalars:
        files = ", ".join(logged.files)
        raise ValueError(f"LOGDIR: no diagnostics keys found in {files} (nothing logged under mixing/, rectangle/, "
                         "influence/, drift/ or traps/: were the callbacks attached and due?)")
    return logged.finish()


def _read_draws(path: Path) -> list[dict[str, Any]]:
    """The records of a draws file, the last one logged at each (step, key) kept (a resumed run writes again the
    runs after its checkpoint); a line that is not such a record is refused, naming the file and line."""
    kept: dict[tuple[int, str], dict[str, Any]] = {}
    try:
        text_of_file = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: cannot be read ({getattr(error, 'strerror', None) or error})") from None
    for line, text in enumerate(text_of_file.splitlines(), 1):
        try:
            record = json.loads(text)
            valid = (isinstance(record, dict) and isinstance(record.get("step"), int)
                     and isinstance(record.get("key"), str) and isinstance(record.get("draws"), list)
                     and all(isinstance(group, dict) and all(isinstance(v, str) for v in group.values())
                             for group in record["draws"]))
        except json.JSONDecodeError:
            valid = False
        if not valid:
            raise ValueError(f"{path}, line {line}: not a draws record (JSON with step, key and draws)")
        kept[(record["step"], record["key"])] = record
    return [kept[k] for k in sorted(kept)]


def _pick_run(folder: Path, runs: dict[str, list[Path]], run: str | None) -> str:
    """The run to read: the only one, or the one ``run`` names (whole relative folder or its last component)."""
    listed = ", ".join(name or "." for name in runs)
    if run is None:
        if len(runs) > 1:
            raise ValueError(f"LOGDIR: {folder} holds {len(runs)} runs ({listed}); name one with --run NAME")
        return next(iter(runs))
    chosen = [name for name in runs if run in (name, name.rsplit("/", 1)[-1], name or ".")]
    if len(chosen) != 1:
        raise ValueError(f"--run: {run!r} names {'no' if not chosen else 'more than one'} run under {folder} "
                         f"(runs: {listed})")
    return chosen[0]


def _read_csv(path: Path, run: LoggedRun) -> None:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: damaged, not a text metrics log (byte {error.start} is not UTF-8)") from None
    if "\x00" in text:
        raise ValueError(f"{path}, line {text[:text.index(chr(0))].count(chr(10)) + 1}: damaged, a NUL byte in a text "
                         "metrics log")
    if text and not text.endswith("\n"):
        raise ValueError(f"{path}, line {text.count(chr(10)) + 1}: the file ends inside a line (the writer was "
                         "stopped mid-write); remove the incomplete last line to read the rest")
    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if header is None or "step" not in header:
        raise ValueError(f"{path}, line 1: not a metrics log (its header has no 'step' column)")
    for row in reader:
        line = reader.line_num
        if len(row) != len(header):
            raise ValueError(f"{path}, line {line}: {len(row)} cells for {len(header)} columns")
        cells = dict(zip(header, row, strict=True))
        if not cells["step"]:
            continue
        step = _number(cells["step"], path, line, "step")
        for key, cell in cells.items():
            if key != "step" and cell != "":
                run.add(key, int(step), _number(cell, path, line, key), f"{path}, line {line}")


def _number(cell: str, path: Path, line: int, column: str) -> float:
    try:
        return float(cell)
    except ValueError:
        raise ValueError(f"{path}, line {line}: column {column!r} holds {cell[:40]!r}, not a number") from None


def tfrecords(path: Path, notes: list[str] | None = None) -> list[bytes]:
    """The records of a TFRecord file: ``uint64 length, uint32 masked crc32c(length), data, uint32 masked
    crc32c(data)`` each, both checksums verified (a ValueError names the file and the record's offset). A record cut
    short at the end (a writer that was killed) ends the list, with a line in ``notes``."""
    from tensorboardX.crc32c import crc32c

    data, records, offset = path.read_bytes(), [], 0
    while offset < len(data):
        if offset + 12 > len(data):
            _cut(notes, path, offset)
            break
        header, (length,), (header_crc,) = (data[offset:offset + 8], struct.unpack_from("<Q", data, offset),
                                            struct.unpack_from("<I", data, offset + 8))
        if _masked(crc32c(header)) != header_crc:
            raise ValueError(f"{path}: record at byte {offset}: its length fails the checksum (not an event file, "
                             "or a damaged one)")
        start, end = offset + 12, offset + 12 + length
        if end + 4 > len(data):
            _cut(notes, path, offset)
            break
        (data_crc,) = struct.unpack_from("<I", data, end)
        if _masked(crc32c(data[start:end])) != data_crc:
            raise ValueError(f"{path}: record at byte {offset}: its data fail the checksum (a damaged event file)")
        records.append(data[start:end])
        offset = end + 4
    return records


def _masked(crc: int) -> int:
    """TFRecord's masked CRC: rotate right by 15 bits, add 0xa282ead8 (mod 2^32)."""
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _cut(notes: list[str] | None, path: Path, offset: int) -> None:
    if notes is not None:
        notes.append(f"{path}: the last record, at byte {offset}, was cut short (its writer stopped); read up to it")


def _read_events(path: Path, run: LoggedRun) -> None:
    from google.protobuf.message import DecodeError
    from tensorboardX.proto.event_pb2 import Event

    for index, record in enumerate(tfrecords(path, run.notes)):
        try:
            event = Event.FromString(record)
        except DecodeError as error:
            raise ValueError(f"{path}: record {index} is not a TensorBoard event ({error})") from None
        for value in event.summary.value:
            kind = value.WhichOneof("value")
            if kind == "simple_value":
                run.add(value.tag, event.step, value.simple_value, f"{path}: record {index}")
            elif kind == "tensor" and (value.tensor.float_val or value.tensor.double_val):
                run.add(value.tag, event.step, (value.tensor.float_val or value.tensor.double_val)[0],
                        f"{path}: record {index}")
            elif kind == "image":
                run.images[value.tag] = value.image.encoded_image_string


def leveldb_records(path: Path, notes: list[str] | None = None) -> list[bytes]:
    """The records of a ``.wandb`` file: a 7-byte header (``:W&B``, magic, version), then 32 KiB blocks of
    chunks with a 7-byte header each (CRC-32 of type and data, length, type: full, first, middle, last),
    LevelDB's log format with W&B's checksum (zlib's CRC-32, unmasked); every chunk's checksum verified (a
    ValueError names the file and the byte). A chunk cut short at the end (a writer that was killed) ends the list,
    with a line in ``notes``."""
    data = path.read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path}: not a W&B run file")
    block, records, pending, offset = 32768, [], b"", 7
    while offset + 7 <= len(data):
        if block - offset % block < 7:  # a block's tail too short for a header is padding
            offset += block - offset % block
            continue
        crc, length, kind = struct.unpack_from("<IHB", data, offset)
        if (crc, length, kind) == (0, 0, 0) and not data[offset:].strip(b"\0"):
            break  # zero padding to the end: nothing more was written
        chunk = data[offset + 7: offset + 7 + length]
        if len(chunk) < length:
            _cut(notes, path, offset)
            break
        if kind not in (1, 2, 3, 4) or zlib.crc32(bytes([kind]) + chunk) != crc:
            raise ValueError(f"{path}: chunk at byte {offset} fails its checksum (a damaged W&B run file)")
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
    from google.protobuf.message import DecodeError
    from wandb.proto.wandb_internal_pb2 import Record  # type: ignore[attr-defined]  # generated, untyped

    for index, data in enumerate(leveldb_records(path, run.notes)):
        try:
            record = Record.FromString(data)
        except DecodeError as error:
            raise ValueError(f"{path}: record {index} is not a W&B record ({error})") from None
        if record.WhichOneof("record_type") != "history":
            continue
        row = {}
        for item in record.history.item:
            key = item.key or "/".join(item.nested_key)
            try:
                row[key] = json.loads(item.value_json)
            except json.JSONDecodeError:
                raise ValueError(f"{path}: record {index}: the value of {key!r} is not JSON "
                                 f"({item.value_json[:40]!r})") from None
        # the trainer's step, which Lightning and the Hugging Face integration log beside each row; W&B's own
        # ``_step`` counts rows
        step = row.get("trainer/global_step", row.get("train/global_step", record.history.step.num))
        for key, value in row.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                run.add(key, int(step), value, f"{path}: record {index}")
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
