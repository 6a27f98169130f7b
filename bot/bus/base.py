"""The event bus between adapters, the router and the workers, and its in-process twin.

Every stage talks through ``EventBus`` so any of them can move into its own process: the
protocol is shaped for Redis Streams (consumer ``group`` and ``consumer`` names, an explicit
``ack`` after the side effect, an ``attempt`` counter for redelivered events), and the in-process
bus serialises every event to JSON on ``publish`` and validates it back on ``consume``, so an
event that could not cross a process boundary fails here too, in tests.

Delivery is at-least-once: a consumer acks *after* its side effect, and publishes any follow-up
event *before* acking, so ``drain`` never sees a quiet moment between the two.

Topics used by the app: ``inbound``, ``outbound:<platform>``, ``turns``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ValidationError

if TYPE_CHECKING:
    from bot.state.turn import StreamAck, StreamAppend

log = logging.getLogger("chorus.bus")

M = TypeVar("M", bound=BaseModel)


class BusClosed(RuntimeError):
    """The bus was closed; nothing more can be published."""


class Delivery(Generic[M]):
    """One event handed to one consumer. Call ``ack`` once its side effect is done."""

    __slots__ = ("_ack_change", "_acked", "_on_ack", "_settle", "attempt", "event", "id", "topic")

    def __init__(
        self,
        *,
        id: str,
        topic: str,
        event: M,
        attempt: int,
        on_ack: Callable[[], Awaitable[None]],
        ack_change: StreamAck | None = None,
        settle: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.id = id
        self.topic = topic
        self.event = event
        self.attempt = attempt
        self._on_ack = on_ack
        self._ack_change = ack_change  # the ack as a change of the turn's commit
        self._settle = settle  # what ``ack`` does besides that command (the bus's bookkeeping)
        self._acked = False

    @property
    def acked(self) -> bool:
        return self._acked

    async def ack(self) -> None:
        """Mark the event handled; a second call does nothing."""
        if not self._acked:
            self._acked = True
            await self._on_ack()

    @property
    def ack_change(self) -> StreamAck | None:
        """The ack as a change of the turn's commit (``bot.state.turn.TurnChanges.ack``), when
        the bus keeps its streams in the state store (Redis Streams: the ``XACK`` rides in the
        commit, one round trip fewer); None otherwise, or once acked. It counts only once
        ``acked_in_commit`` says that commit ran; until then ``ack`` acks as usual (acking
        twice is harmless)."""
        return None if self._acked else self._ack_change

    def acked_in_commit(self) -> None:
        """The commit that carried ``ack_change`` ran: ``ack`` now only settles locally."""
        if self._settle is not None:
            self._on_ack = self._settle

    def __repr__(self) -> str:
        return f"Delivery(id={self.id!r}, topic={self.topic!r}, attempt={self.attempt})"


class EventBus(Protocol):
    async def publish(self, topic: str, event: BaseModel) -> str:
        """Queue ``event`` on ``topic``; returns the delivery id."""
        ...

    def consume(
        self, topic: str, model: type[M], *, group: str = "default", consumer: str = ""
    ) -> AsyncIterator[Delivery[M]]:
        """Deliveries of ``topic`` as ``model``; consumers of one group compete for events."""
        ...

    async def drain(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 (the contract)
        """Return once every published event has been acked (TimeoutError otherwise)."""
        ...

    async def stop_consuming(self, topic: str, group: str) -> None:
        """Stop intake for a graceful shutdown: this process's consumers of ``topic`` in
        ``group`` fetch nothing more and their iterators end; deliveries already handed out
        can still be acked. What was not delivered stays for other consumers (the Redis Streams
        bus keeps its partition leases until ``close``, so nobody reads a partition while its
        deliveries are still being worked on). Other topics and groups are unaffected."""
        ...

    async def close(self) -> None:
        """Stop: consumers' iterators end, later publishes raise ``BusClosed``."""
        ...


@dataclass(slots=True)
class _Envelope:
    id: str
    payload: str


@dataclass(slots=True)
class _Topic:
    """A bounded FIFO with two conditions on one lock (a closable ``asyncio.Queue``)."""

    maxsize: int
    items: deque[_Envelope] = field(default_factory=deque)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    not_empty: asyncio.Condition = field(init=False)
    not_full: asyncio.Condition = field(init=False)
    outstanding: int = 0  # published (or being published) and not yet acked
    group: str | None = None
    stopped: bool = False  # ``stop_consuming``: consumers end, the queue stays

    def __post_init__(self) -> None:
        self.not_empty = asyncio.Condition(self.lock)
        self.not_full = asyncio.Condition(self.lock)


@runtime_checkable
class TransactionalBus(Protocol):
    """A bus whose streams live in the state store (Redis Streams), so a reply can be published
    as a change of the turn's commit (``bot.state.turn.TurnChanges.reply``): the reply and the
    record that it was sent commit together."""

    def publish_change(self, topic: str, event: BaseModel) -> StreamAppend: ...


class InProcessBus:
    """``EventBus`` inside one process: a bounded queue per topic, one consumer group per topic.

    A full topic makes ``publish`` wait (backpressure) instead of growing without bound. Python
    3.11's ``asyncio.Queue`` cannot be shut down (``Queue.shutdown`` is 3.13), so each topic is a
    deque with ``not_empty``/``not_full`` conditions that ``close`` can wake. Events are delivered
    once (``attempt`` is always 1): an unacked event is reported by ``drain``, not redelivered.
    ``close`` does not drain; call ``drain`` first for a clean stop.
    """

    def __init__(self, maxsize: int = 1000) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        self._maxsize = maxsize
        self._topics: dict[str, _Topic] = {}
        self._ids = itertools.count(1)
        self._outstanding = 0
        self._settled: asyncio.Event | None = None  # created on first use: no loop in __init__
        self._closed = False

    async def publish(self, topic: str, event: BaseModel) -> str:
        if self._closed:
            raise BusClosed(f"the event bus is closed; cannot publish to {topic!r}")
        payload = event.model_dump_json()  # proves the event can cross a process boundary
        envelope = _Envelope(id=str(next(self._ids)), payload=payload)
        state = self._topic(topic)
        self._track(state, +1)
        try:
            async with state.not_full:
                await state.not_full.wait_for(
                    lambda: self._closed or len(state.items) < state.maxsize
                )
                if self._closed:
                    raise BusClosed(f"the event bus closed while publishing to {topic!r}")
                state.items.append(envelope)
                state.not_empty.notify()
        except BaseException:
            self._track(state, -1)
            raise
        return envelope.id

    async def consume(
        self, topic: str, model: type[M], *, group: str = "default", consumer: str = ""
    ) -> AsyncIterator[Delivery[M]]:
        state = self._topic(topic)
        if state.group is None:
            state.group = group
        elif state.group != group:
            raise ValueError(
                f"InProcessBus has one consumer group per topic; {topic!r} is consumed by "
                f"group {state.group!r}, not {group!r} (use the Redis Streams bus for fan-out)"
            )
        while True:
            async with state.not_empty:
                await state.not_empty.wait_for(
                    lambda: self._closed or state.stopped or bool(state.items)
                )
                if self._closed or state.stopped:
                    return
                envelope = state.items.popleft()
                state.not_full.notify()
            try:
                event = model.model_validate_json(envelope.payload)
            except ValidationError:
                log.warning(
                    "dropping an event that does not fit its model",
                    extra={
                        "topic": topic,
                        "event_id": envelope.id,
                        "model": model.__name__,
                        "consumer": consumer,
                    },
                    exc_info=True,
                )
                self._track(state, -1)
                continue
            yield Delivery(
                id=envelope.id, topic=topic, event=event, attempt=1, on_ack=self._acker(state)
            )

    async def drain(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        settled = self._settled_event()
        try:
            async with asyncio.timeout(timeout):
                while self._outstanding:
                    await settled.wait()
        except TimeoutError:
            busy = ", ".join(
                f"{name}={t.outstanding}" for name, t in self._topics.items() if t.outstanding
            )
            raise TimeoutError(
                f"the bus did not drain within {timeout}s; events not yet acked: {busy}"
            ) from None

    async def stop_consuming(self, topic: str, group: str) -> None:
        state = self._topic(topic)
        if state.group not in (None, group):
            return  # (one group per topic here: another group's consumers go on)
        async with state.lock:
            state.stopped = True
            state.not_empty.notify_all()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for name, state in self._topics.items():
            async with state.lock:
                if state.items:
                    log.warning(
                        "bus closed with undelivered events",
                        extra={"topic": name, "dropped": len(state.items)},
                    )
                    for _ in range(len(state.items)):
                        self._track(state, -1)
                    state.items.clear()
                state.not_empty.notify_all()
                state.not_full.notify_all()

    # -- internals ------------------------------------------------------------------------------
    def backlog(self) -> dict[tuple[str, str], tuple[int, int]]:
        """Per (topic, group): events queued and not yet delivered, and events delivered but
        not yet acked. ``outstanding`` counts published-and-not-acked, so the delivered ones are
        what is not queued. Read by the bus gauges (``bot.bus.gauges``)."""
        return {
            (name, state.group or ""): (
                len(state.items),
                max(0, state.outstanding - len(state.items)),
            )
            for name, state in self._topics.items()
        }

    def _topic(self, name: str) -> _Topic:
        state = self._topics.get(name)
        if state is None:
            state = self._topics[name] = _Topic(self._maxsize)
        return state

    def _settled_event(self) -> asyncio.Event:
        if self._settled is None:
            self._settled = asyncio.Event()
            if not self._outstanding:
                self._settled.set()
        return self._settled

    def _track(self, state: _Topic, delta: int) -> None:
        state.outstanding += delta
        self._outstanding += delta
        settled = self._settled_event()
        if self._outstanding:
            settled.clear()
        else:
            settled.set()

    def _acker(self, state: _Topic) -> Callable[[], Awaitable[None]]:
        async def ack() -> None:
            self._track(state, -1)

        return ack
