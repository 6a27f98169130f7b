"""Bounded, expiring in-process memory of the Slack adapter.

Three things are remembered, none of them worth a Redis round trip on the ingest path:

- **event ids** already handled. Slack retries an event it thinks was not acknowledged (same
  ``event_id``, ``X-Slack-Retry-Num`` 1..3, over about an hour); bolt does not de-duplicate, so
  the adapter does (the router also de-duplicates by message id, across processes).
- **threads the bot takes part in** (it was mentioned there or answered there), so replies in
  those threads reach it without a new mention. The alternative, ``conversations.replies`` for
  every thread message in every channel the bot is in, costs a rate-limited API call per message
  (Tier 3); memory costs nothing. The trade-off: after a restart, or on a second adapter
  process, a thread is recognised again once someone mentions the bot in it or replies to a
  thread the bot started (``parent_user_id``).
- **user profiles** (display name, owner/admin) from ``users.info``, for an hour.

Each is a ``cachetools.TTLCache`` (a size bound, and a TTL counted from an entry's last write),
so memory stays flat whatever the traffic. ``SeenSet`` is the set-shaped use of one: asking
whether a key is in it changes nothing, adding a key again restarts its TTL.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from cachetools import TTLCache


class SeenSet:
    """``first(key)`` is True once per key within the TTL: the event-id de-duplicator."""

    def __init__(
        self, *, ttl: float, maxsize: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if ttl <= 0 or maxsize < 1:
            raise ValueError("ttl must be positive and maxsize at least 1")
        self._cache: TTLCache[str, None] = TTLCache(maxsize, ttl, timer=clock)

    def first(self, key: str) -> bool:
        if key in self._cache:
            return False
        self._cache[key] = None
        return True

    def add(self, key: str) -> None:
        self._cache[key] = None

    def __contains__(self, key: str) -> bool:
        return key in self._cache

    def __len__(self) -> int:
        return len(self._cache)
