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

Each map is an insertion-ordered dict with a size bound and a TTL, so memory stays flat
whatever the traffic.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TTLCache(Generic[K, V]):
    """A bounded map whose entries expire ``ttl`` seconds after they were last written."""

    def __init__(
        self, *, ttl: float, maxsize: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if ttl <= 0 or maxsize < 1:
            raise ValueError("ttl must be positive and maxsize at least 1")
        self.ttl = ttl
        self.maxsize = maxsize
        self._clock = clock
        self._items: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K) -> V | None:
        item = self._items.get(key)
        if item is None:
            return None
        if item[0] <= self._clock():
            del self._items[key]
            return None
        return item[1]

    def put(self, key: K, value: V) -> None:
        now = self._clock()
        self._items.pop(key, None)
        self._items[key] = (now + self.ttl, value)
        self._evict(now)

    def __contains__(self, key: K) -> bool:
        return self.get(key) is not None

    def __len__(self) -> int:
        return len(self._items)

    def _evict(self, now: float) -> None:
        # Entries are in write order and share one TTL, so the expired ones are at the front.
        while self._items:
            first = next(iter(self._items.values()))
            if first[0] > now and len(self._items) <= self.maxsize:
                break
            self._items.popitem(last=False)


class SeenSet:
    """``first(key)`` is True once per key within the TTL: the event-id de-duplicator."""

    def __init__(
        self, *, ttl: float, maxsize: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._cache: TTLCache[str, bool] = TTLCache(ttl=ttl, maxsize=maxsize, clock=clock)

    def first(self, key: str) -> bool:
        if key in self._cache:
            return False
        self._cache.put(key, True)
        return True

    def add(self, key: str) -> None:
        self._cache.put(key, True)

    def __contains__(self, key: str) -> bool:
        return key in self._cache

    def __len__(self) -> int:
        return len(self._cache)
