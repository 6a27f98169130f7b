"""tests/waiting.py: a wait returns the first truthy answer, asks plain and async checks alike,
and fails naming what it waited for, without mistaking a check's own timeout for its own."""

from __future__ import annotations

import asyncio

import pytest

from tests.waiting import until


async def test_the_first_truthy_answer_is_returned_from_a_plain_or_an_async_check() -> None:
    answers = iter([None, 0, "", "found", "later"])
    assert await until(lambda: next(answers), every=0) == "found"

    asked: list[int] = []

    async def check() -> int | None:
        asked.append(1)
        return len(asked) if len(asked) == 3 else None

    assert await until(check, every=0) == 3


async def test_past_the_limit_the_failure_names_what_was_waited_for() -> None:
    with pytest.raises(AssertionError, match=r"not within 0\.05 s: the door opens"):
        await until(lambda: False, limit=0.05, what="the door opens")
    left = ["a", "b"]
    with pytest.raises(AssertionError, match=r"left: \['a', 'b'\]"):
        await until(lambda: not left, limit=0.05, what=lambda: f"left: {left}")


async def test_a_check_that_hangs_is_bounded_by_the_limit_too() -> None:
    async def hangs() -> bool:
        await asyncio.Event().wait()
        return True

    with pytest.raises(AssertionError, match="not within"):
        await until(hangs, limit=0.05)


async def test_a_timeout_inside_the_check_is_its_own_error_not_the_wait_running_out() -> None:
    async def times_out() -> bool:
        async with asyncio.timeout(0):
            await asyncio.sleep(1)
        return True

    with pytest.raises(TimeoutError):
        await until(times_out, limit=30)
