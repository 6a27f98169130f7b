"""A time bound on the Redis Streams bus: entries older than ``CHORUS_BUS_RETENTION`` go.

Why: an entry is a message's or a reply's JSON (author, text). ``XADD ... MAXLEN ~`` bounds a
stream's memory but not how long an entry lives, so on a quiet stream a user's words stayed for
good, and ``/forget`` could never promise they were gone. Now every entry older than the window
(default 24 h) is removed; ``bot.bus.erasure`` removes a user's younger ones on ``/forget``.

Why a periodic ``XTRIM MINID`` and not ``XADD ... MINID``:

- ``XADD`` carries one trim strategy, and it already carries ``MAXLEN ~`` (the memory bound a
  burst needs; a time bound alone lets a flood of messages grow a stream without limit);
- a stream nobody writes to gets no ``XADD`` at all, and its old entries would stay forever
  (a quiet platform's outbound partition, the dead letters);
- the approximate form (``~``) removes whole radix-tree nodes only (100 entries each by
  default), which on a slow stream can span days. The sweep trims exactly: every entry with an
  id older than ``now - window`` goes, and none younger. The cost is what it removes.

One process per interval sweeps (``SET NX PX`` on ``keys.bus_retention``, the same for every
process of the namespace); the others find the lease taken and wait. The interval is a tenth of
the window, at most five minutes, so an entry lives at most the window plus about two
intervals. The clock is Redis's own (``TIME``): entry ids are its milliseconds, so a process
whose clock drifts trims neither early nor late.

Pending entries: the trim looks only at an entry's age, never at who still holds it. An entry
still pending for a group, or not yet read by it, is kept as long as it is younger than the
window; once older, it is trimmed anyway and the consumer that reclaims it logs it as lost and
acks it (``RedisStreamsBus``'s "trimmed before it was handled"). That is the trade-off: a worker
fleet down longer than the window loses what waited for it, in exchange for a bound that holds
whatever the consumers do. Hence the 10-minute floor on the setting; keep the window well above
the longest outage or deploy you expect. Dead letters follow the same window: an operator who
wants them kept longer raises it (their ERROR log line, with platform and message id, stays).

The in-process bus keeps nothing after an ack, so it needs no retention. The embedded store
(``memory://``, fakeredis) implements every command used here (``SCAN ... TYPE``, exact
``XTRIM MINID``, ``TIME``); tests/test_bus_retention.py runs on it and on a real Redis.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid

from bot.bus.streams_publish import StreamsPublisher
from bot.ops.aio import cancel_and_wait
from bot.state import keys
from bot.state.client import Redis
from bot.state.outages import TRANSIENT

log = logging.getLogger("chorus.bus")

MIN_RETENTION_SECONDS = 600  # CHORUS_BUS_RETENTION's floor (bot/settings/state.py)
MAX_INTERVAL_SECONDS = 300.0
_SCAN_COUNT = 1000


class StreamRetention:
    """Trims every stream of a bus namespace to the retention window, periodically."""

    def __init__(
        self,
        redis: Redis,
        *,
        namespace: str = "main",
        retention_seconds: int = 24 * 3600,
        interval: float | None = None,
    ) -> None:
        if retention_seconds < 1:
            raise ValueError("retention_seconds must be positive")
        self._redis = redis
        self.namespace = namespace
        self.retention_ms = retention_seconds * 1000
        self.interval = interval or min(retention_seconds / 10, MAX_INTERVAL_SECONDS)
        self._token = uuid.uuid4().hex
        self._task: asyncio.Task[None] | None = None
        keys.bus_retention(namespace)  # validates the namespace early

    @classmethod
    def for_bus(cls, bus: object, redis: Redis, retention_seconds: int) -> StreamRetention | None:
        """The retention of ``bus`` (``redis`` is its client), or None when it keeps nothing."""
        if isinstance(bus, StreamsPublisher):
            return cls(redis, namespace=bus.namespace, retention_seconds=retention_seconds)
        return None

    async def sweep(self, *, now_ms: int | None = None) -> int:
        """Trim every stream of the namespace to ``now - window`` (``now`` is Redis's clock
        unless given); the number of entries removed."""
        if now_ms is None:
            seconds, micros = await self._redis.time()
            now_ms = int(seconds) * 1000 + int(micros) // 1000
        cutoff = max(0, now_ms - self.retention_ms)
        removed = 0
        async for name in self._redis.scan_iter(
            match=keys.bus_streams_pattern(self.namespace), count=_SCAN_COUNT, _type="STREAM"
        ):
            removed += int(await self._redis.xtrim(name, minid=cutoff, approximate=False))
        if removed:
            log.info(
                "trimmed bus entries older than the retention window",
                extra={"namespace": self.namespace, "removed": removed, "cutoff_ms": cutoff},
            )
        return removed

    async def sweep_if_due(self) -> int | None:
        """``sweep`` when no process of the namespace swept within the interval; else None."""
        taken = await self._redis.set(
            keys.bus_retention(self.namespace),
            self._token,
            nx=True,
            px=max(1, int(self.interval * 1000)),
        )
        return await self.sweep() if taken else None

    def start(self) -> None:
        """Sweep in the background until ``aclose`` (a no-op when already running)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"bus-retention:{self.namespace}")

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)

    async def _run(self) -> None:
        while True:
            try:
                await self.sweep_if_due()
            except TRANSIENT:
                log.warning("redis unavailable; the bus retention sweep waits", exc_info=True)
            except Exception:
                log.exception("the bus retention sweep failed")
            # Jittered, so the processes of a deployment do not all ask at the same moment.
            await asyncio.sleep(self.interval * random.uniform(0.5, 1.0))
