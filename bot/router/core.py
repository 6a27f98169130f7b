"""The router: each inbound message through the turn's stages, one conversation at a time.

    admit -> screen -> read -> decide -> answer -> commit

``admit`` (with ``screen``) runs in the consume loop, in arrival order: it makes a delivery a
turn (``Item``) or drops it. The turn waits behind its conversation: messages of one
conversation are handled strictly in order by one worker task per active conversation;
different conversations run concurrently up to a limit, and at most ``max_in_flight`` are held
at once, running or queued (``flow``: a burst waits on the bus). Then ``read`` claims the message
and reads its turn in one round trip, ``decide`` settles it without the model or asks the
model, ``answer`` runs the model, ``commit`` sends the reply and records the turn in one atomic
step guarded by the claim. Each stage is a module with typed input and output; this module only
sequences them and keeps the books of the turns in flight.

Delivery is at-least-once; answers are exactly once: the claim makes a redelivered message that
was already answered a duplicate (``read`` returns None), and a store outage mid-turn is waited
out (``bot.state.outages``): the answer is kept and recorded once the store is back, never lost.
``shutdown`` stops intake, lets the turns in progress finish within a grace (the commit
shielded), then cancels the rest, releasing their claims and leaving their deliveries unacked for
the next worker. The router keeps a reference to every task it spawns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from bot.bus.base import Delivery, EventBus
from bot.bus.topics import DELETIONS, INBOUND
from bot.engagement.turns import LiveChat
from bot.events import ChatMessage, ConversationKey, utcnow
from bot.ops.aio import shielded
from bot.ops.metrics import MetricsSink, NullMetrics
from bot.router.admit import Admit
from bot.router.answer import Answer, Failed
from bot.router.commit import Commit, Kept
from bot.router.decide import Ask, Decide, Fixed, Silent, Unpaid
from bot.router.flow import Admission, Shutdown, pull, release_quietly
from bot.router.housekeeping import consume_deletions, dead_letter
from bot.router.items import Drop, Item, turn_item
from bot.router.observe import TurnObserver
from bot.router.read import Read
from bot.router.scoping import FixedScoping, Scoping
from bot.router.texts import apology, crash_apology, too_long
from bot.router.turn import RouterLimits
from bot.state.history import HistoryStore

log = logging.getLogger("chorus.router")

__all__ = ["Router", "RouterLimits", "Stages", "apology", "crash_apology", "too_long"]


@dataclass(frozen=True)
class Stages:
    """A router's stages (``bot.router.build`` wires them from their parts)."""

    admit: Admit
    read: Read
    decide: Decide
    answer: Answer
    commit: Commit


class Router:
    def __init__(
        self,
        *,
        bus: EventBus,
        stages: Stages,
        scoping: Scoping | FixedScoping,
        observer: TurnObserver,
        history: HistoryStore | None = None,
        engagement: LiveChat | None = None,
        limits: RouterLimits | None = None,
        metrics: MetricsSink | None = None,
    ) -> None:
        """``scoping``: each message's profile; ``observer``: the turn log, written by the
        one-second tick; ``history``: where deletions apply (None: deletions are not
        consumed); ``engagement``: the live-chat policy (batches and idle lines come due on
        the tick)."""
        self.bus = bus
        self.stages = stages
        self.scoping = scoping
        self.history = history
        self.observer = observer
        self.engagement = engagement
        self.limits = limits or RouterLimits()
        self.metrics: MetricsSink = metrics or NullMetrics()
        self._queues: dict[ConversationKey, deque[Item]] = {}
        self._workers: dict[ConversationKey, asyncio.Task[None]] = {}
        self._acks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(self.limits.concurrency)
        self.admission = Admission(self.limits.max_in_flight)
        self._loops: set[asyncio.Task[None]] = set()  # the consume loops
        self._ticker: asyncio.Task[None] | None = None
        self._ticking = False  # the ticker is inside a tick (not asleep between two)
        self._ticks_end = False
        self._running = 0
        self._hurry = asyncio.Event()
        self._shutdown: Shutdown | None = None

    async def run(self) -> None:
        """Consume the inbound and deletion topics until the bus closes or ``shutdown``."""
        async with asyncio.TaskGroup() as group:
            consumers = [group.create_task(self._consume_inbound())]
            if self.history is not None:
                consumers.append(group.create_task(consume_deletions(self.bus, self.history)))
            self._ticker = group.create_task(self._tick_forever())
            self._loops.update(consumers)
            await asyncio.wait(consumers)
            self._stop_ticker()
        await self.join()

    @property
    def in_flight(self) -> int:
        """Messages held now, running or queued behind their conversation."""
        return self.admission.held

    @property
    def queued(self) -> int:
        """Messages waiting behind a busy conversation (or for a concurrency slot)."""
        return sum(len(queue) for queue in self._queues.values())

    async def shutdown(self, grace: float) -> None:
        """Stop taking messages; let the turns in progress finish for up to ``grace`` seconds
        (``hurry`` cuts it short); then cancel what is left, releasing each cancelled turn's
        claim. Queued messages are not started. A message not answered is not acked, so the
        bus hands it to the next worker. Call before closing the bus (acks need it open)."""
        if self._shutdown is not None:
            await self._shutdown.done.wait()
            return
        stop = self._shutdown = Shutdown(grace, hurry=self._hurry)
        stop.begin(self._running, self.admission.held - self._running)
        self.admission.close()
        self._stop_ticker()  # no more live-chat turns
        for topic in (INBOUND, DELETIONS) if self.history is not None else (INBOUND,):
            await self.bus.stop_consuming(topic, "agent")
        ticker = {self._ticker} if self._ticker is not None else set()
        left = await stop.wait({*self._workers.values(), *self._acks, *self._loops, *ticker})
        await stop.abandon(left)
        await self.observer.flush_quietly(force=True)
        stop.end()

    def hurry(self) -> None:
        """End the shutdown grace now (a second SIGTERM or SIGINT)."""
        self._hurry.set()

    async def join(self) -> None:
        while self._workers:
            await asyncio.gather(*list(self._workers.values()), return_exceptions=True)

    async def close(self) -> None:
        """Stop at once: ``shutdown`` without a grace."""
        await self.shutdown(0)

    # -- the tick ---------------------------------------------------------------------------
    async def _tick_forever(self) -> None:
        """Once a second: write the held turn records, keep the durable live state, and
        queue the live-chat batches or idle lines that came due."""
        while not self._ticks_end:
            await asyncio.sleep(1.0)
            self._ticking = True
            try:
                await self.observer.flush_quietly()
                if self.engagement is not None:
                    await self.engagement.maintain()  # durable live state: save, refresh, evict
                self.live_tick()
            finally:
                self._ticking = False

    def _stop_ticker(self) -> None:
        """End the tick: at once while it sleeps; inside a tick, once that tick is done, so
        its writes are never cut off half way (the records a flush took would be lost)."""
        self._ticks_end = True
        if self._ticker is not None and not self._ticking:
            self._ticker.cancel()

    def live_tick(self) -> int:
        """Queue the live-chat turns that came due (tests call this instead of waiting)."""
        if self.engagement is None or self._shutdown is not None:
            return 0
        turns = self.engagement.tick()
        for turn in turns:
            self.admission.take()
            self._enqueue(turn_item(turn))
        return len(turns)

    # -- admit (and screen), in the consume loop ------------------------------------------------
    async def _consume_inbound(self) -> None:
        deliveries = self.bus.consume(INBOUND, ChatMessage, group="agent")
        await pull(deliveries, self.admission, self._admit, lambda: self._shutdown)

    async def _admit(self, delivery: Delivery[ChatMessage]) -> None:
        """Queue the delivery's turn (it holds the admission slot the consume loop took), or
        settle it at once (dead letter, a line not answered now) and free the slot."""
        profile = self.scoping.profile(delivery.event)  # first: it learns the channel's server
        if self.engagement is not None:  # a channel's durable state, when it becomes active here
            await self.engagement.prepare(delivery.event)
        admitted = self.stages.admit(delivery, profile)
        if isinstance(admitted, Drop):
            if admitted.dead_letter:
                self._background(dead_letter(self.bus, self.metrics, delivery), slot=True)
            else:
                self._background(delivery.ack(), slot=True)
            return
        self._enqueue(admitted)

    def _background(self, work: Coroutine[Any, Any, None], *, slot: bool = False) -> None:
        """Run ``work`` as a tracked task; ``slot``: free an admission slot as it ends."""
        task = asyncio.create_task(self.admission.freeing(work) if slot else work)
        self._acks.add(task)
        task.add_done_callback(self._acks.discard)

    def _enqueue(self, item: Item) -> None:
        conv = item.message.conversation
        self._queues.setdefault(conv, deque()).append(item)
        if conv not in self._workers:
            self._workers[conv] = asyncio.create_task(self._drain(conv), name=f"conv:{conv}")

    async def _drain(self, conv: ConversationKey) -> None:
        queue = self._queues[conv]
        try:
            while queue and self._shutdown is None:
                async with self._slots:
                    if self._shutdown is not None:
                        break  # stopping: what has not started is left for the next worker
                    item = queue.popleft()
                    try:
                        await self._turn(item)
                    finally:
                        self.admission.release()
        finally:
            self._workers.pop(conv, None)
            if queue and self._shutdown is not None:
                self._shutdown.returned += len(queue)
            for _ in range(len(queue)):
                self.admission.release()
            self._queues.pop(conv, None)

    async def _turn(self, item: Item) -> None:
        self._running += 1
        ended = False
        try:
            await self._handle(item)
            ended = True
        finally:
            self._running -= 1
            if self._shutdown is not None:
                self._shutdown.count(ended or item.progress.committed)

    # -- read -> decide -> answer -> commit, per conversation --------------------------------------
    async def _handle(self, item: Item) -> None:
        message, stages = item.message, self.stages
        change = item.delivery.ack_change if item.delivery is not None else None
        near = change.stream if change is not None else None  # a cluster's slot: the stream's
        claim = stages.read.claims.new(message.platform, message.id, near)
        profile = self.scoping.profile(message)
        settled = False  # answered, skipped or apologised for: ack (else another worker redoes it)
        try:
            read = await stages.read(message, claim, profile)
            if read is None:
                log.info(
                    "duplicate message skipped",
                    extra={"platform": message.platform, "message_id": message.id},
                )
                settled = True
                return
            async with claim.renewing():
                decision = await stages.decide(
                    item, lambda: stages.answer.prepare(item, read, profile)
                )
                if isinstance(decision, Unpaid):
                    await claim.release()
                elif isinstance(decision, Silent):
                    await stages.commit.settle(item, claim)
                elif isinstance(decision, Fixed):
                    await stages.commit.reply(
                        item, claim, decision.text, is_error=decision.is_error
                    )
                    stages.answer.hooks.replied(message, decision.text)  # plugins' on_reply
                elif isinstance(decision, Ask):
                    answered = await stages.answer(item, read, profile, decision.request)
                    if isinstance(answered, Failed):
                        await claim.release()  # a later delivery of the same message may retry
                        await stages.commit.send(item, apology(), is_error=True)
                    else:
                        kept = Kept(profile, read.waiting)
                        await stages.commit.reply(item, claim, answered.text, kept=kept)
                        stages.answer.hooks.after_reply(message, answered.text)  # as sent
                        self._observe(
                            item, answered.result.llm_seconds + answered.result.tool_seconds
                        )
            settled = True
        except asyncio.CancelledError:
            settled = item.progress.committed
            if not settled:  # give the message back now, not when the lease lapses
                await shielded(release_quietly(claim))
            raise
        except Exception:
            log.exception(
                "failed to handle message",
                extra={"platform": message.platform, "message_id": message.id},
            )
            with contextlib.suppress(Exception):
                await claim.release()
            with contextlib.suppress(Exception):
                await stages.answer.safety.release(message)  # its cost reservation, if any
            await stages.commit.send(item, crash_apology(), is_error=True)
            settled = True
        finally:
            if settled and item.delivery is not None:
                await shielded(item.delivery.ack())

    def _observe(self, item: Item, model_seconds: float) -> None:
        """The framework's own time for an answered turn, and its lag from the platform."""
        self.metrics.observe_overhead(time.perf_counter() - item.received - model_seconds)
        lag = (utcnow() - item.message.sent_at).total_seconds()
        self.metrics.observe_ingest_to_reply(item.message.platform, max(lag, 0.0))
