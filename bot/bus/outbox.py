"""The gateway's ordered outbox: what the platform adapters publish through on the Redis
Streams bus.

Why: ``RedisStreamsBus.publish`` rides out a Redis outage by retrying, each call on its own
jittered timer. A gateway that held every inbound message in its own retrying call therefore
published a conversation's messages in whatever order the timers fired once Redis was back,
and the workers answered them out of order; and a gateway stopped during the outage dropped
what it held, although the platform already had its acknowledgement (Slack's HTTP 200).

So the adapters publish into this outbox instead:

- ``publish`` fixes the order when it is called (synchronously, before any ``await``): the
  event joins the FIFO of its conversation (``streams_publish.conversation_of``; events without
  one share a FIFO). One pump per FIFO publishes its events through the real bus strictly one
  after the other, however long Redis is away; at most ``concurrency`` pumps publish at once.
- ``publish`` returns once the event is *held*, not once it is in Redis: from then on it is
  published, or written to the spool at shutdown, so the adapter may acknowledge the platform.
  The id it returns is the outbox's (``outbox:<n>``), not the stream entry's.
- Bounded: while the outbox holds more than ``limit`` events, ``publish`` waits (backpressure
  to the adapter; the waiting event is already in line, so even a cancelled wait loses nothing).
- ``close`` (after the adapters closed: no new intake) gives the pumps ``flush_seconds`` to
  publish what is held, then writes the rest to the spool (``bot.bus.spool``) and logs one line
  with both counts. ``recover`` (at start, before any adapter runs) puts the spooled events of
  earlier runs in line first, in their original order; each file is removed once all of its
  events are published (or spooled again by this run's ``close``).
- ``consume`` delegates to the bus; ``drain`` waits for the outbox to empty, then for the bus.

Only the gateway side needs this (``--role gateway``, and ``--role all`` on Redis Streams).
The router publishes through the bus itself: its follow-ups must be in Redis before it acks.
The in-process bus needs none: its ``publish`` never waits for an outage.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel

from bot.bus.base import BusClosed, Delivery, EventBus
from bot.bus.spool import Claim, Spool
from bot.bus.streams_publish import conversation_of
from bot.ops.aio import cancel_and_wait

log = logging.getLogger("chorus.bus")

M = TypeVar("M", bound=BaseModel)

DEFAULT_LIMIT = 10_000
DEFAULT_FLUSH_SECONDS = 5.0
DEFAULT_CONCURRENCY = 64


@dataclass(slots=True)
class _Held:
    seq: int  # arrival order over the whole outbox (the spool keeps it)
    topic: str
    event: BaseModel
    claim: Claim | None  # the spool file it was recovered from


class Outbox:
    """``EventBus`` that holds each conversation's events in order in front of ``bus``."""

    def __init__(
        self,
        bus: EventBus,
        *,
        spool: Spool | None = None,
        limit: int = DEFAULT_LIMIT,
        flush_seconds: float = DEFAULT_FLUSH_SECONDS,
        concurrency: int = DEFAULT_CONCURRENCY,
        partition_key: Callable[[BaseModel], str | None] = conversation_of,
    ) -> None:
        if limit < 1 or concurrency < 1 or flush_seconds < 0:
            raise ValueError("limit and concurrency must be positive, flush_seconds not negative")
        self.bus = bus
        self.spool = spool
        self.limit = limit
        self.flush_seconds = flush_seconds
        self._partition_key = partition_key
        self._seq = itertools.count(1)
        self._queues: dict[str | None, deque[_Held]] = {}
        self._pumps: dict[str | None, asyncio.Task[None]] = {}
        self._slots = asyncio.Semaphore(concurrency)
        self._claims: list[Claim] = []
        self._depth = 0
        self._room = asyncio.Event()
        self._room.set()
        self._empty = asyncio.Event()
        self._empty.set()
        self._closed = False
        self.published = 0  # events this outbox handed to the bus
        self.spooled = 0  # events written to the spool at close
        self.recovered = 0  # events read back from the spool at start
        self.dropped = 0  # events the bus refused for good (not an outage: a bug)

    @property
    def depth(self) -> int:
        """Events held: accepted and not yet in Redis."""
        return self._depth

    # -- the EventBus protocol ---------------------------------------------------------------
    async def publish(self, topic: str, event: BaseModel) -> str:
        """Hold ``event`` in its conversation's line; return once it is held (see the module
        docstring), after waiting while the outbox is over its limit."""
        if self._closed:
            raise BusClosed(f"the outbox is closed; cannot publish to {topic!r}")
        if self.spool is not None:
            self.spool.check(event)  # a model the spool cannot read back fails here, not at close
        event.model_dump_json()  # fails here, in the adapter, if it cannot cross a process
        held = self._hold(topic, event, None)
        while self._depth > self.limit and not self._closed:
            self._room.clear()
            await self._room.wait()
        return f"outbox:{held.seq}"

    def consume(
        self, topic: str, model: type[M], *, group: str = "default", consumer: str = ""
    ) -> AsyncIterator[Delivery[M]]:
        return self.bus.consume(topic, model, group=group, consumer=consumer)

    async def stop_consuming(self, topic: str, group: str) -> None:
        await self.bus.stop_consuming(topic, group)

    async def drain(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 (the contract)
        """Wait until the outbox is empty and then until the bus has drained."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        try:
            async with asyncio.timeout_at(deadline):
                await self._empty.wait()
        except TimeoutError:
            raise TimeoutError(
                f"the outbox did not empty within {timeout}s; {self._depth} events held"
            ) from None
        await self.bus.drain(None if deadline is None else max(0.0, deadline - loop.time()))

    async def close(self) -> None:
        """Publish what is held for up to ``flush_seconds``, spool the rest, close the bus."""
        if self._closed:
            return
        self._closed = True
        self._room.set()  # waiting publishers return: their events are held and will be spooled
        before = self.published
        if self._depth and self.flush_seconds > 0:
            try:
                async with asyncio.timeout(self.flush_seconds):
                    await self._empty.wait()
            except TimeoutError:
                pass
        await asyncio.gather(*(cancel_and_wait(t) for t in list(self._pumps.values())))
        left = sorted((h for queue in self._queues.values() for h in queue), key=lambda h: h.seq)
        where = await self._spool_rest(left)
        level = logging.WARNING if left else logging.INFO
        log.log(
            level,
            "outbox closed",
            extra={
                "published": self.published - before,
                "published_total": self.published,
                "spooled": self.spooled,
                "spool": where,
            },
        )
        await self.bus.close()

    # -- start: the spool of earlier runs --------------------------------------------------------
    async def recover(self) -> int:
        """Put the events spooled by earlier runs in line, before anything new; returns their
        count. Call once, before the adapters start publishing."""
        if self.spool is None:
            return 0
        if not await asyncio.to_thread(self.spool.writable):
            log.warning(
                "the spool directory is not writable: a gateway stopped while Redis is down "
                "would lose the messages it holds (set CHORUS_SPOOL_DIR to a writable volume)",
                extra={"dir": str(self.spool.directory)},
            )
        claims = await asyncio.to_thread(self.spool.claim)
        for claim in claims:
            if not claim.events:
                claim.finish()
                continue
            self._claims.append(claim)
            for topic, event in claim.events:
                self._hold(topic, event, claim)
            self.recovered += len(claim.events)
        if claims:
            log.warning(
                "outbox recovered spooled events; publishing them first",
                extra={"recovered": self.recovered, "files": len(claims)},
            )
        return self.recovered

    # -- internals -------------------------------------------------------------------------------
    def _hold(self, topic: str, event: BaseModel, claim: Claim | None) -> _Held:
        """Join the line of ``event``'s conversation; synchronous, so the order is the order
        of the calls. Starts the line's pump when it has none."""
        key = self._partition_key(event)
        held = _Held(seq=next(self._seq), topic=topic, event=event, claim=claim)
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = deque()
        queue.append(held)
        self._depth += 1
        self._empty.clear()
        if key not in self._pumps:
            self._pumps[key] = asyncio.create_task(self._pump(key, queue), name=f"outbox:{key}")
        return held

    async def _pump(self, key: str | None, queue: deque[_Held]) -> None:
        """Publish ``queue`` head first, one event at a time, each riding out any outage."""
        try:
            while queue:
                held = queue[0]
                async with self._slots:
                    try:
                        await self.bus.publish(held.topic, held.event)
                        self.published += 1
                    except BusClosed:
                        return  # the bus closed under us (only ever at close): spooled
                    except Exception:
                        self.dropped += 1
                        log.exception(
                            "the bus refused an event for good; dropped",
                            extra={"topic": held.topic, "event": type(held.event).__name__},
                        )
                queue.popleft()
                self._settle(held)
        finally:
            if self._pumps.get(key) is asyncio.current_task():
                del self._pumps[key]
            if not queue and self._queues.get(key) is queue:
                del self._queues[key]

    def _settle(self, held: _Held) -> None:
        self._depth -= 1
        if self._depth <= self.limit:
            self._room.set()
        if not self._depth:
            self._empty.set()
        claim = held.claim
        if claim is not None:
            claim.pending -= 1
            if not claim.pending:
                claim.finish()
                self._claims.remove(claim)

    async def _spool_rest(self, left: list[_Held]) -> str | None:
        """Write ``left`` to the spool; then the recovered files are done with (their unpublished
        events are in the new file). If the spool cannot be written they stay for the next start,
        and what was new is lost: logged as an error with its count."""
        where: str | None = None
        if left and self.spool is not None:
            try:
                path, self.spooled = await asyncio.to_thread(
                    self.spool.write, [(h.topic, h.event) for h in left]
                )
                where = str(path)
            except OSError:
                log.exception(
                    "could not write the outbox spool; held events are lost",
                    extra={
                        "lost": sum(h.claim is None for h in left),
                        "dir": str(self.spool.directory),
                    },
                )
                for claim in self._claims:
                    claim.release()
                self._claims.clear()
                return None
        elif left:
            log.error(
                "outbox closed with no spool; held events are lost", extra={"lost": len(left)}
            )
        for claim in self._claims:
            claim.finish()
        self._claims.clear()
        return where
