"""A turn's two Redis round trips: what it reads (the claim, the history, the author's
memory, the conversation's summaries and community notes: ``read_turn``) and what an answered
turn leaves behind besides the reply (its history lines, the author's activity, the insights job
and the summary schedule: ``Kept``, ``queue_activity``).

Why apart from ``core``: the message path decides *whether* and *what* to answer; this module
decides what is read before and written down after, the writes all queued into the one pipeline
that also marks the message done (so a turn is recorded exactly once or not at all). It holds
the one piece of state that is not Redis's: the throttle that records a user's activity at most
once a minute per conversation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from cachetools import TTLCache
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from bot.bus.claims import Claim, Claims
from bot.events import ChatMessage, ConversationKey
from bot.memory import summaries
from bot.memory.buffers import MemoryStore, UserBuffer
from bot.memory.enrichment import render_context
from bot.memory.insight_queue import InsightJob, queue_enqueue
from bot.memory.recall import Recall
from bot.memory.vectors import Recalled
from bot.router.scoping import Profile
from bot.state.history import HistoryEntry, HistoryStore
from bot.state.outages import until_redis_answers

__all__ = ["Kept", "Recall", "TurnRead", "context_for", "read_turn"]

log = logging.getLogger("chorus.router")

# A user's activity (memory TTL of days, conversation set of a window of days) needs no finer
# grain than this; skipping the 5 commands for a user who spoke in the same conversation a moment
# ago halves the commit of a busy chat.
TOUCH_EVERY = 60.0
TOUCHED_CACHE = 10_000


@dataclass(frozen=True)
class TurnRead:
    history: list[HistoryEntry]
    buffer: UserBuffer | None
    recall: Recalled | None = None
    channel_memory: summaries.ChannelMemory | None = None
    waiting: bool = False  # lines past the history window wait for the summariser


@dataclass(frozen=True)
class Kept:
    """What an answered turn leaves besides its reply: its history lines, and (``at`` the
    answer's time) the author's activity, the insights job and the summary schedule."""

    entries: tuple[HistoryEntry, ...]
    at: datetime
    profile: Profile
    waiting: bool = False

    @property
    def activity(self) -> datetime | None:
        return self.at if self.profile.memory else None  # memory off: no activity, no insights

    def queue_history(self, pipe: Pipeline, history: HistoryStore, conv: ConversationKey) -> None:
        """The lines, kept past the window only where the scope summarises them."""
        history.queue_append(pipe, conv, *self.entries, keep=self.profile.summaries is not None)


async def read_turn(
    redis: Redis,
    history: HistoryStore,
    memory: MemoryStore | None,
    message: ChatMessage,
    claim: Claim | None,
    recall: Recall | None = None,
    profile: Profile | None = None,
) -> TurnRead | None:
    """Claim the message and read its history, the author's memory and (when the scope keeps
    them) the conversation's summaries and community notes: ONE round trip.

    None when the message was answered already (at-least-once delivery must not mean
    answering twice). If another worker holds the claim, wait for it, then read again.
    With ``recall``, the message's embedding runs during the round trip and the pipeline
    also reads the author's vectors and the scope's knowledge version (``bot.memory.recall``).
    """
    conv, author = message.conversation, message.author
    pending = recall.begin(message, memory=memory is not None) if recall is not None else None
    plan = profile.summaries if profile is not None and memory is not None else None
    try:
        async with redis.pipeline(transaction=False) as pipe:
            if claim is not None:
                claim.queue_take(pipe)
            history.queue_load(pipe, conv)
            if memory is not None:
                memory.queue_load(pipe, message.platform, author.id)
            vectors = pending is not None and pending.task is not None  # a query to rank by
            mine = summaries.queue_read(pipe, conv, plan, vectors=vectors) if plan else 0
            if pending is not None:
                Recall.queue_read(pipe, pending)
            results = await pipe.execute()
        if claim is not None:
            outcome = claim.taken(results.pop(0))
            if not outcome and pending is not None:  # answered, or another worker has it
                pending.abandon()
            if outcome is None:
                if not await claim.wait_and_take():
                    return None
                return await read_turn(redis, history, memory, message, None, recall, profile)
            if not outcome:
                return None
    except BaseException:
        if pending is not None:
            pending.abandon()
        raise
    extra = pending.width if pending is not None else 0
    ours = results[len(results) - extra :]
    results = results[: len(results) - extra]
    channel_memory = None
    if plan is not None:
        ours_sum = results[len(results) - mine :]
        channel_memory = summaries.parse_read(ours_sum, conv, plan, vectors=vectors)
        results = results[: len(results) - mine]
    buffer = None
    if memory is not None:
        buffer = memory.parse_load(results[1:], platform=message.platform, user_id=author.id)
    recalled = None
    if recall is not None and pending is not None:
        recalled = await recall.finish(pending, ours, buffer)
    return TurnRead(
        history=history.parse_load(conv, results[0]),
        buffer=buffer,
        recall=recalled,
        channel_memory=channel_memory,
        waiting=history.waiting(results[0]),
    )


def context_for(
    read: TurnRead, message: ChatMessage, memory: MemoryStore | None, now: datetime
) -> str:
    """The volatile tail's data: the speaker's notes (``<context>``) and the knowledge block."""
    context = ""
    if memory is not None and read.buffer is not None:
        context = render_context(
            read.buffer, message, memory.settings, now, read.recall, read.channel_memory
        )
    knowledge = read.recall.knowledge if read.recall is not None else ""
    return f"{context}\n{knowledge}" if context and knowledge else context or knowledge


async def commit(
    claims: Claims, claim: Claim, message: ChatMessage, fill: Callable[[Pipeline], None]
) -> None:
    """Record a turn (``fill``'s commands and the done marker) through ``claim``, or, if the
    claim lapsed meanwhile, through ``recommit``: once this returns, the message is recorded,
    here or by the worker that took it over."""
    if not await claim.commit(fill):
        await recommit(claims, message, fill)


async def recommit(claims: Claims, message: ChatMessage, fill: Callable[[Pipeline], None]) -> bool:
    """After ``Claim.commit`` found the claim gone (it lapsed while Redis was away longer than
    the lease): take it again and record the answer we have, unless someone else does. True:
    recorded now. False: another worker recorded its answer.

    When another worker holds the claim (it reclaimed the entry after the outage and is
    answering it), wait for it to finish, or for its claim to lapse and then record ours: this
    worker moves on to the conversation's next message only once this one is recorded. Moving
    on at once let the two workers answer one conversation side by side, the next message
    here while the other still answered this one, so its reply came out after later ones."""

    async def attempt() -> bool:
        while True:
            claim = claims.new(message.platform, message.id)
            if not await claim.wait_and_take():  # free: ours at once; held: waited out
                return False
            if await claim.commit(fill):
                return True

    outcome = await until_redis_answers("record an answer again", attempt)
    log.info("re-took a lapsed claim", extra={"message_id": message.id, "recorded_here": outcome})
    return outcome


def turn_entries(message: ChatMessage, answer: str, now: datetime) -> tuple[HistoryEntry, ...]:
    """The user's line and the answer, as the history keeps them."""
    author = message.author
    return (
        HistoryEntry(
            role="user",
            text=message.text,
            message_id=message.id,
            author_id=author.id,
            author_name=author.display_name or author.id,
            at=message.sent_at,
        ),
        HistoryEntry(
            role="assistant",
            text=answer,
            message_id=None,
            author_id=None,
            author_name="",
            at=now,
        ),
    )


class TouchThrottle:
    """Remembers which (platform, user, conversation) was recorded in the last ``every`` seconds:
    a ``cachetools.TTLCache`` on the times ``due`` is given, at most ``capacity`` entries (the
    least recently recorded dropped first)."""

    def __init__(self, every: float = TOUCH_EVERY, capacity: int = TOUCHED_CACHE) -> None:
        self.every = every
        self.capacity = capacity
        self._now = 0.0
        self._touched: TTLCache[tuple[str, str, ConversationKey], None] = TTLCache(
            capacity, every, timer=lambda: self._now
        )

    def due(self, message: ChatMessage, now: float) -> bool:
        """True when this user's activity here was not recorded in the last ``every`` seconds
        (and notes that it is being recorded now)."""
        key = (message.platform, message.author.id, message.conversation)
        self._now = now
        if key in self._touched:
            return False
        self._touched[key] = None
        return True


def queue_activity(
    pipe: Pipeline, memory: MemoryStore, message: ChatMessage, kept: Kept, touch: bool
) -> None:
    """The author's activity (when ``touch``) and, unless they are a bot or the scope has
    ``insights = false``, their insights job and (where the scope keeps summaries) the
    conversation's summary schedule."""
    author, now = message.author, kept.at
    if touch:
        memory.queue_touch(pipe, message.platform, author.id, message.conversation, now=now)
    insights, plan, settings = kept.profile.insights, kept.profile.summaries, memory.settings
    if insights and plan is not None:
        ttl = settings.history_ttl_seconds
        conv, waiting = message.conversation, kept.waiting
        summaries.queue_record(pipe, conv, plan, now, waiting=waiting, touch=touch, ttl_seconds=ttl)
    if insights and settings.insights_enabled and not author.is_bot:
        queue_enqueue(
            pipe,
            InsightJob.for_message(message),
            debounce=settings.insights_debounce,
            max_delay=settings.insights_max_delay,
            now=now,
        )
