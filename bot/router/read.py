"""Stage three, read: claim the message and read what its turn needs, in one round trip.

What the scope keeps decides what is read (``bot.state.turn.TurnQuery``): the claim, the
conversation's history window, the author's memory (through a ``/link`` alias), the
conversation's summaries and community notes, and for semantic recall the author's note vectors
and the knowledge base's version. The query's embedding (``bot.memory.recall``) is started before
the read and raced against it, so recall adds no round trip.

None means the turn must not run: the message was answered already (delivery is at least once;
answering must be exactly once), or another worker held it and answered it while this one
waited. A store outage is waited out (``bot.state.outages``): every step here is idempotent or
recognises its own claim.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.events import ChatMessage
from bot.memory import summaries
from bot.memory.buffers import MemoryStore, UserBuffer
from bot.memory.recall import Recall
from bot.memory.vectors import Recalled
from bot.router.scoping import Profile
from bot.state.claims import Claim, Claims
from bot.state.history import HistoryEntry
from bot.state.outages import until_redis_answers
from bot.state.turn import TurnQuery, TurnStore


@dataclass(frozen=True)
class TurnRead:
    """What a turn found: its history, the author's buffer (None: memory off), recall, the
    conversation's summaries and notes, and whether lines wait for the summariser."""

    history: list[HistoryEntry]
    buffer: UserBuffer | None
    recall: Recalled | None = None
    channel_memory: summaries.ChannelMemory | None = None
    waiting: bool = False


class Read:
    """The read of one router's turns, over ``store``."""

    def __init__(
        self,
        store: TurnStore,
        claims: Claims,
        *,
        memory: MemoryStore | None = None,
        recall: Recall | None = None,
    ) -> None:
        self.store = store
        self.claims = claims
        self.memory = memory
        self.recall = recall

    async def __call__(
        self, message: ChatMessage, claim: Claim | None, profile: Profile
    ) -> TurnRead | None:
        """Claim ``message`` (unless ``claim`` is None) and read its turn."""
        return await until_redis_answers("read a turn", lambda: self._read(message, claim, profile))

    async def _read(
        self, message: ChatMessage, claim: Claim | None, profile: Profile
    ) -> TurnRead | None:
        memory = self.memory if profile.memory else None
        recall = self.recall
        pending = recall.begin(message, memory=memory is not None) if recall is not None else None
        plan = profile.summaries if memory is not None else None
        vectors = pending is not None and pending.task is not None  # a query to rank by
        query = TurnQuery(
            message.conversation,
            message.platform,
            message.author.id,
            claim=claim.take if claim is not None else None,
            memory_refresh=memory.refresh_seconds if memory is not None else None,
            summaries=plan is not None,
            community=plan is not None and plan.community,
            summary_vectors=plan is not None and vectors,
            user_vectors=pending is not None and pending.vectors,
            knowledge_base=pending.base if pending is not None else None,
        )
        try:
            state = await self.store.read(query)
            if claim is not None:
                outcome = claim.taken(state.claimed)
                if not outcome and pending is not None:  # answered, or another worker has it
                    pending.abandon()
                if outcome is None:
                    if not await claim.wait_and_take():
                        return None
                    return await self._read(message, None, profile)
                if not outcome:
                    return None
        except BaseException:
            if pending is not None:
                pending.abandon()
            raise
        author = message.author
        buffer = None
        if memory is not None:
            buffer = memory.from_read(state, platform=message.platform, user_id=author.id)
        channel_memory = None
        if plan is not None:
            channel_memory = summaries.from_read(state, message.conversation, plan, vectors=vectors)
        recalled = None
        if recall is not None and pending is not None:
            recalled = await recall.finish(pending, state, buffer)
        return TurnRead(state.history, buffer, recalled, channel_memory, state.waiting)
