"""The embedded store: fakeredis inside the process, kept on disk in the data directory.

The engine is fakeredis through its public API (``FakeServer``, ``FakeAsyncRedis``,
``FakeRedis``), so every state module speaks the same Redis commands, Lua scripts and streams
to it as to a Redis server. This module adds the persistence, which Redis would do with an
append-only file at ``appendfsync everysec``:

- Which keys changed: the store's keyspace notifications. A subscriber of this module's own
  (``PSUBSCRIBE __keyspace@*__:*``) hears of every key a command or a script's ``redis.call``
  wrote or deleted, whichever client sent it, with nothing added to the clients themselves.
- Twice a second a thread takes the keys heard of, reads each one's ``DUMP`` payload and
  absolute expiry (``PEXPIRETIME``) in one ``MULTI``, and appends them as one batch to the
  change log, synced to disk (``bot.state.statefile`` has the format and why it is not
  SQLite). A change is on disk within about half a second; a ``kill -9`` loses at most that.
- A clean stop loses nothing: the thread's last batch is written when the process exits
  (``atexit``, which runs after SIGTERM, Ctrl-C or the end of the console's input have ended the app) or when
  ``shutdown`` is called.
- Every ``CHORUS_DATA_COMPACT_MINUTES`` the whole store is written to a new snapshot, renamed
  over the old one, and the log starts again empty: what was deleted, forgotten or expired is
  then in no file of the directory. An expiry is absolute, so a key that expired while the
  process was down is not loaded.
- At start the snapshot and its log are read and each key ``RESTORE``d with the time it has
  left. A payload that does not restore (damaged on disk) costs one warning naming the keys.

What notifications do not report, a stream consumer group's reads and acknowledgements
(``XREADGROUP``, ``XACK``, ``XCLAIM``: Redis does not report them either), reaches the disk with
the stream's next write or the next compaction. Only the Redis Streams bus uses them, and it
needs a Redis server anyway (``bot.app``). ``DUMP`` payloads are fakeredis's own encoding, so
the snapshot's header names the fakeredis version that wrote it, and a payload another version
cannot read stops the start with that said, instead of dropping data.
"""

from __future__ import annotations

import atexit
import gc
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fakeredis

from bot.state import statefile
from bot.state.client import Redis, ResponseError
from bot.state.statefile import DELETED, Record, StateRefused

log = logging.getLogger("chorus.store")

ENGINE = f"fakeredis {fakeredis.__version__}"
FLUSH_SECONDS = 0.5
_CHUNK = 1000
_PATTERN = b"__keyspace@*__:*"


def client(server: fakeredis.FakeServer, db: int, *, decode: bool = True) -> Redis:
    """A client of ``server``'s database ``db``, decoding replies to ``str`` as Chorus's
    clients of a server do (``decode=False``: bytes, for a copy of binary values)."""
    return fakeredis.FakeAsyncRedis(server=server, db=db, decode_responses=decode)


class PersistentStore:
    """One data directory's store: the fakeredis server, loaded from and saved to disk."""

    def __init__(self, directory: Path, *, compact_seconds: float) -> None:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.directory = directory
        self.server = fakeredis.FakeServer()
        self._lock = statefile.DirectoryLock(directory)
        self._io = threading.Lock()  # the log: one batch at a time
        self._compacting = threading.Lock()  # one compaction at a time
        self._stop = threading.Event()
        self._clients: dict[int, fakeredis.FakeRedis] = {}
        self._failing_since: float | None = None
        # The load makes one object per key and holds them all: without the cyclic collector
        # running over the growing heap again and again it takes about a third less time.
        collecting = gc.isenabled()
        gc.disable()
        try:
            started = time.perf_counter()
            loaded = statefile.load(directory)
            self.keys_loaded = self._restore(loaded)
            self.load_seconds = time.perf_counter() - started
            self._generation = loaded.generation
            self._dbs = {0, *(db for db, _ in loaded.records)}
            statefile.remove_old_logs(directory, loaded.snapshot_generation)
            self._log = statefile.open_log(directory, self._generation, ENGINE)
        except BaseException:
            self._lock.release()
            raise
        finally:
            if collecting:
                gc.enable()
        self._pubsub = self._sync(0).pubsub()  # type: ignore[no-untyped-call]
        self._pubsub.psubscribe(_PATTERN)
        self._pubsub.get_message(timeout=0)  # the subscription's confirmation
        self._compact_seconds = compact_seconds
        self._thread = threading.Thread(target=self._run, name="chorus-state", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def _sync(self, db: int) -> fakeredis.FakeRedis:
        found = self._clients.get(db)
        if found is None:
            found = self._clients[db] = fakeredis.FakeRedis(server=self.server, db=db)
        return found

    def _send(self, db: int, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Each command's reply, an error reply as its ``ResponseError``: packed by redis-py
        and written on one connection of ``db``, then read back (redis-py's connection API,
        without a pipeline's bookkeeping per command, which the load and each batch to disk
        spend most of their client-side time on; fakeredis's side is the same)."""
        pool = self._sync(db).connection_pool
        conn = pool.get_connection()
        try:
            packed = conn.pack_commands(commands)  # type: ignore[no-untyped-call]
            conn.send_packed_command(packed, check_health=False)  # type: ignore[no-untyped-call]
            replies: list[Any] = []
            for _ in commands:
                try:
                    replies.append(conn.read_response())
                except ResponseError as exc:
                    replies.append(exc)
        except BaseException:
            conn.disconnect()  # type: ignore[no-untyped-call]
            raise
        finally:
            pool.release(conn)
        return replies

    def _restore(self, loaded: statefile.Loaded) -> int:
        now = int(time.time() * 1000)
        by_db: dict[int, list[Record]] = {}
        for record in loaded.records.values():
            if record.expires == 0 or record.expires > now + 1:
                by_db.setdefault(record.db, []).append(record)
        failed: list[tuple[bytes, str]] = []
        count = 0
        for db, records in by_db.items():
            for at in range(0, len(records), _CHUNK):
                chunk = records[at : at + _CHUNK]
                restores = [
                    ("RESTORE", r.key, max(r.expires - now, 1) if r.expires else 0, r.payload)
                    for r in chunk
                ]
                for r, answer in zip(chunk, self._send(db, restores), strict=True):
                    if isinstance(answer, Exception):
                        failed.append((r.key, str(answer)))
                    else:
                        count += 1
        if failed and loaded.engine and loaded.engine != ENGINE:
            raise StateRefused(
                f"the state in {self.directory} was written by {loaded.engine} and {len(failed)} "
                f"keys do not load in {ENGINE} (first: {failed[0][1]}); run the fakeredis "
                "version that wrote it (constraints.txt) or move the directory away. Nothing "
                "there was changed"
            )
        if failed:
            keys = ", ".join(k.decode(errors="replace") for k, _ in failed[:5])
            log.warning(
                "state in %s: %d keys could not be loaded and are dropped (%s%s): %s",
                self.directory,
                len(failed),
                keys,
                ", ..." if len(failed) > 5 else "",
                failed[0][1],
            )
        return count

    def _drain(self) -> set[tuple[int, bytes]]:
        """The (database, key) pairs written since the last call."""
        dirty: set[tuple[int, bytes]] = set()
        conn = self._pubsub.connection  # read as it comes, without PubSub's dict per message
        while conn is not None and conn.can_read(timeout=0):
            message = conn.read_response()
            if message[0] == b"pmessage":  # [kind, pattern, channel, event]
                head, _, key = message[2].partition(b"__:")
                dirty.add((int(head.removeprefix(b"__keyspace@")), key))
        return dirty

    def _dump(self, db: int, keys: list[bytes]) -> Iterator[Record]:
        """Each key's record as the store holds it now (one ``MULTI`` per chunk)."""
        for at in range(0, len(keys), _CHUNK):
            chunk = keys[at : at + _CHUNK]
            commands: list[tuple[Any, ...]] = [("MULTI",)]
            for key in chunk:
                commands += (("DUMP", key), ("PEXPIRETIME", key))
            answers = self._send(db, [*commands, ("EXEC",)])[-1]
            if isinstance(answers, Exception):
                raise answers
            for i, key in enumerate(chunk):
                payload, expires = answers[2 * i], answers[2 * i + 1]
                if payload is None:
                    yield Record(db, key, DELETED, b"")
                else:
                    yield Record(db, key, max(int(expires), 0), payload)

    def _changes(self) -> list[Record]:
        by_db: dict[int, list[bytes]] = {}
        for db, key in self._drain():
            by_db.setdefault(db, []).append(key)
        self._dbs.update(by_db)
        return [record for db, keys in by_db.items() for record in self._dump(db, keys)]

    def flush(self) -> None:
        """Write the keys changed since the last flush, synced to disk before this returns."""
        with self._io:
            if self._log.closed:
                return
            changes = self._changes()
            if changes:
                statefile.append(self._log, changes)

    def compact(self) -> None:
        """A new snapshot of every key and an empty log: erased data leaves the directory.

        The log is switched first (changes from then on go to the next generation's log and
        keep being flushed while the snapshot is written); the snapshot is renamed in, then
        the older logs deleted. A crash in between loads the old snapshot and both logs."""
        with self._compacting:
            with self._io:
                if self._log.closed:
                    return
                changes = self._changes()
                if changes:
                    statefile.append(self._log, changes)
                generation = self._generation + 1
                old, self._log = self._log, statefile.open_log(self.directory, generation, ENGINE)
                old.close()
                self._generation = generation
            statefile.write_snapshot(self.directory, generation, ENGINE, self._everything())
            statefile.remove_old_logs(self.directory, generation)

    def _everything(self) -> Iterator[list[Record]]:
        with self._io:
            dbs = sorted(self._dbs)
        for db in dbs:
            keys = [k if isinstance(k, bytes) else k.encode() for k in self._sync(db).keys("*")]
            records = [r for r in self._dump(db, keys) if r.expires != DELETED]
            for at in range(0, len(records), _CHUNK):
                yield records[at : at + _CHUNK]

    def _run(self) -> None:
        compact_at = time.monotonic() + self._compact_seconds
        compactor: threading.Thread | None = None
        while not self._stop.wait(FLUSH_SECONDS):
            if time.monotonic() >= compact_at and not (compactor and compactor.is_alive()):
                compactor = threading.Thread(
                    target=self._guarded, args=(self.compact,), name="chorus-compact", daemon=True
                )
                compactor.start()
                compact_at = time.monotonic() + self._compact_seconds
            self._guarded(self.flush)
        if compactor is not None:
            compactor.join()

    def _guarded(self, step: Callable[[], None]) -> None:
        try:
            step()
            self._failing_since = None
        except Exception:
            now = time.monotonic()
            if self._failing_since is None or now - self._failing_since > 60:
                self._failing_since = now
                log.exception("could not save the state to %s; retrying", self.directory)

    def close(self) -> None:
        """Write what is left, stop saving and release the directory (idempotent)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
        try:
            self.flush()
        except Exception:  # a full or failing disk: say so, and still let the process end
            log.exception("could not write the last changes to %s", self.directory)
        finally:
            with self._io:
                if not self._log.closed:
                    self._log.close()
                self._pubsub.close()
                self._lock.release()
            atexit.unregister(self.close)


_stores: dict[Path, PersistentStore] = {}
_stores_lock = threading.Lock()


def persistent(directory: Path, *, compact_seconds: float) -> PersistentStore:
    """The process's store for ``directory`` (opened, locked and loaded on first use)."""
    directory = directory.resolve()
    with _stores_lock:
        store = _stores.get(directory)
        if store is None:
            store = PersistentStore(directory, compact_seconds=compact_seconds)
            log.info(
                "state: the embedded store, kept in %s (%d keys loaded in %.2f s)",
                directory,
                store.keys_loaded,
                store.load_seconds,
                extra={"pid": os.getpid()},
            )
            _stores[directory] = store
        return store


def flush_all() -> None:
    """Write every open store's changes now (the instruction gate flushes once per message)."""
    with _stores_lock:
        stores = list(_stores.values())
    for store in stores:
        store.flush()


def shutdown(directory: Path | None = None) -> None:
    """Close the persistent store of ``directory`` (every one when None): flushed, unlocked."""
    with _stores_lock:
        chosen = [directory.resolve()] if directory is not None else list(_stores)
        for path in chosen:
            store = _stores.pop(path, None)
            if store is not None:
                store.close()
