"""Conversation history: one capped Redis list per conversation, at most one round trip per use.

The reply path reads history once (``LRANGE``) and writes it once (``RPUSH`` + ``LTRIM`` +
``EXPIRE`` in one ``MULTI``/``EXEC``), which keeps a message within the budget of three Redis
round trips. The list is capped so memory stays bounded, and its TTL is refreshed on every append
so a quiet conversation is forgotten after CHORUS_HISTORY_TTL.

Where conversation summaries are on (bot/memory/summaries.py), the list also keeps up to ``keep``
older lines past the window until the summariser has folded them into a summary and removed
them: the window is trimmed by ``LTRIM`` inside the write transaction, and keeping the lines in
the same list is the only way, without Lua, to be sure none is lost before it is summarised (and
every deletion below reaches them too). The prompt still reads only the window; each read also
fetches ``probe`` lines more, so the router learns in the same round trip that lines are waiting.

Deletions (a Discord/Twitch message deleted, a user asking to be forgotten) are rarer and must
not race an append, so they run as ``WATCH`` + ``LREM`` of the exact stored values inside
``MULTI``: if the list changed meanwhile, the transaction is retried. No Lua is needed, so the
embedded store works without the ``lupa`` package.

Why the parsed entries are a hand-rolled LRU (an ``OrderedDict``) and not a
``cachetools.LRUCache``: the map is read once per entry of every turn's history, and an
``LRUCache`` lookup is a chain of Python calls where ``OrderedDict.get`` and ``move_to_end`` are
C. Measured with ``python -m bench.instructions --check`` (the in-process figure per answered
message), ``LRUCache`` here and in ``bot/agent/prompting.py`` made every answered message dearer.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Literal, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bot.events import AwareDatetime, ChatMessage, ConversationKey, utcnow
from bot.state import keys
from bot.state.client import Pipeline, Redis, watched

log = logging.getLogger("chorus.history")

PARSED_CACHE = 4096  # stored values whose parsed entry is kept (about 1 MB at 250 bytes each)


class HistoryEntry(BaseModel):
    """One stored message. Unknown fields are ignored so older readers survive newer writers."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    role: Literal["user", "assistant"]
    text: str
    message_id: str | None = None
    author_id: str | None = None
    author_name: str = ""
    at: AwareDatetime = Field(default_factory=utcnow)

    @classmethod
    def from_message(cls, message: ChatMessage) -> HistoryEntry:
        """The user entry for an inbound message (display name falls back to the user id)."""
        return cls(
            role="user",
            text=message.text,
            message_id=message.id,
            author_id=message.author.id,
            author_name=message.author.display_name or message.author.id,
            at=message.sent_at,
        )


class HistoryStore:
    """Per-conversation history over any Redis client (real or ``memory://``)."""

    def __init__(
        self, redis: Redis, *, max_messages: int, ttl_seconds: int, keep: int = 0, probe: int = 0
    ) -> None:
        """``keep``: lines kept past the window for the summariser (0: none); ``probe``: lines
        read past the window to tell whether that many wait (``waiting``)."""
        if max_messages < 1:
            raise ValueError("max_messages must be at least 1")
        if ttl_seconds < 1:
            raise ValueError("ttl_seconds must be at least 1")
        self._redis = redis
        self.max_messages = max_messages
        self.ttl_seconds = ttl_seconds
        self.keep = max(keep, 0)
        self.probe = min(max(probe, 0), self.keep)
        # Every turn re-reads the same stored values (the list only gains two per turn), and
        # parsing 40 entries with pydantic is a turn's worth of work; entries are frozen, so the parsed
        # objects of recently read values are kept, least recently read dropped first.
        self._parsed: OrderedDict[str, HistoryEntry] = OrderedDict()

    async def append(self, conv: ConversationKey, *entries: HistoryEntry) -> None:
        """Add entries (oldest first), keep the newest ``max_messages``, refresh the TTL."""
        if not entries:
            return
        async with self._redis.pipeline(transaction=True) as pipe:
            self.queue_append(pipe, conv, *entries)
            await pipe.execute()

    def queue_append(
        self, pipe: Pipeline, conv: ConversationKey, *entries: HistoryEntry, keep: bool = True
    ) -> None:
        """``append`` as commands on the caller's pipeline (3 results), so the router can fold
        the history write into its one write round trip per answered message. ``keep=False``:
        trim to the window (a conversation whose scope has no summaries)."""
        key = keys.history(conv)
        pipe.rpush(key, *(entry.model_dump_json() for entry in entries))
        pipe.ltrim(key, -(self.max_messages + (self.keep if keep else 0)), -1)
        pipe.expire(key, self.ttl_seconds)

    async def load(self, conv: ConversationKey, limit: int | None = None) -> list[HistoryEntry]:
        """The most recent ``limit`` entries (default ``max_messages``), oldest first."""
        count = self.max_messages if limit is None else limit
        if count <= 0:
            return []
        raw = await self._redis.lrange(keys.history(conv), -count, -1)
        return self.parse_load(conv, cast("list[str]", raw))  # decoded by connect

    async def load_many(self, convs: Sequence[ConversationKey]) -> list[list[HistoryEntry]]:
        """Each conversation's window (``load``), in one round trip."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for conv in convs:
                self.queue_load(pipe, conv)
            found = await pipe.execute()
        return [self.parse_load(conv, raw) for conv, raw in zip(convs, found, strict=True)]

    def queue_load(self, pipe: Pipeline, conv: ConversationKey) -> None:
        """``load`` as one command (1 result) on the caller's pipeline; see ``parse_load``."""
        pipe.lrange(keys.history(conv), -(self.max_messages + self.probe), -1)

    def waiting(self, raw: Sequence[str]) -> bool:
        """Whether a ``queue_load`` result shows ``probe`` lines waiting past the window."""
        return self.probe > 0 and len(raw) >= self.max_messages + self.probe

    def parse_load(self, conv: ConversationKey, raw: Sequence[str]) -> list[HistoryEntry]:
        """Entries from an LRANGE result; unreadable ones are logged with their key and skipped."""
        key = keys.history(conv)
        entries = []
        parsed = self._parsed
        for index, value in enumerate(raw[-self.max_messages :]):
            entry = parsed.get(value)
            if entry is not None:
                parsed.move_to_end(value)
                entries.append(entry)
                continue
            try:
                entry = HistoryEntry.model_validate_json(value)
            except ValidationError:
                log.warning(
                    "skipping unreadable history entry",
                    extra={"key": key, "index": index},
                    exc_info=True,
                )
                continue
            entries.append(entry)
            parsed[value] = entry
            if len(parsed) > PARSED_CACHE:
                parsed.popitem(last=False)
        return entries

    async def clear(self, conv: ConversationKey) -> None:
        """Forget the whole conversation (``/reset``)."""
        await self._redis.delete(keys.history(conv))

    async def delete_message(self, conv: ConversationKey, message_id: str) -> int:
        """Remove the entries of one platform message; returns how many were removed."""
        return await self._remove(conv, lambda entry: entry.message_id == message_id)

    async def forget_author(self, conv: ConversationKey, author_id: str) -> int:
        """Remove every entry written by one user; returns how many were removed."""
        return await self._remove(conv, lambda entry: entry.author_id == author_id)

    async def _remove(self, conv: ConversationKey, match: Callable[[HistoryEntry], bool]) -> int:
        key = keys.history(conv)

        async def remove(pipe: Pipeline) -> int:
            await pipe.watch(key)
            raw = cast("list[str]", await pipe.lrange(key, 0, -1))  # decoded by connect
            doomed = {value for value in raw if (entry := _parse(value)) and match(entry)}
            if not doomed:
                await pipe.unwatch()  # type: ignore[no-untyped-call]
                return 0
            pipe.multi()  # type: ignore[no-untyped-call]
            for value in doomed:
                pipe.lrem(key, 0, value)
            removed: list[int] = await pipe.execute()
            return sum(removed)

        return await watched(self._redis, remove, f"history {key}")


def _parse(value: str) -> HistoryEntry | None:
    try:
        return HistoryEntry.model_validate_json(value)
    except ValidationError:
        return None
