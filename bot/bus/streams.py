"""The event bus over Redis Streams: the scale-out twin of ``InProcessBus``.

Why Streams: an entry stays in the stream after it is read, and a consumer group remembers who
holds which unacknowledged entry (the pending entries list), so a worker that dies mid-turn
loses nothing: its entries are claimed by a live worker and handled again. Delivery is
at-least-once; the router makes *replies* exactly-once with a claim and one guarded commit that
publishes the reply (``publish_change``), appends the history and marks the message done.

Layout (keys in bot/state/keys.py): each topic is split into ``partitions`` streams; an event goes to
the partition of its conversation (a stable CRC32 hash), so every message of a conversation is
in one stream, in publish order. Each partition is read by one consumer of a group at a time
(``bus_redis_leases``), which is what keeps a conversation in order across workers. Entries
are added with ``XADD ... MAXLEN ~ maxlen`` (memory stays bounded; a group lagging by more than
``maxlen`` loses the oldest entries, which are logged when reclaimed) and read with
``XREADGROUP ... BLOCK``; ``Delivery.ack`` is ``XACK``, after the side effect, or rides inside
the side effect's own transaction (``Delivery.ack_change``: the router's guarded commit), which
saves the round trip and makes the two atomic. ``attempt`` is the entry's delivery count. A
payload that does not fit the model is logged with its id and acked.

A group created by ``consume`` starts at the beginning of the retained stream (``start_id``
``0``), so events published before the first consumer started are delivered, as in-process.

Outages: every Redis call of ``publish``, ``consume`` and ``ack`` rides over connection errors
(logged with the traceback, then retried with ``bot.state.outages``' capped, jittered backoff);
work queued in Redis resumes when it is back. A publish retried after a lost reply may add the
entry twice: consumers dedupe by message id (at-least-once).

Graceful stop: ``stop_consuming`` ends a consumer's iterator without giving its partitions
back: it fetches nothing more, its leases are still renewed and acks still work while the turns
it handed out finish; ``close`` then releases the leases, and the next holder reclaims whatever
is still unacked at once (``XAUTOCLAIM`` on acquire) instead of waiting for a lease to lapse.

Two modules: ``streams_publish.StreamsPublisher`` holds the configuration, publishing, outage
riding and drain; this one adds the consume loop (leases, reclaiming, flow control) on top.

The client must decode responses (``connect.open_redis`` does). Whoever created it closes it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from pydantic import BaseModel, ValidationError

from bot.bus.base import BusClosed, Delivery
from bot.bus.leases import PartitionLeases
from bot.bus.slot_reads import SlotReads
from bot.bus.streams_ops import autoclaim, hand_back, wait_event
from bot.bus.streams_publish import FIELD, StreamsPublisher, conversation_of
from bot.ops.aio import Latch, cancel_and_wait
from bot.state import keys
from bot.state.client import RedisCluster, ResponseError, is_cluster, read_on_slot
from bot.state.client import StoreConnectionError as RedisConnectionError
from bot.state.client import StoreTimeoutError as RedisTimeoutError
from bot.state.outages import TRANSIENT
from bot.state.turn import StreamAck

__all__ = ["FIELD", "RedisStreamsBus", "conversation_of"]

log = logging.getLogger("chorus.bus")

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

Entry = tuple[int, str, dict[str, str] | None, int]  # partition, entry id, fields, attempt


@dataclass(eq=False)
class _Consumer:
    topic: str
    group: str
    name: str
    leases: PartitionLeases = field(init=False)
    inflight: dict[int, set[str]] = field(default_factory=dict)
    reading: set[int] = field(default_factory=set)
    recover: dict[int, int] = field(default_factory=dict)  # partition -> min idle ms
    next_stale_check: float = 0.0
    room: asyncio.Event = field(default_factory=asyncio.Event)
    stopped: Latch = field(default_factory=Latch)  # ``stop_consuming``
    task: asyncio.Task[None] | None = None
    slot_reads: SlotReads = field(default_factory=SlotReads)  # a cluster's reads per slot

    def is_idle(self, partition: int) -> bool:
        return (
            partition not in self.reading
            and partition not in self.slot_reads.partitions
            and not self.inflight.get(partition)
        )

    @property
    def inflight_count(self) -> int:
        return sum(len(ids) for ids in self.inflight.values())


class RedisStreamsBus(StreamsPublisher):
    """``EventBus`` over Redis Streams; one instance per process, named by ``consumer``."""

    @functools.cached_property
    def _consumers(self) -> set[_Consumer]:
        """The running ``consume`` iterators, stopped by ``close``."""
        return set()

    @functools.cached_property
    def _intake_stopped(self) -> set[tuple[str, str]]:
        """(topic, group) pairs whose intake ``stop_consuming`` ended in this process."""
        return set()

    # -- consuming -------------------------------------------------------------------------------
    async def consume(
        self, topic: str, model: type[M], *, group: str = "default", consumer: str = ""
    ) -> AsyncIterator[Delivery[M]]:
        if self._closed or (topic, group) in self._intake_stopped:
            return
        name = consumer or self.consumer
        token = f"{name}:{uuid.uuid4().hex[:8]}"
        state = _Consumer(topic=topic, group=group, name=name)
        state.leases = PartitionLeases(
            self._redis,
            lease_key=lambda p: keys.bus_lease(topic, group, p, self.namespace),
            members_key=keys.bus_members(topic, group, self.namespace),
            partitions=self.partitions,
            token=token,
            lease_ms=self.lease_ms,
            is_idle=state.is_idle,
        )
        state.room.set()
        state.next_stale_check = time.monotonic() + self.claim_idle_ms / 1000
        self._consumers.add(state)
        try:
            if not await self._until_closed(self._ensure_groups(topic, group)):
                return
            state.task = asyncio.create_task(self._keep_leases(state), name=f"leases:{token}")
            while not self._closed:
                entries = await self._until_closed(self._fetch(state), state.stopped)
                if entries is None:
                    return
                for partition, entry_id, fields, attempt in entries:
                    if state.stopped.is_set():
                        return  # the rest stays pending here; the next holder reclaims it
                    delivery = await self._delivery(
                        state, model, partition, entry_id, fields, attempt
                    )
                    if delivery is not None:
                        yield delivery
        finally:
            if not state.stopped.is_set() or self._closed:
                await self._stop_consumer(state)
            # else: intake stopped; the leases stay (renewed) until ``close`` gives them back

    async def stop_consuming(self, topic: str, group: str) -> None:
        self._intake_stopped.add((topic, group))
        for state in self._consumers:
            if state.topic == topic and state.group == group:
                state.leases.freeze()
                state.stopped.set()

    async def _delivery(
        self,
        state: _Consumer,
        model: type[M],
        partition: int,
        entry_id: str,
        fields: dict[str, str] | None,
        attempt: int,
    ) -> Delivery[M] | None:
        ack, settle = self._acker(state, partition, entry_id)
        delivery_id = f"{partition}:{entry_id}"
        if fields is None:
            log.error(
                "a pending entry was trimmed before it was handled (the group lagged by more "
                "than maxlen entries); it is lost",
                extra={"topic": state.topic, "event_id": delivery_id, "group": state.group},
            )
            await ack()
            return None
        try:
            event = model.model_validate_json(fields.get(FIELD, ""))
        except ValidationError:
            log.warning(
                "dropping an event that does not fit its model",
                extra={
                    "topic": state.topic,
                    "event_id": delivery_id,
                    "model": model.__name__,
                    "consumer": state.name,
                },
                exc_info=True,
            )
            await ack()
            return None
        return Delivery(
            id=delivery_id,
            topic=state.topic,
            event=event,
            attempt=attempt,
            on_ack=ack,
            ack_change=StreamAck(self.stream(state.topic, partition), state.group, entry_id),
            settle=settle,
        )

    def _acker(
        self, state: _Consumer, partition: int, entry_id: str
    ) -> tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]:
        """``ack`` (``XACK``, then ``settle``) and ``settle`` alone (the consumer's bookkeeping,
        for an entry whose ack rode in the turn's commit: ``Delivery.ack_change``)."""
        name, group = self.stream(state.topic, partition), state.group

        async def settle() -> None:
            state.inflight.get(partition, set()).discard(entry_id)
            state.room.set()
            self._progress.set()

        async def ack() -> None:
            try:
                await self._retrying(
                    f"ack on {state.topic}", lambda: self._redis.xack(name, group, entry_id)
                )
            finally:
                await settle()

        return ack, settle

    async def _fetch(self, state: _Consumer) -> list[Entry]:
        """The next entries for ``state``: reclaimed ones first, then new ones."""
        while not self._closed:  # (also ends a fetch whose cancellation a library swallowed)
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise asyncio.CancelledError  # cancelled while a library swallowed it: stop
            try:
                entries = await self._retrying(
                    f"consume {state.topic}", lambda: self._fetch_once(state)
                )
            except BusClosed:
                return []  # closed during an outage: the iterator just ends
            if entries:
                for partition, entry_id, _, _ in entries:
                    state.inflight.setdefault(partition, set()).add(entry_id)
                return entries
        return []

    async def _fetch_once(self, state: _Consumer) -> list[Entry]:
        try:
            return await self._recover(state) or await self._read_new(state)
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            log.warning("consumer group vanished; recreating it", extra={"topic": state.topic})
            await self._ensure_groups(state.topic, state.group)
            return []

    async def _read_new(self, state: _Consumer) -> list[Entry]:
        while state.inflight_count >= self.max_inflight:
            state.room.clear()
            await state.room.wait()
        readable = state.leases.readable
        if not readable:
            state.leases.changed.clear()
            await wait_event(state.leases.changed, self.block_ms / 1000)
            return []
        count = min(self.batch, self.max_inflight - state.inflight_count)
        if is_cluster(self._redis):
            rows = await state.slot_reads.fetch(
                {p: self.stream(state.topic, p) for p in readable},
                lambda names, share: read_on_slot(
                    cast("RedisCluster", self._redis),
                    state.group,
                    state.name,
                    names,
                    share,
                    self.block_ms,
                ),
                count,
            )
            return self._entries(rows)
        streams = {self.stream(state.topic, p): ">" for p in readable}
        state.reading.update(readable)
        try:
            response = await self._redis.xreadgroup(
                state.group,
                state.name,
                streams,  # type: ignore[arg-type]
                count=count,
                block=self.block_ms,
            )
        finally:
            state.reading.clear()
        return self._entries(
            cast("list[tuple[str, list[tuple[str, dict[str, str]]]]]", response or [])
        )

    def _entries(self, rows: list[tuple[str, list[tuple[str, dict[str, str]]]]]) -> list[Entry]:
        return [
            (self._partition_of_stream(stream), entry_id, fields, 1)
            for stream, stream_entries in rows
            for entry_id, fields in stream_entries
        ]

    async def _recover(self, state: _Consumer) -> list[Entry]:
        """Pending entries of partitions just taken over (all) or stale ones (idle too long)."""
        for partition in state.leases.take_acquired():
            state.recover[partition] = 0
        if time.monotonic() >= state.next_stale_check:
            state.next_stale_check = time.monotonic() + self.claim_idle_ms / 1000
            for partition in state.leases.readable:
                state.recover.setdefault(partition, self.claim_idle_ms)
        while state.recover:
            partition, min_idle = next(iter(state.recover.items()))
            if partition not in state.leases.owned:
                del state.recover[partition]
                continue
            state.reading.add(partition)
            try:
                entries = await autoclaim(
                    self._redis,
                    self.stream(state.topic, partition),
                    state.group,
                    state.name,
                    min_idle=min_idle,
                    skip=state.inflight.get(partition, set()),
                    batch=self.batch,
                )
            finally:
                state.reading.discard(partition)
            del state.recover[partition]
            if entries:
                log.info(
                    "reclaimed pending entries",
                    extra={"topic": state.topic, "partition": partition, "count": len(entries)},
                )
                return [(partition, i, f, n) for i, f, n in entries]
        return []

    async def _keep_leases(self, state: _Consumer) -> None:
        failures = 0
        while not self._closed:
            try:
                await state.leases.tick()
                failures = 0
                delay = self.lease_ms / 3000
            except TRANSIENT:
                failures += 1
                delay = min(self._outage.delay(failures), self.lease_ms / 3000)
                log.warning(
                    "redis unavailable while renewing partition leases",
                    extra={"topic": state.topic},
                    exc_info=True,
                )
            except Exception:
                log.exception("partition lease upkeep failed", extra={"topic": state.topic})
                delay = self.lease_ms / 3000
            await asyncio.sleep(delay)

    async def _stop_consumer(self, state: _Consumer) -> None:
        self._consumers.discard(state)
        task, state.task = state.task, None
        if task is not None:
            await cancel_and_wait(task)
            state.slot_reads.cancel()  # what they took is handed back just below
            try:
                async with asyncio.timeout(2):
                    for partition in sorted(state.leases.owned):
                        stream = self.stream(state.topic, partition)
                        limit = self.max_inflight + 2 * self.batch
                        await hand_back(self._redis, stream, state.group, state.name, limit)
                    await state.leases.release_all()
            except (TimeoutError, RedisConnectionError, RedisTimeoutError, OSError):
                log.warning("could not release partition leases; they will lapse", exc_info=True)

    async def _ensure_groups(self, topic: str, group: str) -> bool:
        async def create() -> list[Any]:
            async with self._redis.pipeline(transaction=False) as pipe:
                for p in range(self.partitions):
                    pipe.xgroup_create(
                        self.stream(topic, p), group, id=self.start_id, mkstream=True
                    )
                results: list[Any] = await pipe.execute(raise_on_error=False)
                return results

        for result in await self._retrying(f"create group {group} on {topic}", create):
            if isinstance(result, Exception) and "BUSYGROUP" not in str(result):
                raise result
        return True

    def _partition_of_stream(self, stream: str) -> int:
        return int(stream.rpartition(":")[2])

    # -- close -----------------------------------------------------------------------------------
    async def close(self) -> None:
        """Consumers' iterators end (giving their partitions back), later publishes raise
        ``BusClosed``. Does not close the Redis client (its creator does)."""
        if self._closed:
            return
        self._closed = True
        self._closed_event.set()
        await asyncio.gather(
            *(self._stop_consumer(state) for state in list(self._consumers)),
            return_exceptions=True,
        )

    # -- helpers ---------------------------------------------------------------------------------
    async def _until_closed(
        self, work: Coroutine[Any, Any, T], stopped: Latch | None = None
    ) -> T | None:
        """``work``'s result, or None as soon as the bus closes or ``stopped`` is set (``work``
        is cancelled). The two ends are the latches' shared futures: no task per wait."""
        task = asyncio.ensure_future(work)
        racing: set[asyncio.Future[Any]] = {task}
        racing.update(latch.future() for latch in (self._closed_event, stopped) if latch)
        try:
            await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
        finally:
            await cancel_and_wait(task)
        return task.result() if task.done() and not task.cancelled() else None
