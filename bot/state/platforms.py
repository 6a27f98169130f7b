"""What platform adapters keep in the state store: a send-rate limit every process of a deployment
shares, and the refreshed tokens of an app's bot user.

**The shared send-rate limit.** A platform limits how fast one account may send (Twitch: 20
messages per 30 seconds, or 100 where the bot moderates; going over gets messages dropped and
repeated abuse gets the account locked out of chat). Several Chorus processes may send as the
same bot, so the budget lives in Redis, not in memory. The window is a sliding log: a sorted set
per bucket, one member per granted send, scored by its time. Without a script (each ``EVAL``
costs the embedded store a compile of its text, BENCHMARKS.md) a check-then-add would race
between processes, so each attempt *adds first* and counts after, in one ``MULTI``/``EXEC``:

    trim entries older than the window; ZADD me; ZCARD; oldest; PEXPIRE

If the count (including me) is within the limit, the send is granted. Otherwise my entry is
removed again and I wait until the oldest entry leaves the window. Two racing attempts can at
worst both be refused for a moment (each saw the other's entry), never both granted past the
limit: every granted entry was counted together with every earlier entry still in the window.

A cancellation that lands while a transaction is in flight can be swallowed by redis-py (the
call returns as if nothing happened, seen in the fuzz tests' shutdowns); ``acquire`` checks
whether its task is being cancelled after each transaction and stops then, so a closing adapter
is never left sending. ``pause`` sets a shared cool-down (after the platform says it dropped a
message for the rate) that every process's ``acquire`` honours. Times come from an injected
``clock`` (epoch seconds, comparable across processes), waits go through an injected ``sleep``:
tests run without real waiting.

**Tokens.** ``PlatformTokens`` keeps one JSON value per (platform, app): the newest token pair a
process refreshed, so every process of a deployment starts from it (the adapter owns its shape).
A Twitch broadcaster's pair (``chorus auth twitch --broadcaster``) is kept the same way beside it,
one value per (app, broadcaster): ``load_broadcaster`` / ``save_broadcaster``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable

from bot.state import keys, keys_twitch
from bot.state.client import Redis

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]

# An entry is stamped just before its HTTP call and the platform counts arrivals, so the window we
# keep is a little longer than the platform's: a slow request cannot make two windows overlap.
LATENCY_MARGIN = 1.0
_MIN_WAIT = 0.05  # never spin: a refused attempt waits at least this long


def bucket_key(platform: str, bucket: str) -> str:
    """The shared window of one send bucket (``bot.state.keys.ratelimit`` documents it)."""
    return keys.ratelimit(platform, bucket)


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class SharedRateLimiter:
    """At most ``limit`` grants per ``window`` seconds per bucket, across processes."""

    def __init__(
        self,
        redis: Redis,
        *,
        platform: str,
        window: float,
        clock: Clock = time.time,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        """``window``: seconds a grant counts (the platform's window plus ``LATENCY_MARGIN``)."""
        if window <= 0:
            raise ValueError("window must be positive")
        self.redis = redis
        self.platform = platform
        self.window = window
        self.log = logging.getLogger(f"chorus.{platform}.ratelimit")
        self.clock = clock
        self.sleep = sleep

    async def try_acquire(self, bucket: str, limit: int) -> float:
        """0.0 when a send is granted now, else the seconds to wait before trying again."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        key = bucket_key(self.platform, bucket)
        now = self.clock()
        member = f"{now:.6f}:{uuid.uuid4().hex}"
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.get(f"{key}:pause")
            pipe.zremrangebyscore(key, "-inf", now - self.window)
            pipe.zadd(key, {member: now})
            pipe.zcard(key)
            pipe.zrange(key, 0, 0, withscores=True)
            pipe.pexpire(key, math.ceil(self.window * 1000) + 1000)
            paused, _, _, count, oldest, _ = await pipe.execute()
        paused_until = float(paused) if paused else 0.0
        if paused_until <= now and count <= limit:
            return 0.0
        await self.redis.zrem(key, member)
        wait = paused_until - now
        if count > limit and oldest:
            wait = max(wait, float(oldest[0][1]) + self.window - now)
        return max(wait, _MIN_WAIT)

    async def acquire(self, bucket: str, limit: int) -> float:
        """Wait (never exceed) until a send is granted; returns the seconds waited."""
        waited = 0.0
        while True:
            wait = await self.try_acquire(bucket, limit)
            if _cancelling():  # redis-py can swallow a cancel that lands mid-transaction
                raise asyncio.CancelledError
            if wait <= 0:
                return waited
            self.log.info(
                "a send waits for the shared rate limit",
                extra={
                    "platform": self.platform,
                    "bucket": bucket,
                    "limit": limit,
                    "wait_s": round(wait, 3),
                },
            )
            await self.sleep(wait)
            waited += wait

    async def pause(self, bucket: str, seconds: float) -> None:
        """Hold every process's sends in ``bucket`` for ``seconds`` (extends, never shortens)."""
        if seconds <= 0:
            return
        key = f"{bucket_key(self.platform, bucket)}:pause"
        until = self.clock() + seconds
        current = await self.redis.get(key)
        if current is not None and float(current) >= until:
            return
        await self.redis.set(key, f"{until:.6f}", px=math.ceil(seconds * 1000))


class PlatformTokens:
    """The newest token pair of an app's bot user, one JSON value per (platform, app)."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def load(self, platform: str, app: str) -> str | None:
        raw: str | bytes | None = await self.redis.get(keys.platform_tokens(platform, app))
        return raw.decode() if isinstance(raw, bytes) else raw

    async def save(self, platform: str, app: str, value: str) -> None:
        await self.redis.set(keys.platform_tokens(platform, app), value)

    async def load_broadcaster(self, app: str, broadcaster: str) -> str | None:
        """A Twitch broadcaster's stored pair for the application ``app`` (None: none stored)."""
        raw: str | bytes | None = await self.redis.get(
            keys_twitch.broadcaster_tokens(app, broadcaster)
        )
        return raw.decode() if isinstance(raw, bytes) else raw

    async def save_broadcaster(self, app: str, broadcaster: str, value: str) -> None:
        await self.redis.set(keys_twitch.broadcaster_tokens(app, broadcaster), value)
