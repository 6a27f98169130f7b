"""The gateway's spool: the events its outbox still held when it stopped, on disk until the
next start publishes them.

Why: a platform that got its acknowledgement (Slack's HTTP 200) never sends the event again,
so a gateway stopped while Redis is down must not simply drop what it holds. The outbox
(``bot.bus.outbox``) writes those events here on close and reads them back, first, on the next
start.

The format is JSON lines, one event per line, in the order the gateway received them:
``{"v": 2, "topic": ..., "model": <class name>, "event": <the event's JSON>, "sig": <hex>}``.
``sig`` is an HMAC-SHA256 of the record under the deployment's spool key (``spool_key``), so
only a gateway of this deployment can have written it: whoever can write into the directory
cannot make the next start publish messages, author roles included, that no platform sent. A
file holding a record that does not verify (unsigned, signed with another key, altered, or an
older version's) is refused whole: set aside, logged and counted (``refused``). A file is written
under a temporary name, fsync'd, renamed into place (atomic: a file under its final name is
always whole) and the directory fsync'd, so a crash mid-write leaves at worst a temporary file
that is never read. Names sort by creation time (``outbox-<ns>-<pid>-<random>.jsonl``) so
several files replay oldest first.

Several gateways may share the directory: each file is replayed by whoever holds its
``flock`` (non-blocking; a file locked by another gateway is left to it), and the lock is held
until every event of the file is published and the file removed. A gateway that dies mid-replay
loses the lock with the process and the next start replays the whole file again; consumers
dedupe by message id. A file that cannot be read back (bad JSON, an unknown model, an event
that no longer validates) is renamed ``corrupt-...`` and logged, never replayed and never a
crash; set-aside files are deleted ``corrupt_retention`` seconds after they were set aside (at a
later start), so a directory that collects them does not grow without end. In a container the
directory must be a volume that outlives the container.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ValidationError

from bot import events as core_events

log = logging.getLogger("chorus.bus")

PREFIX = "outbox-"
SUFFIX = ".jsonl"
CORRUPT = "corrupt-"
VERSION = 2
CORRUPT_RETENTION = 7 * 24 * 3600.0  # seconds a set-aside file is kept for inspection


def core_models() -> dict[str, type[BaseModel]]:
    """The event models a spool can hold by default: every pydantic model of ``bot.events``."""
    return {
        name: value
        for name, value in vars(core_events).items()
        if isinstance(value, type) and issubclass(value, BaseModel) and not name.startswith("_")
    }


class CorruptSpool(ValueError):
    """A spool file that cannot be read back; the message names the line and why."""


class UnsignedSpool(CorruptSpool):
    """A spool file with a record whose signature does not verify under this deployment's key."""

    def __init__(self, message: str, records: int) -> None:
        super().__init__(message)
        self.records = records


def signature(key: bytes, topic: str, model: str, event: str) -> str:
    """The HMAC of one record: its version, topic, model and event, unambiguously joined."""
    body = json.dumps([VERSION, topic, model, event], separators=(",", ":")).encode()
    return hmac.new(key, body, hashlib.sha256).hexdigest()


@dataclass(eq=False)
class Claim:
    """One spool file this process replays, locked (``flock``) until ``finish`` or ``release``.

    ``pending`` counts its events not yet published; the outbox calls ``finish`` when it
    reaches 0, or when the events still pending were written to a new spool file."""

    path: Path
    fd: int
    events: list[tuple[str, BaseModel]]
    pending: int = field(init=False)

    def __post_init__(self) -> None:
        self.pending = len(self.events)

    def finish(self) -> None:
        """Remove the file (its events are published or spooled again), then unlock it."""
        if self.fd < 0:
            return
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            log.warning("could not remove a replayed spool file", extra={"path": str(self.path)})
        self.release()

    def release(self) -> None:
        """Unlock and keep the file: the next start replays it (again)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Spool:
    """A spool directory. ``write`` and ``claim`` do blocking file I/O: call them in a thread.
    ``key`` signs and verifies every record (``bot.bus.spool_key``); ``refused`` counts the
    records refused because they did not verify."""

    def __init__(
        self,
        directory: str | Path,
        *,
        key: bytes,
        models: Mapping[str, type[BaseModel]] | None = None,
        corrupt_retention: float = CORRUPT_RETENTION,
        clock: Callable[[], float] = time.time,
    ):
        if len(key) < 16:
            raise ValueError("a spool key must be at least 16 bytes")
        self.directory = Path(directory)
        self.models = dict(core_models() if models is None else models)
        self.corrupt_retention = corrupt_retention
        self.refused = 0
        self._key = key
        self._clock = clock

    def check(self, event: BaseModel) -> None:
        """``TypeError`` unless ``event``'s model can be read back from the spool."""
        name = type(event).__name__
        if self.models.get(name) is not type(event):
            raise TypeError(
                f"{name} cannot be spooled: not one of the spool's models ({', '.join(self.models)})"
            )

    def writable(self) -> bool:
        """Whether ``write`` can create its file here (the directory, or the nearest existing
        parent it would be made in, is writable), checked without creating anything."""
        path = self.directory
        while not path.exists():
            if path.parent == path:
                return False
            path = path.parent
        return path.is_dir() and os.access(path, os.W_OK | os.X_OK)

    # -- writing ---------------------------------------------------------------------------------
    def write(self, items: Iterable[tuple[str, BaseModel]]) -> tuple[Path, int]:
        """Write ``items`` (topic, event), in order, to a new file; returns it and the count."""
        self.directory.mkdir(parents=True, exist_ok=True)
        stem = f"{PREFIX}{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        final = self.directory / f"{stem}{SUFFIX}"
        temporary = self.directory / f".{stem}.tmp"
        count = 0
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                for topic, event in items:
                    model, payload = type(event).__name__, event.model_dump_json()
                    line = {
                        "v": VERSION,
                        "topic": topic,
                        "model": model,
                        "event": payload,
                        "sig": signature(self._key, topic, model, payload),
                    }
                    out.write(json.dumps(line, separators=(",", ":")) + "\n")
                    count += 1
                out.flush()
                os.fsync(out.fileno())
            os.rename(temporary, final)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        _fsync_directory(self.directory)
        return final, count

    # -- reading back ----------------------------------------------------------------------------
    def claim(self) -> list[Claim]:
        """Every spool file no other process is replaying, oldest first, locked and parsed.
        A file that cannot be parsed or does not verify is set aside (``corrupt-...``) and
        logged; set-aside files past their retention are deleted first."""
        if not self.directory.is_dir():
            return []
        self._purge_set_aside()
        claims: list[Claim] = []
        for path in sorted(self.directory.glob(f"{PREFIX}*{SUFFIX}")):
            claim = self._claim_one(path)
            if claim is not None:
                claims.append(claim)
        return claims

    def _claim_one(self, path: Path) -> Claim | None:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None  # replayed and removed by another gateway just now
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.stat(path).st_ino != os.fstat(fd).st_ino:
                raise FileNotFoundError(path)  # replaced or removed since it was listed
            with open(path, encoding="utf-8") as source:  # (the lock is on fd, kept open)
                events = self.parse(source.read())
        except (BlockingIOError, FileNotFoundError):
            os.close(fd)
            return None  # another gateway holds it, or it is gone
        except (CorruptSpool, UnicodeDecodeError) as exc:
            aside = self._set_aside(path)
            if isinstance(exc, UnsignedSpool):
                self.refused += exc.records
                log.error(
                    "a spool file does not verify with this deployment's spool key; refused "
                    "and set aside, its events are not replayed",
                    extra={"path": str(aside), "error": str(exc), "refused": exc.records},
                )
            else:
                log.error(
                    "a spool file cannot be read back; set aside, its events are not replayed",
                    extra={"path": str(aside), "error": str(exc)},
                )
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        return Claim(path=path, fd=fd, events=events)

    def parse(self, text: str) -> list[tuple[str, BaseModel]]:
        """The (topic, event) lines of a spool file. ``UnsignedSpool`` when any record does not
        verify (checked before anything is parsed as an event); ``CorruptSpool`` names the
        first line that cannot be read back."""
        records: list[tuple[int, dict[str, object]]] = []
        unsigned: list[int] = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise CorruptSpool(f"line {number}: {exc}") from None
            if not isinstance(record, dict) or not self._verifies(record):
                unsigned.append(number)
            records.append((number, record))
        if unsigned:
            raise UnsignedSpool(
                f"{len(unsigned)} of {len(records)} records do not verify (first: line "
                f"{unsigned[0]})",
                len(unsigned),
            )
        events: list[tuple[str, BaseModel]] = []
        for number, record in records:
            try:
                topic, name, payload = record["topic"], record["model"], record["event"]
                model = self.models.get(str(name))
                if model is None:
                    raise ValueError(f"unknown event model {name!r}")
                events.append((str(topic), model.model_validate_json(str(payload))))
            except (ValueError, KeyError, TypeError, ValidationError) as exc:
                raise CorruptSpool(f"line {number}: {exc}") from None
        return events

    def _verifies(self, record: dict[str, object]) -> bool:
        """A version ``VERSION`` record whose ``sig`` is this key's HMAC of it."""
        topic, model, payload, sig = (record.get(k) for k in ("topic", "model", "event", "sig"))
        if record.get("v") != VERSION or not all(
            isinstance(v, str) for v in (topic, model, payload, sig)
        ):
            return False
        expected = signature(self._key, str(topic), str(model), str(payload))
        return hmac.compare_digest(expected, str(sig))

    # -- files set aside -------------------------------------------------------------------------
    def _set_aside(self, path: Path) -> Path:
        """Rename ``path`` to ``corrupt-...``, dated now (its retention starts when it is set
        aside, not when it was written)."""
        aside = path.with_name(CORRUPT + path.name)
        try:
            os.rename(path, aside)
            os.utime(aside)
        except OSError:
            return path
        return aside

    def _purge_set_aside(self) -> None:
        """Delete the set-aside files older than ``corrupt_retention`` seconds."""
        oldest = self._clock() - self.corrupt_retention
        for path in self.directory.glob(f"{CORRUPT}*"):
            try:
                if path.stat().st_mtime < oldest:
                    path.unlink()
                    log.info(
                        "set-aside spool file past its retention deleted", extra={"path": str(path)}
                    )
            except OSError:
                continue


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable (POSIX: the directory entry is data of the directory)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
