"""Unit tests of bot.llm.retry: Retry-After parsing, backoff bounds and ``with_retries``."""

from __future__ import annotations

import asyncio
import email.utils
import random
from collections.abc import Awaitable, Callable

import pytest

from bot.llm.errors import ProviderAuthError, ProviderUnavailable
from bot.llm.retry import Failure, RetryPolicy, parse_retry_after, with_retries

NOW = 1_700_000_000.0


class RecordingSleep:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


class Boom(Exception):
    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.reason)
        self.failure = failure


def classify(exc: BaseException) -> Failure:
    if isinstance(exc, Boom):
        return exc.failure
    return Failure(retryable=False, reason="bug")


def script(*outcomes: Exception | str) -> tuple[Callable[[], Awaitable[str]], list[int]]:
    """An op that raises or returns the next outcome per call; ``calls`` counts the calls."""
    queue = list(outcomes)
    calls: list[int] = []

    async def op() -> str:
        calls.append(1)
        item = queue.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    return op, calls


# -- parse_retry_after -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "7"}, 7.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"RETRY-AFTER": "0"}, 0.0),
        ({"retry-after": "-3"}, 0.0),
        ({"retry-after-ms": "2500"}, 2.5),
        ({"Retry-After-Ms": "250", "Retry-After": "9"}, 0.25),  # ms is more precise: it wins
        ({"retry-after-ms": "soon", "retry-after": "4"}, 4.0),  # bad ms falls back to seconds
        ({"retry-after": "whenever"}, None),
        ({"x-other": "1"}, None),
        ({}, None),
        (None, None),
    ],
)
def test_parse_retry_after(headers: dict[str, str] | None, expected: float | None) -> None:
    assert parse_retry_after(headers, now=NOW) == expected


def test_parse_retry_after_http_date() -> None:
    when = email.utils.formatdate(NOW + 30, usegmt=True)
    assert parse_retry_after({"Retry-After": when}, now=NOW) == pytest.approx(30.0)


def test_parse_retry_after_http_date_in_the_past_is_zero() -> None:
    when = email.utils.formatdate(NOW - 30, usegmt=True)
    assert parse_retry_after({"Retry-After": when}, now=NOW) == 0.0


# -- backoff ---------------------------------------------------------------------------------
@pytest.mark.parametrize("attempt", range(1, 12))
def test_backoff_stays_within_full_jitter_bounds(attempt: int) -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=30.0)
    cap = min(30.0, 0.5 * 2 ** (attempt - 1))
    rng = random.Random(attempt)
    for _ in range(50):
        delay = policy.backoff(attempt, rng)
        assert cap / 2 <= delay <= cap


def test_backoff_grows_then_is_capped() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=8.0)

    class Top(random.Random):
        def uniform(self, a: float, b: float) -> float:
            return b

    assert [policy.backoff(n, Top()) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


def test_backoff_is_jittered() -> None:
    policy = RetryPolicy(base_delay=1.0)
    rng = random.Random(0)
    assert len({policy.backoff(3, rng) for _ in range(20)}) > 1


# -- with_retries ----------------------------------------------------------------------------
async def test_success_needs_no_sleep() -> None:
    op, calls = script("done")
    sleep = RecordingSleep()
    assert await with_retries(op, classify, RetryPolicy(), provider="x", sleep=sleep) == "done"
    assert len(calls) == 1
    assert sleep.delays == []


async def test_retryable_failures_are_retried_with_backoff() -> None:
    policy = RetryPolicy(max_retries=3, base_delay=0.1, max_delay=1.0)
    flaky = Boom(Failure(retryable=True, status=503, reason="unavailable"))
    op, calls = script(flaky, flaky, "done")
    sleep = RecordingSleep()
    assert await with_retries(op, classify, policy, provider="x", sleep=sleep) == "done"
    assert len(calls) == 3
    assert len(sleep.delays) == 2
    assert 0.05 <= sleep.delays[0] <= 0.1
    assert 0.1 <= sleep.delays[1] <= 0.2


async def test_retry_after_is_honoured_over_a_shorter_backoff() -> None:
    policy = RetryPolicy(max_retries=2, base_delay=0.01)
    op, _ = script(Boom(Failure(retryable=True, status=429, retry_after=7.0)), "done")
    sleep = RecordingSleep()
    await with_retries(op, classify, policy, provider="x", sleep=sleep)
    assert sleep.delays == [7.0]


async def test_a_shorter_retry_after_does_not_shorten_the_backoff() -> None:
    policy = RetryPolicy(max_retries=2, base_delay=4.0)
    op, _ = script(Boom(Failure(retryable=True, status=429, retry_after=0.0)), "done")
    sleep = RecordingSleep()
    await with_retries(op, classify, policy, provider="x", sleep=sleep)
    assert 2.0 <= sleep.delays[0] <= 4.0


async def test_retry_after_is_capped_by_the_policy() -> None:
    policy = RetryPolicy(max_retries=2, base_delay=0.01, max_retry_after=60.0)
    op, _ = script(Boom(Failure(retryable=True, status=429, retry_after=3600.0)), "done")
    sleep = RecordingSleep()
    await with_retries(op, classify, policy, provider="x", sleep=sleep)
    assert sleep.delays == [60.0]


async def test_non_retryable_is_reraised_unchanged_without_sleeping() -> None:
    error = Boom(Failure(retryable=False, status=400, reason="bad request"))
    op, calls = script(error, "never")
    sleep = RecordingSleep()
    with pytest.raises(Boom) as info:
        await with_retries(op, classify, RetryPolicy(), provider="x", sleep=sleep)
    assert info.value is error
    assert len(calls) == 1
    assert sleep.delays == []


async def test_exhausted_retries_raise_unavailable_with_attempts_and_status() -> None:
    policy = RetryPolicy(max_retries=2, base_delay=0.01)
    last = Boom(Failure(retryable=True, status=500, reason="internal"))
    op, calls = script(last, last, last, "never")
    sleep = RecordingSleep()
    with pytest.raises(ProviderUnavailable) as info:
        await with_retries(op, classify, policy, provider="acme", sleep=sleep)
    assert len(calls) == 3
    assert len(sleep.delays) == 2
    assert info.value.attempts == 3
    assert info.value.status == 500
    assert info.value.provider == "acme"
    assert info.value.__cause__ is last
    assert "acme" in str(info.value) and "internal" in str(info.value)


async def test_zero_retries_fails_on_the_first_retryable_error() -> None:
    op, calls = script(Boom(Failure(retryable=True)), "never")
    sleep = RecordingSleep()
    with pytest.raises(ProviderUnavailable) as info:
        await with_retries(op, classify, RetryPolicy(max_retries=0), provider="x", sleep=sleep)
    assert len(calls) == 1
    assert info.value.attempts == 1
    assert sleep.delays == []


async def test_classify_may_raise_a_specific_error_to_stop_at_once() -> None:
    def strict(exc: BaseException) -> Failure:
        raise ProviderAuthError("x", 401, "X_API_KEY", "https://example.com/keys")

    op, calls = script(Boom(Failure(retryable=True)), "never")
    with pytest.raises(ProviderAuthError, match="X_API_KEY"):
        await with_retries(op, strict, RetryPolicy(), provider="x", sleep=RecordingSleep())
    assert len(calls) == 1


async def test_cancellation_is_never_retried() -> None:
    calls: list[int] = []

    async def op() -> str:
        calls.append(1)
        raise asyncio.CancelledError

    sleep = RecordingSleep()
    with pytest.raises(asyncio.CancelledError):
        await with_retries(op, classify, RetryPolicy(), provider="x", sleep=sleep)
    assert len(calls) == 1
    assert sleep.delays == []
