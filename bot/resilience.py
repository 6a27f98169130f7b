"""Retrying, in one place: backoff with jitter, ``Retry-After``, deadlines, give-up rules.

Why one module: the LLM providers, the Redis outage riding, the Redis Streams bus, every
platform's outbound chokepoint, the MCP reconnects and the insights worker's rescheduling all
wait and try again. Written once, the rules are the same everywhere and tested once
(tests/test_resilience.py): how long a wait is, when a server's ``Retry-After`` wins, when to
stop, and that a cancelled task is never kept retrying. Call sites only say *what* is
retryable (a ``classify`` function returning a ``Failure``) and what to raise at the end.

The delay for retry number ``n`` (1-based) is drawn from ``[(1 - jitter) * c, c]`` with
``c = min(max_delay, base_delay * 2 ** (n - 1))``: exponential, capped, and randomised so that
many clients failing together do not come back together. ``jitter=0.5`` (the default) is
"equal jitter": half the ceiling is fixed, half is random, so a wait is never shorter than half
its ceiling (a rate-limited server is not hammered right away); ``jitter=1.0`` is "full
jitter", ``[0, c]``; ``jitter=0`` waits exactly ``c``.

Imports only the standard library: every layer above (state, bus, llm, tools, adapters,
insights) may use it.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, Literal, TypeVar

log = logging.getLogger("chorus.retry")

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]
Clock = Callable[[], float]

_MAX_EXPONENT = 64  # 2**64 * any sane base is past every cap; larger would overflow a float
UNLIMITED: Final = sys.maxsize  # max_retries of a policy that retries until it answers


@dataclass(frozen=True)
class RetryPolicy:
    """How many times to retry and how long to wait in between.

    ``max_retries`` counts retries after the first attempt (``UNLIMITED``: until it answers,
    for outages that are waited out rather than reported). A server's ``Retry-After`` is honoured
    up to ``max_retry_after``; a longer one is either capped (``too_long="cap"``: try again
    after ``max_retry_after`` anyway) or ends the retries at once (``too_long="give_up"``: where
    a wait that long would make the answer pointless, or the caller has a better fallback).
    """

    max_retries: int = 4
    base_delay: float = 0.5
    max_delay: float = 30.0
    max_retry_after: float = 60.0
    jitter: float = 0.5
    too_long: Literal["cap", "give_up"] = "cap"

    def __post_init__(self) -> None:
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError("jitter is the random share of a wait: between 0 and 1")
        if self.base_delay < 0 or self.max_delay < 0 or self.max_retry_after < 0:
            raise ValueError("delays cannot be negative")
        if self.max_retries < 0:
            raise ValueError("max_retries cannot be negative (UNLIMITED: until it answers)")

    @classmethod
    def until_it_answers(cls, *, base_delay: float = 0.1, max_delay: float = 5.0) -> RetryPolicy:
        """Unbounded retries with a capped backoff: for a dependency whose outage is waited out."""
        return cls(max_retries=UNLIMITED, base_delay=base_delay, max_delay=max_delay)

    def ceiling(self, attempt: int) -> float:
        """The longest wait before retry ``attempt`` (1-based): exponential, capped."""
        exponent = min(max(attempt, 1) - 1, _MAX_EXPONENT)
        return float(min(self.max_delay, self.base_delay * 2.0**exponent))

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """The wait before retry ``attempt`` (1-based), uniform in ``[(1-jitter)*c, c]``."""
        cap = self.ceiling(attempt)
        return float((rng or random).uniform(cap * (1.0 - self.jitter), cap))

    def exhausted(self, attempt: int) -> bool:
        """Whether ``attempt`` failures have used up every retry."""
        return attempt > self.max_retries


@dataclass(frozen=True)
class Failure:
    """How a call site classifies one exception: retry it or not, and what the server said.

    ``reason`` is logged: it must be safe to log (no tokens, no URLs with secrets).
    """

    retryable: bool
    status: int | None = None
    retry_after: float | None = None
    reason: str = ""


class GaveUp(StrEnum):
    ATTEMPTS = "attempts"  # max_retries used up
    DEADLINE = "deadline"  # the next wait would end past the deadline
    TOO_LONG = "too_long"  # the server asked for more than max_retry_after (too_long="give_up")


@dataclass(frozen=True)
class Attempt:
    """One failed attempt, as ``on_retry`` and ``give_up`` see it."""

    what: str
    attempt: int  # failures so far, 1-based
    failure: Failure
    error: BaseException
    delay: float  # the wait before the next attempt (for give_up: the wait that was refused)
    gave_up: GaveUp | None = None


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


def wait_for(
    policy: RetryPolicy, attempt: int, failure: Failure, rng: random.Random | None = None
) -> tuple[float, bool]:
    """The wait before retry ``attempt`` and whether it is one the policy refuses to make.

    A ``Retry-After`` longer than the backoff wins (a shorter one does not shorten it); past
    ``max_retry_after`` it is capped, or refused when ``too_long="give_up"``.
    """
    delay = policy.delay(attempt, rng)
    if failure.retry_after is None:
        return delay, False
    delay = max(delay, failure.retry_after)
    if delay <= policy.max_retry_after:
        return delay, False
    if policy.too_long == "give_up":
        return delay, True
    return policy.max_retry_after, False


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def retry(
    op: Callable[[], Awaitable[T]],
    classify: Callable[[BaseException], Failure],
    policy: RetryPolicy,
    *,
    what: str,
    deadline: float | None = None,
    clock: Clock = time.monotonic,
    sleep: Sleep = asyncio.sleep,
    rng: random.Random | None = None,
    on_retry: Callable[[Attempt], object] | None = None,
    give_up: Callable[[Attempt], BaseException | None] | None = None,
    logger: logging.Logger = log,
    message: str = "call failed; retrying",
    extra: Mapping[str, object] | None = None,
    traceback: bool = False,
) -> T:
    """``await op()``; retry what ``classify`` calls retryable; re-raise the rest unchanged.

    ``classify`` may itself raise to stop at once (e.g. an auth error). Every wait is logged on
    ``logger`` with ``message`` and structured ``extra`` (``operation``, ``attempt``,
    ``delay_s``, ``status``, ``reason``, ``retry_after_s`` plus the caller's ``extra``; with the
    traceback only when ``traceback``), then ``on_retry`` runs and ``sleep`` waits. When the
    retries are used up, the next wait would end past ``deadline`` (on ``clock``), or the server
    asks for a wait the policy refuses, ``give_up`` returns the exception to raise (chained to
    the last error), or ``None`` to re-raise the last error itself (also the default).

    Cancellation always propagates: a ``CancelledError`` is never classified, and an error
    raised while the task is being cancelled (redis-py reports a cancelled read as a
    connection error) ends the retries with ``CancelledError``.
    """
    attempt = 0
    while True:
        try:
            return await op()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if _cancelling():
                raise asyncio.CancelledError from None
            failure = classify(exc)
            if not failure.retryable:
                raise
            attempt += 1
            delay, refused = wait_for(policy, attempt, failure, rng)
            gave_up = (
                GaveUp.ATTEMPTS
                if policy.exhausted(attempt)
                else GaveUp.TOO_LONG
                if refused
                else GaveUp.DEADLINE
                if deadline is not None and clock() + delay > deadline
                else None
            )
            state = Attempt(what, attempt, failure, exc, delay, gave_up)
            if gave_up is not None:
                final = give_up(state) if give_up is not None else None
                if final is None:
                    raise
                raise final from exc
            logger.warning(
                message,
                extra={
                    "operation": what,
                    "attempt": attempt,
                    "delay_s": round(delay, 3),
                    "status": failure.status,
                    "reason": failure.reason or type(exc).__name__,
                    "retry_after_s": failure.retry_after,
                    **(extra or {}),
                },
                exc_info=exc if traceback else None,
            )
            if on_retry is not None:
                on_retry(state)
        await sleep(delay)
