"""Stage six, commit: the reply and everything the turn leaves behind, recorded exactly once.

Each owner says what changed (``bot.state.turn.TurnChanges``): the bus the reply (on a bus
whose streams live in the store: ``TransactionalBus``) and the ack of the message's stream
entry; the history the turn's two lines; memory the author's activity, the insights job and
the conversation's summary schedule (unless the scope turns memory or insights off, or the
author is a bot); the live-chat policy what the turn decided (answered, cooldowns, a pause);
the safety gate the turn's tokens (quotas) and its cost reservation settled at the real cost
(the daily cost cap). The claim writes them all with its
"done" marker in one atomic step (``bot.state.claims``), shielded so that a cancellation (the
shutdown grace running out) waits for it instead of cutting it. On the in-process bus the reply
is published just before, and its consumer (the platform's sender) takes it before the records
are written: the user's reply does not wait for the turn's bookkeeping. The conversation's next
message still waits for them (its worker runs one turn at a time).

A user's activity needs no finer grain than a minute per conversation (their memory's TTL is
days), so ``TouchThrottle`` records it at most that often: a busy chat's commit stays small.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from bot.bus.base import EventBus, TransactionalBus
from bot.bus.topics import outbound_topic
from bot.engagement.turns import LiveChat
from bot.events import ChatMessage, Reply, utcnow
from bot.memory import summaries
from bot.memory.buffers import MemoryStore
from bot.memory.insight_queue import InsightJob
from bot.memory.insight_queue import due as insight_due
from bot.ops.aio import shielded
from bot.ops.metrics import MetricsSink
from bot.router.items import Item
from bot.router.observe import Throttle, TurnObserver
from bot.router.scoping import Profile
from bot.safety.gate import SafetyGate
from bot.state.claims import Claim, Claims
from bot.state.history import HistoryEntry
from bot.state.turn import HistoryAppend, TurnChanges

TOUCH_EVERY = 60.0
TOUCHED_CACHE = 10_000


class Commit:
    """The commits of one router's turns."""

    def __init__(
        self,
        *,
        bus: EventBus,
        claims: Claims,
        safety: SafetyGate,
        observer: TurnObserver,
        metrics: MetricsSink,
        memory: MemoryStore | None = None,
        engagement: LiveChat | None = None,
    ) -> None:
        self.bus = bus
        # a runtime Protocol check is slow; the bus never changes, so it is made once
        self.transactional = bus if isinstance(bus, TransactionalBus) else None
        self.claims = claims
        self.safety = safety
        self.observer = observer
        self.metrics = metrics
        self.memory = memory
        self.engagement = engagement
        self.touched = TouchThrottle()
        self.clock: Callable[[], float] = time.monotonic  # for the activity throttle

    async def reply(
        self,
        item: Item,
        claim: Claim,
        text: str,
        *,
        is_error: bool = False,
        kept: Kept | None = None,
    ) -> None:
        """Send ``text`` and record it; with ``kept``, an answered turn: its history lines,
        activity and schedules too."""
        message = item.message
        reply = self._reply(item, text, is_error=is_error)
        topic = outbound_topic(message.platform)
        transactional = self.transactional
        # On a transactional bus the delivery's ack rides in the commit too (one round trip
        # fewer); ``ack`` after it then only settles the consumer's bookkeeping.
        delivery = item.delivery if transactional is not None else None
        changes = dataclasses.replace(
            self._kept(message, text, kept) if kept is not None else TurnChanges(),
            reply=transactional.publish_change(topic, reply) if transactional else None,
            ack=delivery.ack_change if delivery is not None else None,
            channel=self.engagement.save_for(message) if self.engagement is not None else None,
            usage=self.safety.usage_of(message),
            cost=self.safety.cost_of(message),
        )

        async def write() -> None:
            if transactional is None:
                await self.bus.publish(topic, reply)
                # The reply's consumer (the platform's sender) was woken by the publish: it
                # takes the reply now, before the records below, which on the embedded store
                # run without giving the event loop back.
                await asyncio.sleep(0)
            await self.claims.record(claim, changes)
            item.progress.committed = True
            if claim.recorded and delivery is not None:
                delivery.acked_in_commit()

        await shielded(write())
        self.observer.committed(item, is_error=is_error)  # the turn log, written by the tick
        self.metrics.message_out(message.platform)
        if self.engagement is not None:
            self.engagement.spoke(message.conversation)

    async def settle(self, item: Item, claim: Claim) -> None:
        """Mark the message done without a reply (the author already has the period's
        notice): recorded like any answered message, so a redelivery is not answered either."""
        message = item.message
        channel = self.engagement.save_for(message) if self.engagement is not None else None

        changes = TurnChanges(channel=channel, cost=self.safety.cost_of(message))

        async def write() -> None:
            await self.claims.record(claim, changes)
            item.progress.committed = True

        await shielded(write())
        self.observer.committed(item, sent=False)

    async def send(self, item: Item, text: str, *, is_error: bool = False) -> None:
        """A reply outside any commit (an apology after a failure)."""
        reply = self._reply(item, text, is_error=is_error)
        await self.bus.publish(outbound_topic(item.message.platform), reply)
        self.metrics.message_out(item.message.platform)
        if self.engagement is not None:
            self.engagement.spoke(item.message.conversation)

    def _reply(self, item: Item, text: str, *, is_error: bool) -> Reply:
        message = item.message
        return Reply(
            conversation=message.conversation,
            text=self.safety.guard(message, text),  # every reply's last check
            reply_to_id=item.reply_to_id,
            addressed_user_ids=item.addressed,
            in_reply_to_platform=message.platform,
            is_error=is_error,
            budget_hold=item.progress.hold,
        )

    def _kept(self, message: ChatMessage, text: str, kept: Kept) -> TurnChanges:
        """What an answered turn leaves besides its reply: its history lines, kept past the
        window only where the scope summarises them, and (unless the scope turns memory off)
        the author's activity, insights job and the conversation's summary schedule."""
        now, profile = utcnow(), kept.profile
        entries = turn_entries(message, text, now)
        history = HistoryAppend(message.conversation, entries, keep=profile.summaries is not None)
        memory = self.memory
        if memory is None or not profile.memory:
            return TurnChanges(history=history)
        author, conv = message.author, message.conversation
        touch = self.touched.due(message, self.clock())
        activity = memory.activity(message.platform, author.id, conv, now=now) if touch else None
        settings, plan = memory.settings, profile.summaries
        summary = None
        if profile.insights and plan is not None:
            ttl = settings.history_ttl_seconds
            summary = summaries.due(
                conv, plan, now, waiting=kept.waiting, touch=touch, ttl_seconds=ttl
            )
        insight = None
        if profile.insights and settings.insights_enabled and not author.is_bot:
            insight = insight_due(
                InsightJob.for_message(message),
                debounce=settings.insights_debounce,
                max_delay=settings.insights_max_delay,
                now=now,
            )
        return TurnChanges(history=history, activity=activity, insight=insight, summary=summary)


@dataclass(frozen=True)
class Kept:
    """An answered turn's scope and whether lines wait for its summariser (the read saw)."""

    profile: Profile
    waiting: bool = False


def turn_entries(message: ChatMessage, answer: str, now: datetime) -> tuple[HistoryEntry, ...]:
    """The user's line and the answer, as the history keeps them."""
    return (
        HistoryEntry.from_message(message),
        HistoryEntry(role="assistant", text=answer, at=now),
    )


class TouchThrottle:
    """Remembers which (platform, user, conversation) was recorded in the last ``every``
    seconds (a ``Throttle`` on the times ``due`` is given; past ``capacity`` the least recently
    recorded is dropped first)."""

    def __init__(self, every: float = TOUCH_EVERY, capacity: int = TOUCHED_CACHE) -> None:
        self.every = every
        self._done = Throttle(every, capacity)

    def due(self, message: ChatMessage, now: float) -> bool:
        """True when this user's activity here was not recorded in the last ``every`` seconds
        (and notes that it is being recorded now)."""
        return self._done.due((message.platform, message.author.id, message.conversation), now)
