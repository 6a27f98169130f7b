"""Flow control and shutdown bookkeeping for the router: how many turns it holds, and what a
graceful stop did with them.

Why a bound on *admitted* turns, not only on running ones: a router that moves every delivery
into a per-conversation queue at once lets a burst (or one busy conversation) grow those queues
without limit while the bus never pushes back. The consume loop waits for a free
``Admission`` slot *before* it pulls the next delivery; the delivery holds the slot until its
turn is over (answered, skipped, acked for a live chat, or returned at shutdown), so a message
queued behind a busy conversation holds one too: the queues can never grow past the bound, and
a burst waits on the bus (an in-process topic fills and ``publish`` blocks; a Redis stream
simply keeps its entries) instead of in memory.

``Shutdown`` counts what a graceful stop did: turns finished within the grace, turns abandoned
after it (their claims released, their deliveries left unacked for another worker), and queued
messages returned unstarted. It also holds the event that a second signal sets to cut the grace
short.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from bot.ops.aio import RECANCEL_EVERY
from bot.state.claims import Claim

log = logging.getLogger("chorus.router")

D = TypeVar("D")

RELEASE_TIMEOUT = 2.0  # seconds a cancelled turn may spend giving its claim back
ABANDON_WAIT = 3.0  # seconds to wait for cancelled turns (a commit in flight) to end


class Admission:
    """A counted limit on the turns a router holds (running or queued)."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("the limit of turns in flight must be at least 1")
        self.limit = limit
        self.held = 0
        self.peak = 0  # the high-water mark (benchmarks and tests read it)
        self._room = asyncio.Event()
        self._room.set()
        self.closed = False  # intake stopped: ``room`` gives nothing more

    async def room(self) -> bool:
        """Wait until a slot is free; False once closed. The one consume loop then pulls a
        delivery and ``take``s the slot for it (only it takes slots while it waits, so the
        slot is still free; a live-chat turn may squeeze in, see ``take``)."""
        while not self.closed and self.held >= self.limit:
            self._room.clear()
            await self._room.wait()
        return not self.closed

    def take(self) -> None:
        """Take a slot without waiting: for a delivery pulled after ``room``, or a live-chat
        turn the policy made (no delivery to hold back; at most one per conversation a tick)."""
        self.held += 1
        self.peak = max(self.peak, self.held)

    def release(self) -> None:
        self.held -= 1
        if self.held < self.limit:
            self._room.set()

    async def freeing(self, work: Awaitable[None]) -> None:
        """``work`` (an ack), then the slot back at once, in the same step."""
        try:
            await work
        finally:
            self.release()

    def close(self) -> None:
        """Intake stops: a waiting ``room`` returns False."""
        self.closed = True
        self._room.set()


@dataclass
class Shutdown:
    """What one graceful stop did (logged at its start and end)."""

    grace: float
    started: float = field(default_factory=time.monotonic)
    finished: int = 0  # turns that ended within the grace (answered, skipped or apologised)
    abandoned: int = 0  # turns cancelled after the grace; their claims released
    returned: int = 0  # queued messages never started; left unacked for the next worker
    hurry: asyncio.Event = field(default_factory=asyncio.Event)  # a second signal: stop waiting
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def count(self, finished: bool) -> None:
        """A turn ended during the stop: finished (its answer recorded) or abandoned."""
        if finished:
            self.finished += 1
        else:
            self.abandoned += 1

    def begin(self, running: int, queued: int) -> None:
        log.info(
            "shutting down: stopped taking messages; finishing the turns in flight",
            extra={"running": running, "queued": queued, "grace_s": self.grace},
        )

    def end(self) -> None:
        log.info(
            "shutdown drain finished",
            extra={
                "finished": self.finished,
                "abandoned": self.abandoned,
                "returned": self.returned,
                "seconds": round(time.monotonic() - self.started, 3),
            },
        )
        self.done.set()

    async def wait(self, tasks: set[asyncio.Task[None]]) -> set[asyncio.Task[None]]:
        """Wait for ``tasks`` until the grace is over or ``hurry`` is set; the ones left."""
        pending = {t for t in tasks if not t.done()}
        hurry = asyncio.ensure_future(self.hurry.wait())
        try:
            while pending and not hurry.done():
                left = self.grace - (time.monotonic() - self.started)
                if left <= 0:
                    break
                await asyncio.wait(
                    {*pending, hurry}, timeout=left, return_when=asyncio.FIRST_COMPLETED
                )
                pending = {t for t in pending if not t.done()}
        finally:
            hurry.cancel()
        return pending

    async def abandon(self, tasks: set[asyncio.Task[None]]) -> None:
        """Cancel ``tasks`` (again and again: see ``bot.ops.aio``) and wait for them, at most
        ``ABANDON_WAIT`` seconds: long enough for a shielded commit, not for an outage."""
        deadline = time.monotonic() + ABANDON_WAIT
        while tasks and time.monotonic() < deadline:
            for task in tasks:
                task.cancel()
            _, tasks = await asyncio.wait(tasks, timeout=RECANCEL_EVERY)
        if tasks:
            log.warning(
                "turns still running after the grace; stopping anyway", extra={"count": len(tasks)}
            )


async def pull(
    deliveries: AsyncIterator[D],
    admission: Admission,
    dispatch: Callable[[D], Awaitable[None]],
    stopping: Callable[[], Shutdown | None],
) -> None:
    """The consume loop: wait for a free slot, THEN pull the next delivery and dispatch it
    with the slot. Ends when the iterator does or intake stops; a delivery pulled as intake
    stopped is not dispatched (unacked, it goes to the next worker). The iterator is closed."""
    try:
        while await admission.room():
            try:
                delivery = await anext(deliveries)
            except StopAsyncIteration:
                return
            stop = stopping()
            if stop is not None:
                stop.returned += 1
                return
            admission.take()
            try:
                await dispatch(delivery)
            except BaseException:
                admission.release()  # not dispatched: nothing holds the slot
                raise
    finally:
        close = getattr(deliveries, "aclose", None)
        if close is not None:
            await close()


async def release_quietly(claim: Claim) -> None:
    """Give a cancelled turn's claim back so another worker may take the message at once;
    best effort (bounded): if Redis does not answer, the lease lapses instead."""
    try:
        async with asyncio.timeout(RELEASE_TIMEOUT):
            await claim.release()
    except Exception:
        log.warning("could not release a claim; it will lapse", extra={"key": claim.key})
