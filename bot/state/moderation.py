"""What moderation keeps in Redis: each channel's block and allow lists, and the audit trail.

The rules are ``bot.safety``'s (who may set a list, what an entry means, what an audit entry
holds); this module keeps the data every worker shares:

- ``UserListStore``: one hash per channel (``keys.safety_users``), user id -> ``block`` or
  ``allow``, written by a moderator's command and read by each worker when a channel's copy is
  stale;
- ``AuditStore``: one capped stream (``keys.safety_audit``) of decisions, appended to in the
  background, read newest first, and erased by person for ``/forget`` (read in pages: the stream
  is bounded and ``/forget`` is rare).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from bot.state import keys
from bot.state.client import Redis

ERASE_PAGE = 1000  # entries read per round trip while /forget looks for a person's


class UserListStore:
    """The block and allow lists of each channel."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def load(self, platform: str, channel: str) -> dict[str, str]:
        found = await self.redis.hgetall(keys.safety_users(platform, channel))
        return dict(cast("dict[str, str]", found))

    async def set(self, platform: str, channel: str, user_id: str, status: str | None) -> None:
        """``status`` for ``user_id`` in the channel (None: no entry)."""
        key = keys.safety_users(platform, channel)
        if status is None:
            await self.redis.hdel(key, user_id)
        else:
            await self.redis.hset(key, user_id, status)


class AuditStore:
    """The audit trail of one deployment (``namespace``), capped at ``max_entries``."""

    def __init__(self, redis: Redis, *, namespace: str = "main", max_entries: int = 10_000):
        self.redis = redis
        self.key = keys.safety_audit(namespace)
        self.max_entries = max_entries

    async def append(self, fields: Mapping[str, str]) -> None:
        stored: dict[Any, Any] = dict(fields)  # (redis-py's mapping type is invariant)
        await self.redis.xadd(self.key, stored, maxlen=self.max_entries, approximate=True)

    async def newest(self, count: int) -> list[dict[str, str]]:
        """The newest ``count`` entries' fields, oldest first."""
        rows = cast(
            "list[tuple[str, dict[str, str]]]", await self.redis.xrevrange(self.key, count=count)
        )
        return [fields for _, fields in reversed(rows)]

    async def erase(self, match: Callable[[Mapping[str, str]], bool]) -> int:
        """Delete every entry whose fields ``match``; how many."""
        doomed: list[str] = []
        start = "-"
        while True:
            rows = cast(
                "list[tuple[str, dict[str, str]]]",
                await self.redis.xrange(self.key, min=start, max="+", count=ERASE_PAGE),
            )
            doomed += [entry_id for entry_id, fields in rows if match(fields)]
            if len(rows) < ERASE_PAGE:
                break
            start = "(" + rows[-1][0]
        for at in range(0, len(doomed), ERASE_PAGE):
            await self.redis.xdel(self.key, *doomed[at : at + ERASE_PAGE])
        return len(doomed)
