"""Riding over a Redis outage: what was in hand when Redis went away is finished once it is back.

Why not fail: a turn whose model call already succeeded must not turn into an apology because
the state store blinked, and a message must not be dropped. Every Redis step of a turn is
either idempotent (the reads, the claim, which recognises its own token) or guarded by the claim
(the commit re-checks, under ``WATCH``, that the claim is still ours), so retrying it until
Redis answers is safe. redis-py's own quick retries (``connect.open_redis``) cover a blip; this
covers the seconds to minutes of a restart or failover, with capped, jittered backoff.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger("chorus.outages")

T = TypeVar("T")

# What "Redis is unreachable" looks like from redis-py (a refused or reset socket is an OSError).
TRANSIENT: tuple[type[BaseException], ...] = (RedisConnectionError, RedisTimeoutError, OSError)
BACKOFF_CAP = 5.0  # seconds: a restarted Redis is noticed within this


def backoff(failures: int, cap: float) -> float:
    """Exponential from 50 ms, capped, with "equal jitter" so workers do not stampede."""
    ceiling = min(cap, 0.05 * 2 ** min(failures, 16))
    return float(ceiling / 2 + random.uniform(0, ceiling / 2))


async def until_redis_answers(
    what: str, call: Callable[[], Awaitable[T]], *, cap: float = BACKOFF_CAP
) -> T:
    """``call()``, retried while Redis is unreachable (logged once per failure with the delay);
    any other error propagates at once. Cancellation stops it."""
    failures = 0
    while True:
        try:
            return await call()
        except TRANSIENT as exc:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise asyncio.CancelledError from None  # redis-py reports a cancelled read so
            failures += 1
            delay = backoff(failures, cap)
            log.warning(
                "redis unavailable; retrying",
                extra={
                    "operation": what,
                    "attempt": failures,
                    "retry_in": round(delay, 3),
                    "error": f"{type(exc).__name__}: {exc}",
                },
            )
            await asyncio.sleep(delay)
