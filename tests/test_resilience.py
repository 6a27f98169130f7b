"""The one retry runner (bot/resilience.py): Retry-After honoured and capped or refused, the deadline, attempt counting, what is re-raised, cancellation, logging, and the until-it-answers mode that rides over a Redis outage (bot/state/outages.py). No wall-clock waiting: ``sleep``, ``clock`` and ``random.Random`` are injected."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from bot.resilience import (
    UNLIMITED,
    Attempt,
    Failure,
    GaveUp,
    RetryPolicy,
    retry,
)
from bot.state.outages import outage_policy, until_redis_answers
from tests.resilience_rig import FLAKY, Boom, FakeTime, GiveUpError, classify, script


# -- the runner ------------------------------------------------------------------------------
async def test_success_needs_no_sleep() -> None:
    op, calls = script("done")
    time = FakeTime()
    assert await retry(op, classify, RetryPolicy(), what="x", sleep=time.sleep) == "done"
    assert len(calls) == 1 and time.delays == []


async def test_retryable_failures_are_retried_with_backoff() -> None:
    policy = RetryPolicy(max_retries=3, base_delay=0.1, max_delay=1.0)
    op, calls = script(FLAKY, FLAKY, "done")
    time = FakeTime()
    assert await retry(op, classify, policy, what="x", sleep=time.sleep) == "done"
    assert len(calls) == 3 and len(time.delays) == 2
    assert 0.05 <= time.delays[0] <= 0.1
    assert 0.1 <= time.delays[1] <= 0.2


async def test_retry_after_is_honoured_over_a_shorter_backoff() -> None:
    policy = RetryPolicy(max_retries=2, base_delay=0.01)
    op, _ = script(Boom(Failure(retryable=True, status=429, retry_after=7.0)), "done")
    time = FakeTime()
    await retry(op, classify, policy, what="x", sleep=time.sleep)
    assert time.delays == [7.0]


async def test_a_shorter_retry_after_does_not_shorten_the_backoff() -> None:
    policy = RetryPolicy(max_retries=2, base_delay=4.0)
    op, _ = script(Boom(Failure(retryable=True, status=429, retry_after=0.0)), "done")
    time = FakeTime()
    await retry(op, classify, policy, what="x", sleep=time.sleep)
    assert 2.0 <= time.delays[0] <= 4.0


async def test_retry_after_is_capped_by_the_policy() -> None:
    policy = RetryPolicy(max_retries=2, base_delay=0.01, max_retry_after=60.0)
    op, _ = script(Boom(Failure(retryable=True, status=429, retry_after=3600.0)), "done")
    time = FakeTime()
    await retry(op, classify, policy, what="x", sleep=time.sleep)
    assert time.delays == [60.0]


async def test_a_retry_after_the_policy_refuses_gives_up_without_waiting() -> None:
    policy = RetryPolicy(max_retries=5, max_retry_after=60.0, too_long="give_up")
    asked = Boom(Failure(retryable=True, status=429, retry_after=3600.0))
    op, calls = script(asked, "never")
    time = FakeTime()
    seen: list[Attempt] = []

    def give_up(state: Attempt) -> GiveUpError:
        seen.append(state)
        return GiveUpError(f"asked for {state.delay:.0f} s")

    with pytest.raises(GiveUpError, match="3600") as info:
        await retry(op, classify, policy, what="x", sleep=time.sleep, give_up=give_up)
    assert info.value.__cause__ is asked
    assert len(calls) == 1 and time.delays == []
    assert seen[0].gave_up is GaveUp.TOO_LONG and seen[0].attempt == 1


async def test_the_deadline_stops_retrying_when_the_next_wait_would_pass_it() -> None:
    policy = RetryPolicy(max_retries=UNLIMITED, base_delay=1.0, max_delay=100.0, jitter=0.0)
    time = FakeTime()
    op, calls = script(*([FLAKY] * 10))
    seen: list[Attempt] = []

    def give_up(state: Attempt) -> None:
        seen.append(state)

    with pytest.raises(Boom) as info:
        await retry(
            op,
            classify,
            policy,
            what="x",
            sleep=time.sleep,
            clock=time.clock,
            deadline=time.now + 10.0,
            give_up=give_up,
        )
    assert info.value is FLAKY  # give_up returned None: the last error itself
    assert time.delays == [1.0, 2.0, 4.0]  # 7 s spent; the next 8 s wait would end at 15 s
    assert len(calls) == 4
    assert seen[0].gave_up is GaveUp.DEADLINE and seen[0].delay == 8.0


async def test_non_retryable_is_reraised_unchanged_without_sleeping() -> None:
    error = Boom(Failure(retryable=False, status=400, reason="bad request"))
    op, calls = script(error, "never")
    time = FakeTime()
    with pytest.raises(Boom) as info:
        await retry(op, classify, RetryPolicy(), what="x", sleep=time.sleep, give_up=GiveUpError)
    assert info.value is error
    assert len(calls) == 1 and time.delays == []


async def test_attempts_are_counted_and_the_last_error_is_reraised_when_they_run_out() -> None:
    policy = RetryPolicy(max_retries=2, base_delay=0.01)
    last = Boom(Failure(retryable=True, status=500, reason="internal"))
    op, calls = script(FLAKY, FLAKY, last, "never")
    time = FakeTime()
    with pytest.raises(Boom) as info:
        await retry(op, classify, policy, what="x", sleep=time.sleep)
    assert info.value is last
    assert len(calls) == 3 and len(time.delays) == 2


async def test_give_up_chooses_the_final_error_and_sees_the_attempt_count() -> None:
    policy = RetryPolicy(max_retries=2, base_delay=0.01)
    last = Boom(Failure(retryable=True, status=500, reason="internal"))
    op, _ = script(FLAKY, FLAKY, last)
    seen: list[Attempt] = []

    def give_up(state: Attempt) -> GiveUpError:
        seen.append(state)
        return GiveUpError(f"{state.what} failed after {state.attempt} attempts")

    with pytest.raises(GiveUpError, match="acme failed after 3 attempts") as info:
        await retry(op, classify, policy, what="acme", sleep=FakeTime().sleep, give_up=give_up)
    assert info.value.__cause__ is last
    (state,) = seen
    assert state.gave_up is GaveUp.ATTEMPTS and state.failure.status == 500
    assert state.error is last


async def test_zero_retries_gives_up_on_the_first_retryable_error() -> None:
    op, calls = script(FLAKY, "never")
    time = FakeTime()
    with pytest.raises(Boom):
        await retry(op, classify, RetryPolicy(max_retries=0), what="x", sleep=time.sleep)
    assert len(calls) == 1 and time.delays == []


async def test_classify_may_raise_a_specific_error_to_stop_at_once() -> None:
    def strict(exc: BaseException) -> Failure:
        raise GiveUpError("rejected key") from exc

    op, calls = script(FLAKY, "never")
    with pytest.raises(GiveUpError, match="rejected key"):
        await retry(op, strict, RetryPolicy(), what="x", sleep=FakeTime().sleep)
    assert len(calls) == 1


async def test_on_retry_sees_every_wait() -> None:
    policy = RetryPolicy(max_retries=5, base_delay=1.0, jitter=0.0)
    op, _ = script(FLAKY, FLAKY, "done")
    seen: list[tuple[int, float]] = []
    time = FakeTime()
    await retry(
        op,
        classify,
        policy,
        what="x",
        sleep=time.sleep,
        on_retry=lambda state: seen.append((state.attempt, state.delay)),
    )
    assert seen == [(1, 1.0), (2, 2.0)] and time.delays == [1.0, 2.0]


async def test_every_wait_is_logged_with_structured_fields_and_no_error_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = Boom(Failure(retryable=True, status=503, reason="overloaded"))
    secret.args = ("https://api.example/token?client_secret=hunter2",)
    op, _ = script(secret, "done")
    logger = logging.getLogger("chorus.test.resilience")
    with caplog.at_level(logging.WARNING, logger="chorus.test.resilience"):
        await retry(
            op,
            classify,
            RetryPolicy(base_delay=2.0, jitter=0.0),
            what="fetch",
            sleep=FakeTime().sleep,
            logger=logger,
            message="thing failed; retrying",
            extra={"channel": "c1"},
        )
    (record,) = caplog.records
    assert record.getMessage() == "thing failed; retrying"
    names = ("operation", "attempt", "delay_s", "status", "reason", "channel")
    assert {k: record.__dict__[k] for k in names} == {
        "operation": "fetch",
        "attempt": 1,
        "delay_s": 2.0,
        "status": 503,
        "reason": "overloaded",
        "channel": "c1",
    }
    assert record.exc_info is None
    assert not any("hunter2" in str(value) for value in record.__dict__.values())


# -- cancellation ------------------------------------------------------------------------------
async def test_cancellation_raised_by_the_op_is_never_retried() -> None:
    calls: list[int] = []

    async def op() -> str:
        calls.append(1)
        raise asyncio.CancelledError

    time = FakeTime()
    with pytest.raises(asyncio.CancelledError):
        await retry(op, classify, RetryPolicy(), what="x", sleep=time.sleep)
    assert len(calls) == 1 and time.delays == []


async def test_an_error_raised_while_cancelling_ends_the_retries() -> None:
    """redis-py reports a cancelled read as a connection error: that must not be retried."""
    calls: list[int] = []
    entered = asyncio.Event()
    release = asyncio.Event()

    async def op() -> str:
        calls.append(1)
        entered.set()
        with contextlib.suppress(asyncio.CancelledError):  # as a library that swallows it does
            await release.wait()
        raise Boom(Failure(retryable=True, reason="connection closed"))

    time = FakeTime()
    task = asyncio.create_task(retry(op, classify, RetryPolicy(), what="x", sleep=time.sleep))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(calls) == 1 and time.delays == []


async def test_cancelling_during_a_wait_stops_the_retries() -> None:
    waiting = asyncio.Event()

    async def parked_sleep(delay: float) -> None:
        waiting.set()
        await asyncio.Event().wait()  # only a cancel ends it

    op, calls = script(FLAKY, "never")
    task = asyncio.create_task(retry(op, classify, RetryPolicy(), what="x", sleep=parked_sleep))
    await waiting.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(calls) == 1


# -- until it answers (Redis outages) ----------------------------------------------------------
async def test_until_it_answers_never_runs_out_and_keeps_waits_capped() -> None:
    policy = RetryPolicy.until_it_answers(base_delay=0.1, max_delay=5.0)
    op, calls = script(*([FLAKY] * 50), "back")
    time = FakeTime()
    assert await retry(op, classify, policy, what="x", sleep=time.sleep) == "back"
    assert len(calls) == 51 and len(time.delays) == 50
    assert 0.05 <= time.delays[0] <= 0.1
    assert all(2.5 <= d <= 5.0 for d in time.delays[10:])


def test_the_outage_policy_grows_to_its_cap_with_jitter() -> None:
    policy = outage_policy(5.0)
    rng = random.Random(5)
    assert all(0.05 <= policy.delay(1, rng) <= 0.1 for _ in range(50))
    assert all(2.5 <= policy.delay(n, rng) <= 5.0 for n in range(8, 30))


async def test_a_call_is_retried_until_redis_answers() -> None:
    attempts: list[int] = []

    async def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise RedisConnectionError("Connection refused")
        return "ok"

    time = FakeTime()
    assert await until_redis_answers("test", flaky, sleep=time.sleep) == "ok"
    assert len(attempts) == 3 and len(time.delays) == 2


async def test_other_redis_errors_are_not_retried() -> None:
    attempts: list[int] = []

    async def wrong() -> None:
        attempts.append(1)
        raise ResponseError("WRONGTYPE")

    with pytest.raises(ResponseError):
        await until_redis_answers("test", wrong, sleep=FakeTime().sleep)
    assert len(attempts) == 1


async def test_cancelling_stops_waiting_for_redis() -> None:
    waits: list[float] = []
    waiting = asyncio.Event()

    async def down() -> None:
        raise RedisConnectionError("Connection refused")

    async def sleep(delay: float) -> None:
        waits.append(delay)
        if len(waits) == 3:
            waiting.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(until_redis_answers("test", down, sleep=sleep))
    await waiting.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(waits) == 3
