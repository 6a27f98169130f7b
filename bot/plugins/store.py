"""``ctx.store``: what a plugin keeps, as JSON values and lists in four kinds of place.

A plugin sees only its own data (every key carries its name) and picks where a value lives:
``shared`` (one for the whole deployment), ``server`` (a Discord guild, a Slack team, a Twitch
or YouTube channel), ``channel`` (a channel of a platform; a thread shares its channel's), or
``user`` (the person who wrote the message, by platform and id). Values are anything
``json.dumps`` takes; each key has a TTL (``ttl=`` seconds, a year at most and by default,
refreshed by every write). ``incr`` is atomic across every worker; ``push`` appends to a list
(``max_len`` keeps the newest).

What is someone's goes when they say ``/forget``: everything in their ``user`` place, and any
value or list entry written with ``owner=`` (``ctx.user``) wherever it lives, such as a quote
added to a channel's list. The data lives where the rest of Chorus's does (Redis, or the
embedded store): ``bot/state/plugin_store.py``.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from bot.events import ChatMessage
from bot.state import keys
from bot.state.plugin_store import Owner, PluginKV

JSON = Any  # what json.dumps accepts and json.loads gives back


class Item(NamedTuple):
    """A list entry: its value and who owns it (``None``: nobody; ``/forget`` keeps it)."""

    value: JSON
    owner: Owner | None


class Bucket:
    """One place's values and lists for one plugin."""

    def __init__(self, kv: PluginKV, plugin: str, scope: str, parts: tuple[str, ...]) -> None:
        self._kv = kv
        self._plugin = plugin
        self._scope = scope
        self._parts = parts
        # a user's own place belongs to that user: /forget takes all of it
        self._owner = Owner(parts[0], parts[1]) if scope == "user" else None

    def _key(self, name: str) -> str:
        if not isinstance(name, str) or not name:
            raise ValueError("a store key is a non-empty string")
        return keys.plugin_data(self._plugin, self._scope, self._parts, name)

    def _whose(self, owner: Owner | None) -> Owner | None:
        return self._owner or owner

    async def get(self, name: str, default: JSON = None) -> JSON:
        """The value of ``name``, or ``default`` when there is none (or it expired)."""
        raw = await self._kv.get(self._key(name))
        return default if raw is None else json.loads(raw)

    async def set(
        self, name: str, value: JSON, *, ttl: float | None = None, owner: Owner | None = None
    ) -> None:
        """Keep ``value`` (JSON) under ``name`` for ``ttl`` seconds (default: a year)."""
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        await self._kv.put(self._key(name), text, ttl=ttl, owner=self._whose(owner))

    async def delete(self, name: str) -> bool:
        """Remove ``name`` (a value or a list); whether there was one."""
        return await self._kv.delete(self._key(name))

    async def incr(
        self, name: str, by: int = 1, *, ttl: float | None = None, owner: Owner | None = None
    ) -> int:
        """Add ``by`` to the integer under ``name`` (0 when absent), atomically; the new value."""
        return await self._kv.incr(self._key(name), int(by), ttl=ttl, owner=self._whose(owner))

    async def claim(self, name: str, ttl: float, value: JSON = True) -> bool:
        """Set ``name`` to ``value`` for ``ttl`` seconds only if it has no value now, atomically
        across every worker: True for the one call that set it (a cooldown, a once-only)."""
        if not ttl > 0:
            raise ValueError("claim: ttl must be positive")
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        return await self._kv.claim(self._key(name), text, ttl=ttl)

    async def push(
        self,
        name: str,
        value: JSON,
        *,
        owner: Owner | None = None,
        max_len: int | None = None,
        ttl: float | None = None,
    ) -> int:
        """Append ``value`` to the list ``name`` (the oldest go past ``max_len``); its length."""
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        return await self._kv.push(
            self._key(name), text, ttl=ttl, owner=self._whose(owner), max_len=max_len
        )

    async def items(self, name: str, start: int = 0, stop: int = -1) -> list[Item]:
        """The list's entries from ``start`` to ``stop`` (inclusive; negative from the end)."""
        out = []
        for entry in await self._kv.entries(self._key(name), start, stop):
            owner = None
            if entry.owner:
                platform, _, who = entry.owner.partition(":")
                owner = Owner(platform, who.replace("%3A", ":").replace("%25", "%"))
            out.append(Item(json.loads(entry.value), owner))
        return out

    async def values(self, name: str, start: int = 0, stop: int = -1) -> list[JSON]:
        """The list's values only (``items`` without owners)."""
        return [item.value for item in await self.items(name, start, stop)]

    async def length(self, name: str) -> int:
        return await self._kv.length(self._key(name))


class PluginStore:
    """One plugin's storage; ``ctx.store`` binds it to the message being handled."""

    def __init__(self, kv: PluginKV, plugin: str, message: ChatMessage | None = None) -> None:
        self._kv = kv
        self._plugin = plugin
        self._message = message

    @property
    def shared(self) -> Bucket:
        """One place for the whole deployment."""
        return Bucket(self._kv, self._plugin, "all", ())

    def for_channel(self, platform: str, channel: str) -> Bucket:
        return Bucket(self._kv, self._plugin, "chan", (platform, channel))

    def for_server(self, platform: str, server: str) -> Bucket:
        return Bucket(self._kv, self._plugin, "server", (platform, server))

    def for_user(self, platform: str, user_id: str) -> Bucket:
        return Bucket(self._kv, self._plugin, "user", (platform, user_id))

    @property
    def channel(self) -> Bucket:
        """The message's channel (a thread shares its channel's place)."""
        message = self._need()
        return self.for_channel(message.platform, message.conversation.channel)

    @property
    def server(self) -> Bucket:
        """The message's server; where the platform has none, its channel's."""
        message = self._need()
        return self.for_server(message.platform, message.server or message.conversation.channel)

    @property
    def user(self) -> Bucket:
        """The author's own place (``/forget`` erases it)."""
        message = self._need()
        return self.for_user(message.platform, message.author.id)

    def _need(self) -> ChatMessage:
        if self._message is None:
            raise RuntimeError(
                "no message here (a timer?): use store.shared or store.for_channel(...)"
            )
        return self._message
