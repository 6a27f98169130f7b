"""Who the bot ignores and who it trusts: user block and allow lists.

Two sources: ``CHORUS_USERS_BLOCKED`` / ``CHORUS_USERS_ALLOWED`` (``platform:user_id``, every
channel), and moderators' ``/block`` and ``/allow`` (one channel: a Redis hash per channel, so
every worker reads the same list). A blocked user's messages are dropped before anything else
looks at them (no model call, no live-chat batch, no command); an allowed user is exempt from
the quotas and the link policy.

Why a cache: the check runs at dispatch, on every message, where a Redis read per message would
cost the live-chat ingest its budget. Each process keeps a channel's entries and reads them
again when the channel has not been read for ``refresh`` seconds (one ``HGETALL``), so a block
made on another worker holds here within that time; on the worker that ran the command it holds
at once. A read that fails keeps the entries it had (logged once). At most ``CACHED_CHANNELS``
channels are kept, the one stored longest ago dropped first (``cachetools.FIFOCache``: storing
a channel again makes it the newest; looking it up does not).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Literal, cast

from cachetools import FIFOCache

from bot.events import ConversationKey
from bot.settings import SafetySettings
from bot.state.connect import Client
from bot.state.moderation import UserListStore

log = logging.getLogger("chorus.safety")

Status = Literal["block", "allow"]
REFRESH_SECONDS = 30.0
CACHED_CHANNELS = 10_000


class UserLists:
    def __init__(
        self,
        redis: Client | None,
        settings: SafetySettings | None = None,
        *,
        refresh: float = REFRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        settings = settings or SafetySettings()
        self.redis = redis  # (the connection, for the stores that share it)
        self.store = UserListStore(redis) if redis is not None else None
        self.blocked = settings.blocked_users
        self.allowed = settings.allowed_users
        self.refresh = refresh
        self.clock = clock
        self._channels: FIFOCache[tuple[str, str], tuple[float, dict[str, str]]] = FIFOCache(
            CACHED_CHANNELS
        )
        self._failing = False

    @staticmethod
    def _where(conversation: ConversationKey) -> tuple[str, str]:
        return conversation.platform, conversation.channel

    def needs_load(self, conversation: ConversationKey) -> bool:
        cached = self._channels.get(self._where(conversation))
        return self.store is not None and (
            cached is None or self.clock() - cached[0] >= self.refresh
        )

    async def prepare(self, conversation: ConversationKey) -> None:
        """Read the channel's entries when they are not fresh (a no-op for a busy channel)."""
        if not self.needs_load(conversation):
            return
        assert self.store is not None
        where = self._where(conversation)
        try:
            found = await self.store.load(*where)
        except Exception:
            if not self._failing:
                log.warning("could not read a channel's user lists", exc_info=True)
            self._failing = True
            stale = self._channels.get(where, (0.0, {}))[1]
            self._store(where, stale)  # try again after ``refresh``
            return
        self._failing = False
        self._store(where, found)

    def _store(self, where: tuple[str, str], entries: dict[str, str]) -> None:
        self._channels[where] = (self.clock(), entries)

    def status(self, conversation: ConversationKey, user_id: str) -> Status | None:
        """``block``, ``allow`` or None, for ``user_id`` in ``conversation``'s channel."""
        everywhere = f"{conversation.platform}:{user_id}"
        if everywhere in self.blocked:
            return "block"
        cached = self._channels.get(self._where(conversation))
        found = cached[1].get(user_id) if cached else None
        if found in ("block", "allow"):
            return cast("Status", found)
        if everywhere in self.allowed:
            return "allow"
        return None

    async def set(self, conversation: ConversationKey, user_id: str, status: Status | None) -> None:
        """A moderator's change: written to Redis, applied here at once."""
        where = self._where(conversation)
        if self.store is not None:
            await self.store.set(*where, user_id, status)
        entries = dict(self._channels.get(where, (0.0, {}))[1])
        if status is None:
            entries.pop(user_id, None)
        else:
            entries[user_id] = status
        stamp = self._channels[where][0] if where in self._channels else self.clock()
        self._channels[where] = (stamp, entries)

    async def entries(self, conversation: ConversationKey) -> dict[str, str]:
        """The channel's entries as moderators set them (fresh from Redis)."""
        where = self._where(conversation)
        if self.store is None:
            return dict(self._channels.get(where, (0.0, {}))[1])
        entries = await self.store.load(*where)
        self._store(where, entries)
        return entries
