"""Retries with jittered exponential backoff that honour the server's ``Retry-After``.

The vendor SDKs' own retries are switched off (``max_retries=0``) so that this one policy governs
all three vendors, logs every wait, and can be tested with an injected ``sleep``.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from bot.llm.errors import ProviderUnavailable

log = logging.getLogger("chorus.llm.retry")

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 4
    base_delay: float = 0.5
    max_delay: float = 30.0
    # A server may ask for a longer wait than we are willing to block a reply for.
    max_retry_after: float = 60.0

    def backoff(self, attempt: int, rng: random.Random | None = None) -> float:
        """Full-jitter exponential backoff for retry number ``attempt`` (1-based)."""
        cap = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        return (rng or random).uniform(cap / 2, cap)


@dataclass(frozen=True)
class Failure:
    """How a provider classifies one exception: retry it or not, and how long the server asked."""

    retryable: bool
    status: int | None = None
    retry_after: float | None = None
    reason: str = ""


def parse_retry_after(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms``, or ``Retry-After`` as seconds or an HTTP date."""
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    if (ms := lowered.get("retry-after-ms")) is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (now if now is not None else time.time()))


async def with_retries(
    op: Callable[[], Awaitable[T]],
    classify: Callable[[BaseException], Failure],
    policy: RetryPolicy,
    *,
    provider: str,
    sleep: Sleep = asyncio.sleep,
) -> T:
    """Run ``op``; retry what ``classify`` calls retryable; re-raise the rest unchanged.

    ``classify`` may itself raise a specific error (e.g. ``ProviderAuthError``) to stop at once.
    When retries run out, ``ProviderUnavailable`` carries the last status and the attempt count.
    """
    attempt = 0
    while True:
        try:
            return await op()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failure = classify(exc)
            if not failure.retryable:
                raise
            attempt += 1
            if attempt > policy.max_retries:
                raise ProviderUnavailable(
                    f"{provider} is unavailable after {attempt} attempts "
                    f"(last: {failure.reason or type(exc).__name__}"
                    f"{f', HTTP {failure.status}' if failure.status else ''})",
                    provider=provider,
                    status=failure.status,
                    attempts=attempt,
                ) from exc
            delay = policy.backoff(attempt)
            if failure.retry_after is not None:
                delay = min(max(delay, failure.retry_after), policy.max_retry_after)
            log.warning(
                "llm call failed; retrying",
                extra={
                    "provider": provider,
                    "status": failure.status,
                    "reason": failure.reason,
                    "attempt": attempt,
                    "delay_s": round(delay, 3),
                    "retry_after_s": failure.retry_after,
                },
            )
            await sleep(delay)
