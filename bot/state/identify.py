"""Identify buckets shared by every gateway process of one bot, in the state store.

Why: Discord lets a bot start at most ``max_concurrency`` sessions (IDENTIFYs) per 5 seconds,
one per bucket (``shard_id % max_concurrency``); an IDENTIFY beyond that is refused and, often
enough, gets the bot's sessions reset. discord.py paces the shards of one client, but two
gateway processes each with their own shard range would IDENTIFY at the same moment. So a shard
about to IDENTIFY first takes its bucket here: ``SET NX PX window`` on the bucket's key, which
the whole deployment sees (Redis, or the embedded store for one process). Whoever holds the
key IDENTIFYs; the others wait the key's remaining time and try again. The key lapses by itself,
so a process killed while holding it blocks the bucket for one window at most.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

from bot.state import keys
from bot.state.client import Redis

Sleep = Callable[[float], Awaitable[None]]

RETRY_FLOOR_S = 0.01  # a key that lapsed between SET and PTTL: look again almost at once


class IdentifyBuckets:
    """The identify buckets of one bot application (``app_id``) on one platform."""

    def __init__(
        self,
        redis: Redis,
        app_id: str,
        *,
        platform: str = "discord",
        holder: str | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._redis = redis
        self._app_id = app_id
        self._platform = platform
        self.holder = holder or uuid.uuid4().hex  # who holds a bucket (for an operator's look)
        self._sleep = sleep

    def key(self, bucket: int) -> str:
        return keys.identify_bucket(self._platform, self._app_id, bucket)

    async def try_take(self, bucket: int, window: float) -> float:
        """Take ``bucket`` for ``window`` seconds: 0.0 when taken, else the seconds until the
        current holder's window ends (try again then)."""
        key = self.key(bucket)
        window_ms = max(1, round(window * 1000))
        if await self._redis.set(key, self.holder, nx=True, px=window_ms):
            return 0.0
        left_ms = await self._redis.pttl(key)
        return max(left_ms, 0) / 1000 if left_ms > 0 else RETRY_FLOOR_S

    async def take(self, bucket: int, window: float) -> float:
        """Wait until ``bucket`` is taken for this process; the seconds it waited."""
        waited = 0.0
        while (left := await self.try_take(bucket, window)) > 0:
            await self._sleep(left)
            waited += left
        return waited
