"""The embedded store's files in the data directory: a snapshot, a change log, and the lock.

Layout of ``<CHORUS_DATA_DIR>/state`` (mode 0700):

- ``snapshot``: every key at the last compaction; ``log.<generation>``: the change batches
  written since, one batch a second at most. A key's record is its ``DUMP`` payload and its
  absolute expiry in milliseconds (0: none), or a deletion. Replaying the log over the snapshot
  gives the store as it was at the last batch.
- ``lock``: held (``flock``) by the one process using the directory, holding its pid.

Each file starts with one JSON line (``{"format": "chorus-state", "version": 1, ...}``) and
then frames: a length and a CRC-32 of the body, then the body (the batch's wall time and its
records). Why this and not SQLite: the store must hand a compaction's erasures to the disk
completely (a forgotten text must not survive in free pages, a write-ahead log or a temporary
file), load 100,000 keys fast, and name what a torn tail lost; a snapshot written to a new file
and renamed over the old one, with the old log deleted, erases by construction, and a reader of
length-and-checksum frames knows exactly where a tail tore and which batch's time it carried.
A batch is one frame, so it is applied whole or not at all.

A frame that runs past the end of the log or fails its checksum ends the log there: the tail
is cut off (the file truncated back to the last whole frame) with one warning naming the bytes
and the time of the last batch kept. A first line that is not this format, or a newer version
of it, is refused: nothing in the directory is read further or written.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import struct
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NamedTuple

from bot.settings import ConfigError

log = logging.getLogger("chorus.store")

FORMAT = "chorus-state"
VERSION = 1
SNAPSHOT = "snapshot"
LOCK = "lock"
_FRAME = struct.Struct(">II")  # body length, CRC-32 of the body
_BATCH = struct.Struct(">dI")  # wall time of the batch, number of records
_RECORD = struct.Struct(">HIqI")  # database, key length, expiry (ms; 0 none; -1 deleted), payload
DELETED = -1


class Record(NamedTuple):
    """One key's state: its ``DUMP`` payload and absolute expiry in ms (0: none), or deleted
    (``expires == DELETED``, empty payload)."""

    db: int
    key: bytes
    expires: int
    payload: bytes


class StateRefused(ConfigError):
    """The data directory holds something this version does not read, or another process."""


@dataclass
class Loaded:
    """What the directory held: the live records by (db, key), the generation of the log to
    append to, the snapshot's, and the engine version that wrote the snapshot."""

    records: dict[tuple[int, bytes], Record]
    generation: int
    snapshot_generation: int
    engine: str


def log_name(generation: int) -> str:
    return f"log.{generation}"


def header(kind: str, generation: int, engine: str) -> bytes:
    fields = {"format": FORMAT, "version": VERSION, "kind": kind}
    fields |= {"generation": generation, "engine": engine}
    return json.dumps(fields).encode() + b"\n"


def encode_batch(records: Iterable[Record], when: float | None = None) -> bytes:
    """One frame holding ``records``, applied whole or not at all when read back."""
    parts: list[bytes] = []
    count = 0
    for db, key, expires, payload in records:
        parts += (_RECORD.pack(db, len(key), expires, len(payload)), key, payload)
        count += 1
    body = _BATCH.pack(time.time() if when is None else when, count) + b"".join(parts)
    return _FRAME.pack(len(body), zlib.crc32(body)) + body


def decode_batch(body: bytes) -> Iterator[Record]:
    _, count = _BATCH.unpack_from(body)
    at = _BATCH.size
    for _ in range(count):
        db, key_len, expires, size = _RECORD.unpack_from(body, at)
        at += _RECORD.size
        key = body[at : at + key_len]
        at += key_len
        yield Record(db, key, expires, body[at : at + size])
        at += size


def _read_header(path: Path, data: bytes) -> tuple[dict[str, object], int]:
    line, newline, _ = data.partition(b"\n")
    try:
        fields = json.loads(line) if newline else None
    except ValueError:
        fields = None
    if not isinstance(fields, dict) or fields.get("format") != FORMAT:
        raise StateRefused(
            f"{path} is not a Chorus state file (its first line is {line[:60]!r}); Chorus "
            f"reads and writes nothing in {path.parent} until it is moved away"
        )
    version = fields.get("version")
    if version != VERSION:
        raise StateRefused(
            f"{path} is in version {version} of Chorus's state format; this Chorus reads "
            f"version {VERSION}. Run the Chorus that wrote it, or move {path.parent} away "
            "(nothing there was changed)"
        )
    return fields, len(line) + 1


def _frames(path: Path, data: bytes, start: int) -> tuple[list[bytes], int, float | None]:
    """The whole frames from ``start``, the offset after the last one, and its batch time."""
    bodies: list[bytes] = []
    at, last = start, None
    while at + _FRAME.size <= len(data):
        size, crc = _FRAME.unpack_from(data, at)
        body = data[at + _FRAME.size : at + _FRAME.size + size]
        if len(body) != size or zlib.crc32(body) != crc or size < _BATCH.size:
            break
        bodies.append(body)
        last = _BATCH.unpack_from(body)[0]
        at += _FRAME.size + size
    return bodies, at, last


def _torn(path: Path, data: bytes, end: int, last: float | None) -> None:
    if end == len(data):
        return
    kept = (
        time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(last))
        if last is not None
        else "none: the log had no whole batch"
    )
    log.warning(
        "state log %s: cut off a torn or corrupt tail of %d bytes at byte %d (the changes "
        "saved after the last whole batch, %s, are lost); the rest is loaded",
        path,
        len(data) - end,
        end,
        kept,
    )
    with path.open("r+b") as f:
        f.truncate(end)
        os.fsync(f.fileno())


def _log_generations(directory: Path, first: int) -> list[int]:
    """The generations of the logs to replay over snapshot ``first``, oldest first: its own,
    and the next one's when a compaction had switched logs but not yet renamed its snapshot
    in."""
    return sorted(
        int(suffix)
        for path in directory.glob("log.*")
        if (suffix := path.name.removeprefix("log.")).isdigit() and int(suffix) >= first
    )


def load(directory: Path) -> Loaded:
    """Read the snapshot and the logs after it; cut off a torn log tail (one warning).
    ``generation`` of the result is the log to append to."""
    records: dict[tuple[int, bytes], Record] = {}
    generation, engine = 0, ""
    snapshot = directory / SNAPSHOT
    if snapshot.exists():
        data = snapshot.read_bytes()
        fields, start = _read_header(snapshot, data)
        generation = int(str(fields.get("generation", 0)))
        engine = str(fields.get("engine", ""))
        bodies, end, _ = _frames(snapshot, data, start)
        if end != len(data):
            raise StateRefused(
                f"{snapshot} is damaged at byte {end} of {len(data)} (a snapshot is written "
                "whole and renamed into place, so this is the disk, not a crash); restore it "
                f"from a backup or move {directory} away. Nothing there was changed"
            )
        for body in bodies:
            for record in decode_batch(body):
                records[record.db, record.key] = record
    logs = _log_generations(directory, snapshot_generation := generation)
    for generation in logs:
        changes = directory / log_name(generation)
        data = changes.read_bytes()
        _read_header(changes, data)
        bodies, end, last = _frames(changes, data, len(data.partition(b"\n")[0]) + 1)
        for body in bodies:
            for record in decode_batch(body):
                if record.expires == DELETED:
                    records.pop((record.db, record.key), None)
                else:
                    records[record.db, record.key] = record
        _torn(changes, data, end, last)
    return Loaded(records, logs[-1] if logs else snapshot_generation, snapshot_generation, engine)


def open_log(directory: Path, generation: int, engine: str) -> BinaryIO:
    """The change log of ``generation``, for appending (created with its header)."""
    path = directory / log_name(generation)
    fresh = not path.exists()
    f = os.fdopen(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab")
    if fresh:
        f.write(header("log", generation, engine))
        f.flush()
        os.fsync(f.fileno())
        _sync_dir(directory)
    return f


def append(f: BinaryIO, records: list[Record]) -> None:
    """One batch, on disk (``fsync``) when this returns."""
    f.write(encode_batch(records))
    f.flush()
    os.fsync(f.fileno())


def write_snapshot(
    directory: Path, generation: int, engine: str, chunks: Iterable[list[Record]]
) -> None:
    """Replace the snapshot with ``chunks`` (written to a new file, synced, renamed in)."""
    fresh = directory / f"{SNAPSHOT}.new"
    with os.fdopen(os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
        f.write(header("snapshot", generation, engine))
        for chunk in chunks:
            f.write(encode_batch(chunk))
        f.flush()
        os.fsync(f.fileno())
    os.replace(fresh, directory / SNAPSHOT)
    _sync_dir(directory)


def remove_old_logs(directory: Path, generation: int) -> None:
    """Delete the logs before ``generation`` (their changes are in the snapshot)."""
    for path in directory.glob("log.*"):
        suffix = path.name.removeprefix("log.")
        if suffix.isdigit() and int(suffix) < generation:
            path.unlink(missing_ok=True)
    (directory / f"{SNAPSHOT}.new").unlink(missing_ok=True)


def _sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DirectoryLock:
    """The one process using a data directory: an exclusive ``flock`` on ``lock``, which the
    kernel releases when the process ends however it ends (a dead holder leaves no stale lock)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StateRefused(
                f"the data directory {directory} is in use by another Chorus (pid {holder}); "
                "stop that one first, or give this one its own CHORUS_DATA_DIR"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)  # no pid left behind to mislead
                os.close(self._fd)
            self._fd = None
