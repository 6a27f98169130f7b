"""Publishing to the Redis Streams bus, and what its consuming half builds on.

Why apart from ``streams`` (the consume loop): publishing is one ``XADD`` to the partition of
the event's conversation and needs none of the consumer machinery (partition leases,
reclaiming, flow control), while both halves share the configuration, the key layout, riding
over a Redis outage (``bot.state.outages``: retried until Redis answers, logged with the
traceback; a publish retried after a lost reply may add the entry twice, and consumers dedupe
by message id) and ``drain``. ``StreamsPublisher`` holds exactly that; ``RedisStreamsBus``
extends it with ``consume`` and ``close``. See ``streams`` for the design as a whole.

``MAXLEN ~`` bounds a stream's size; its time bound is ``bot.bus.retention`` (a periodic exact
``XTRIM MINID``: ``XADD`` takes one trim strategy, and an idle stream gets no ``XADD``), and
``/forget`` deletes a user's entries with ``bot.bus.erasure``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import zlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pydantic import BaseModel

from bot.bus.base import BusClosed
from bot.bus.streams_ops import unacked, wait_event
from bot.ops.aio import Latch
from bot.resilience import Failure, retry
from bot.state import keys, outages
from bot.state.client import Redis
from bot.state.outages import outage_policy
from bot.state.turn import StreamAppend

log = logging.getLogger("chorus.bus")

T = TypeVar("T")

FIELD = "e"  # the one field of an entry: the event's JSON
DRAIN_RECHECK = 0.05  # acks from other processes are seen by re-reading the groups this often


def conversation_of(event: BaseModel) -> str | None:
    """The default partition key: the event's ``conversation`` (ChatMessage, Reply, ...)."""
    conversation = getattr(event, "conversation", None)
    return None if conversation is None else str(conversation)


class StreamsPublisher:
    """The Redis Streams bus's configuration, publishing, outage riding and drain;
    ``streams.RedisStreamsBus`` adds consuming."""

    def __init__(
        self,
        redis: Redis,
        *,
        consumer: str,
        maxlen: int = 100_000,
        block_ms: int = 1000,
        claim_idle_ms: int = 60_000,
        partitions: int = 16,
        lease_ms: int = 5_000,
        namespace: str = "main",
        batch: int = 64,
        max_inflight: int = 256,
        start_id: str = "0",
        partition_key: Callable[[BaseModel], str | None] = conversation_of,
        backoff_cap: float = 5.0,
    ) -> None:
        if not consumer:
            raise ValueError("consumer must name this process (e.g. its hostname and pid)")
        if min(maxlen, block_ms, claim_idle_ms, partitions, lease_ms, batch, max_inflight) < 1:
            raise ValueError("sizes and durations must be positive")
        if block_ms * 2 > lease_ms:
            raise ValueError("lease_ms must be at least twice block_ms")
        keys.bus_stream("inbound", 0, namespace)  # validates the namespace early
        self._redis = redis
        self.consumer = consumer
        self.maxlen = maxlen
        self.block_ms = block_ms
        self.claim_idle_ms = claim_idle_ms
        self.partitions = partitions
        self.lease_ms = lease_ms
        self.namespace = namespace
        self.batch = batch
        self.max_inflight = max_inflight
        self.start_id = start_id
        self._partition_key = partition_key
        self._outage = outage_policy(backoff_cap)  # waits while Redis is unreachable
        self._spread = itertools.count()
        # stream key -> topic: published to through this bus since drain last saw it all acked
        self._unsettled: dict[str, str] = {}
        self._publishes = 0  # how many publishes were prepared (drain notices one mid-check)
        self._progress = asyncio.Event()  # an ack or publish happened here (drain re-checks)
        self._closed_event = Latch()
        self._closed = False
        # (topic, partition) -> stream key: a consumer names every partition it reads on every
        # read, and checking and joining the parts each time was ~40 key builds per message
        self._streams: dict[tuple[str, int], str] = {}

    # -- publishing ------------------------------------------------------------------------------
    def stream(self, topic: str, partition: int) -> str:
        name = self._streams.get((topic, partition))
        if name is None:
            name = keys.bus_stream(topic, partition, self.namespace)
            if len(self._streams) < 4096:  # topics are a few per platform; bounded regardless
                self._streams[(topic, partition)] = name
        return name

    def partition_of(self, event: BaseModel) -> int:
        """The partition of ``event``: by its conversation, round robin when it has none."""
        key = self._partition_key(event)
        if key is None:
            return next(self._spread) % self.partitions
        return zlib.crc32(key.encode()) % self.partitions

    async def publish(self, topic: str, event: BaseModel) -> str:
        self._check_open(topic)
        name, payload, partition = self._prepare(topic, event)
        entry_id = str(
            await self._retrying(
                f"publish to {topic}",
                lambda: self._redis.xadd(
                    name, {FIELD: payload}, maxlen=self.maxlen, approximate=True
                ),
            )
        )
        self._progress.set()
        return f"{partition}:{entry_id}"

    def publish_change(self, topic: str, event: BaseModel) -> StreamAppend:
        """``publish`` as a change of the turn's commit (one ``XADD`` there), so a reply goes
        out in the same atomic step as the rest of its side effect."""
        self._check_open(topic)
        name, payload, _ = self._prepare(topic, event)
        return StreamAppend(name, {FIELD: payload}, self.maxlen)

    def _prepare(self, topic: str, event: BaseModel) -> tuple[str, str, int]:
        payload = event.model_dump_json()  # fails here, not in a consumer, if it cannot cross
        partition = self.partition_of(event)
        name = self.stream(topic, partition)
        self._unsettled[name] = topic  # before the write, so drain never misses it
        self._publishes += 1
        return name, payload, partition

    # -- drain and close -------------------------------------------------------------------------
    async def drain(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 (the contract)
        """Wait until every entry of every stream this bus published to is acked by each of its
        groups (a stream nobody consumes never drains). Other processes' acks are seen by
        re-reading the groups every 50 ms; this is for tests and clean shutdowns."""
        busy: dict[str, int] = {}
        try:
            async with asyncio.timeout(timeout):
                while True:
                    self._progress.clear()
                    busy = await self._retrying("drain", self._unacked)
                    if not busy:
                        return
                    await wait_event(self._progress, DRAIN_RECHECK)
        except TimeoutError:
            listed = ", ".join(f"{topic}={count}" for topic, count in sorted(busy.items()))
            raise TimeoutError(
                f"the bus did not drain within {timeout}s; events not yet acked: {listed}"
            ) from None

    async def _unacked(self) -> dict[str, int]:
        """Per topic, what is not acked yet in the streams this bus published to since drain
        last saw them settled. A settled stream is not read again until this bus publishes to
        it once more: what this bus published there is acked for good, and re-reading every
        stream ever touched made each drain cost three commands per stream (most of the
        benchmark's Redis work per message). A publish during the check means look again: its
        stream may not be in this snapshot (a consumer publishes its follow-up before acking)."""
        seen = self._publishes
        streams = dict(self._unsettled)
        busy = await unacked(self._redis, {name: name for name in streams})
        if self._publishes != seen:
            return {"(new publishes)": 1}
        by_topic: dict[str, int] = {}
        for name, topic in streams.items():
            if name in busy:
                by_topic[topic] = by_topic.get(topic, 0) + busy[name]
            else:
                self._unsettled.pop(name, None)
        return by_topic

    # -- helpers ---------------------------------------------------------------------------------
    def _check_open(self, topic: str) -> None:
        if self._closed:
            raise BusClosed(f"the event bus is closed; cannot publish to {topic!r}")

    async def _retrying(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``, retried while Redis is unreachable (``bot.state.outages``); once the bus
        is closed, an outage ends it with ``BusClosed`` instead of retrying forever."""

        def classify(exc: BaseException) -> Failure:
            failure = outages.classify(exc)
            if failure.retryable and self._closed:
                raise BusClosed(f"the event bus closed while Redis was down ({what})") from None
            return failure

        return await retry(
            call,
            classify,
            self._outage,
            what=what,
            logger=log,
            message="redis unavailable; retrying",
            traceback=True,
        )
