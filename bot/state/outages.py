"""Riding over a Redis outage: what was in hand when Redis went away is finished once it is back.

Why not fail: a turn whose model call already succeeded must not turn into an apology because
the state store blinked, and a message must not be dropped. Every Redis step of a turn is
either idempotent (the reads, the claim, which recognises its own token) or guarded by the claim
(the commit re-checks, under ``WATCH``, that the claim is still ours), so retrying it until
Redis answers is safe. redis-py's own quick retries (``connect.open_redis``) cover a blip; this
covers the seconds to minutes of a restart or failover, with the capped, jittered backoff of
``bot.resilience`` (``RetryPolicy.until_it_answers``). What "Redis is unreachable" means lives
here, so the bus and the router retry exactly the same errors.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from bot.resilience import Failure, RetryPolicy, Sleep, retry
from bot.state.client import StoreConnectionError as RedisConnectionError
from bot.state.client import StoreTimeoutError as RedisTimeoutError

log = logging.getLogger("chorus.outages")

T = TypeVar("T")

# What "Redis is unreachable" looks like to its client (a refused or reset socket is an OSError).
TRANSIENT: tuple[type[BaseException], ...] = (RedisConnectionError, RedisTimeoutError, OSError)
BACKOFF_CAP = 5.0  # seconds: a restarted Redis is noticed within this


def outage_policy(cap: float = BACKOFF_CAP) -> RetryPolicy:
    """Until Redis answers: 50-100 ms first, doubling, at most ``cap`` (equal jitter)."""
    return RetryPolicy.until_it_answers(base_delay=min(0.1, cap), max_delay=cap)


def classify(exc: BaseException) -> Failure:
    """Unreachable Redis is retryable; anything else (``WRONGTYPE``, a bug) is not."""
    if isinstance(exc, TRANSIENT):
        return Failure(retryable=True, reason=f"{type(exc).__name__}: {exc}")
    return Failure(retryable=False)


async def until_redis_answers(
    what: str,
    call: Callable[[], Awaitable[T]],
    *,
    cap: float = BACKOFF_CAP,
    sleep: Sleep = asyncio.sleep,
) -> T:
    """``call()``, retried while Redis is unreachable (each wait logged with its delay); any
    other error propagates at once. Cancellation stops it. The first try runs outside the
    retry loop: almost every call succeeds at once, and then costs nothing more."""
    try:
        return await call()
    except TRANSIENT as exc:
        failed = [exc]  # the retry loop starts from this failure: logged, then waited out

    async def again() -> T:
        if failed:
            raise failed.pop()
        return await call()

    return await retry(
        again,
        classify,
        outage_policy(cap),
        what=what,
        sleep=sleep,
        logger=log,
        message="redis unavailable; retrying",
    )
