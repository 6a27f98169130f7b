"""``TurnStore`` in plain Python objects: the twin of ``bot.state.redis_turn`` for tests.

It keeps each owner's data as that owner means it (a conversation's lines, a user's stored
buffer, their recent conversations, the insights and summary schedules, counters, stream
entries and acks) and applies a turn's changes with the same rules the Redis commands follow:
the history window and what is kept past it, ``/link`` aliases, "later wins" for the insights
job's due time and "first wins" for its deadline, "earlier wins" for a summary's, counters that
add up, a cost reservation settled (its hold gone, its amount spent). Claims have a lease on ``timer`` (monotonic seconds), because exactly-once depends on
it; the other data's TTLs are not modelled (a test twin lives for one test).

Nothing awaits inside a step, so each step is atomic as a Lua script is: one event loop runs
one step at a time. ``tests/test_turn_store_contract.py`` holds it and the Redis store to one
contract.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bot.events import ConversationKey
from bot.state.claims import DONE
from bot.state.engagement import MemoryLiveStore
from bot.state.history import HistoryEntry
from bot.state.turn import (
    Effect,
    Release,
    Renew,
    TurnChanges,
    TurnQuery,
    TurnState,
)

Identity = tuple[str, str]  # (platform, user id)


@dataclass
class InsightJobState:
    """One user's pending insights job, as the queue holds it."""

    rev: int = 0
    name: str = ""
    turns: dict[str, str] = field(default_factory=dict)  # conversation field -> turn JSON
    due_ms: int = 0
    deadline_ms: int | None = None


class MemoryTurnStore:
    """Turns in memory. ``max_messages``/``keep``/``probe`` are the history's window, the lines
    kept past it for the summariser and the lines read past it (``HistoryStore``'s)."""

    def __init__(
        self,
        *,
        max_messages: int = 40,
        keep: int = 0,
        probe: int = 0,
        channels: MemoryLiveStore | None = None,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_messages < 1:
            raise ValueError("max_messages must be at least 1")
        self.max_messages = max_messages
        self.keep = max(keep, 0)
        self.probe = min(max(probe, 0), self.keep)
        self.channels = channels if channels is not None else MemoryLiveStore()
        self.timer = timer
        self.claims: dict[str, tuple[str, float | None]] = {}  # key -> (value, expires at)
        self.history: dict[ConversationKey, list[HistoryEntry]] = {}
        self.buffers: dict[Identity, str] = {}  # an identity's own stored buffer
        self.aliases: dict[Identity, str] = {}  # a linked identity -> its person
        self.people: dict[str, str] = {}  # a person's stored buffer
        self.summaries: dict[ConversationKey, str] = {}
        self.community: dict[ConversationKey, str] = {}
        self.summary_vectors: dict[ConversationKey, dict[str, str]] = {}
        self.user_vectors: dict[Identity, dict[str, str]] = {}
        self.knowledge_versions: dict[str, int] = {}
        self.conversations: dict[Identity, dict[ConversationKey, int]] = {}  # -> epoch seconds
        self.insight_jobs: dict[tuple[str, str, str], InsightJobState] = {}  # (queue, p, u)
        self.summary_due: dict[tuple[str, ConversationKey], int] = {}  # (queue, conv) -> ms
        self.summary_jobs: dict[ConversationKey, tuple[int, bool]] = {}  # ttl days, community
        self.streams: dict[str, list[dict[str, str]]] = {}
        self.acked: set[tuple[str, str, str]] = set()  # (stream, group, entry id)
        self.counters: dict[tuple[str, str | None], int] = {}
        self.holds: dict[str, dict[str, str]] = {}  # a holds hash: hold id -> its value

    # -- the read ---------------------------------------------------------------------------
    async def read(self, query: TurnQuery) -> TurnState:
        conv, who = query.conversation, (query.platform, query.user_id)
        claimed = None
        if query.claim is not None:
            claimed = self._take(query.claim.key, query.claim.token, query.claim.lease_ms)
        lines = self.history.get(conv, [])
        person, memory = None, None
        if query.memory_refresh is not None:
            person = self.aliases.get(who)
            memory = self.people.get(person) if person is not None else self.buffers.get(who)
        summaries = self.summaries.get(conv) if query.summaries else None
        community = self.community.get(conv) if query.summaries and query.community else None
        vectors = query.summaries and query.summary_vectors
        base = query.knowledge_base
        return TurnState(
            claimed=claimed,
            history=list(lines[-self.max_messages :]),
            waiting=self.probe > 0 and len(lines) >= self.max_messages + self.probe,
            person=person,
            memory=memory,
            summaries=summaries,
            community=community,
            summary_vectors=dict(self.summary_vectors.get(conv, {})) if vectors else {},
            user_vectors=dict(self.user_vectors.get(who, {})) if query.user_vectors else {},
            knowledge_version=self.knowledge_versions.get(base, 0) if base is not None else 0,
        )

    # -- the claim's steps ----------------------------------------------------------------------
    async def take(self, key: str, token: str, lease_ms: int) -> object:
        return self._take(key, token, lease_ms)

    async def remaining_ms(self, key: str) -> int:
        held = self._value(key)
        if held is None:
            return -2
        expires = self.claims[key][1]
        return -1 if expires is None else max(0, round((expires - self.timer()) * 1000))

    async def if_holds(self, key: str, token: str, effect: Effect) -> bool:
        if self._value(key) != token:
            return False
        if isinstance(effect, Renew):
            self.claims[key] = (token, self.timer() + effect.lease_ms / 1000)
        elif isinstance(effect, Release):
            del self.claims[key]
        else:
            self.apply(effect.changes)
            self.claims[key] = (DONE, self.timer() + effect.done_seconds)
        return True

    def _take(self, key: str, token: str, lease_ms: int) -> object:
        previous = self._value(key)
        if previous is None:
            self.claims[key] = (token, self.timer() + lease_ms / 1000)
        return previous

    def _value(self, key: str) -> str | None:
        held = self.claims.get(key)
        if held is None:
            return None
        value, expires = held
        if expires is not None and self.timer() >= expires:
            del self.claims[key]
            return None
        return value

    # -- the commit ---------------------------------------------------------------------------
    async def write(self, changes: TurnChanges) -> None:
        """``changes``, guarded by no claim."""
        self.apply(changes)

    def apply(self, changes: TurnChanges) -> None:
        """A turn's changes (``if_holds`` applies them under the claim)."""
        if changes.reply is not None:
            self.streams.setdefault(changes.reply.stream, []).append(dict(changes.reply.fields))
        if changes.ack is not None:
            self.acked.add((changes.ack.stream, changes.ack.group, changes.ack.entry_id))
        if changes.history is not None:
            lines = self.history.setdefault(changes.history.conversation, [])
            lines.extend(changes.history.entries)
            cap = self.max_messages + (self.keep if changes.history.keep else 0)
            del lines[:-cap]
        if (activity := changes.activity) is not None:
            moment = int(activity.at.timestamp())
            convs = self.conversations.setdefault((activity.platform, activity.user_id), {})
            convs[activity.conversation] = moment
            recent = sorted(
                ((at, c) for c, at in convs.items() if at > moment - activity.window_seconds),
                key=lambda item: item[0],
            )[-activity.max_conversations :]
            convs.clear()
            convs.update((c, at) for at, c in recent)
        if (summary := changes.summary) is not None:
            where = (summary.queue, summary.conversation)
            if summary.due_ms is not None:
                self.summary_due[where] = min(summary.due_ms, self.summary_due.get(where, 2**62))
            if summary.ttl_days is not None:
                self.summary_jobs[summary.conversation] = (summary.ttl_days, summary.community)
        if (insight := changes.insight) is not None:
            job = self.insight_jobs.setdefault(
                (insight.queue, insight.platform, insight.user_id), InsightJobState()
            )
            job.rev += 1
            job.name = insight.display_name
            job.turns[insight.conversation_field + str(insight.conversation)] = insight.ref
            job.due_ms = max(job.due_ms, insight.due_ms)
            if job.deadline_ms is None:
                job.deadline_ms = insight.deadline_ms
        if changes.channel is not None:
            channel = changes.channel
            self.channels.apply(channel.conversation, channel.changes, channel.now)
        for counter in changes.usage:
            where_counted = (counter.key, counter.field)
            self.counters[where_counted] = self.counters.get(where_counted, 0) + counter.amount
        if (cost := changes.cost) is not None:
            self.holds.get(cost.holds_key, {}).pop(cost.hold, None)
            spent = (cost.spent_key, None)
            self.counters[spent] = self.counters.get(spent, 0) + cost.amount
