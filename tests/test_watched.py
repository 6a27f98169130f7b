"""bot.state.client's optimistic transactions (``watched``, ``unraced``, ``delete_if_holds``):
a step whose watched key another client changes before its ``EXEC`` reads again and writes
what it read the second time; one raced every time gives up after ``WATCH_TRIES`` naming what
kept changing; a key is deleted only while it holds the value."""

from __future__ import annotations

from typing import cast

import pytest

from bot.state import connect
from bot.state.client import (
    WATCH_TRIES,
    KeptChanging,
    Pipeline,
    delete_if_holds,
    unraced,
    watched,
)


@pytest.mark.redis
async def test_a_raced_step_reads_again_and_adds_to_what_the_other_client_wrote(
    redis_url: str, key_tag: str
) -> None:
    redis = await connect.open_redis(redis_url)
    other = await connect.open_redis(redis_url)
    key = f"counter:{key_tag}"
    tries: list[str | None] = []
    try:
        await redis.set(key, "1")

        async def add_one(pipe: Pipeline) -> int:
            await pipe.watch(key)
            seen = cast("str | None", await pipe.get(key))  # decoded by connect
            tries.append(seen)
            if len(tries) == 1:
                await other.set(key, "10")  # another writer, between the read and the EXEC
            pipe.multi()  # type: ignore[no-untyped-call]
            pipe.set(key, str(int(seen or 0) + 1))
            await pipe.execute()
            return int(seen or 0) + 1

        assert await watched(redis, add_one, "the counter") == 11
        assert tries == ["1", "10"] and await redis.get(key) == "11"
    finally:
        await redis.aclose()
        await other.aclose()


@pytest.mark.redis
async def test_a_step_raced_every_time_gives_up_naming_what_kept_changing(
    redis_url: str, key_tag: str
) -> None:
    redis = await connect.open_redis(redis_url)
    key = f"busy:{key_tag}"
    tries = 0
    try:

        async def always_raced(pipe: Pipeline) -> None:
            nonlocal tries
            tries += 1
            await pipe.watch(key)
            await redis.incr(key)  # this client's own write, on another connection
            pipe.multi()  # type: ignore[no-untyped-call]
            pipe.set(key, "mine")
            await pipe.execute()

        with pytest.raises(
            KeptChanging, match=f"the busy key kept changing; gave up after {WATCH_TRIES}"
        ):
            await watched(redis, always_raced, "the busy key")
        assert tries == WATCH_TRIES and await redis.get(key) == str(WATCH_TRIES)
    finally:
        await redis.aclose()


async def test_other_errors_are_not_retried() -> None:
    tries = 0

    async def broken() -> None:
        nonlocal tries
        tries += 1
        raise ValueError("not a race")

    with pytest.raises(ValueError, match="not a race"):
        await unraced(broken, "anything")
    assert tries == 1


@pytest.mark.redis
async def test_a_key_is_deleted_only_while_it_holds_the_value(redis_url: str, key_tag: str) -> None:
    redis = await connect.open_redis(redis_url)
    key = f"lease:{key_tag}"
    try:
        await redis.set(key, "someone-else")
        assert not await delete_if_holds(redis, key, "mine")
        assert await redis.get(key) == "someone-else"
        await redis.set(key, "mine")
        assert await delete_if_holds(redis, key, "mine")
        assert await redis.exists(key) == 0
        assert not await delete_if_holds(redis, key, "mine")  # gone already
    finally:
        await redis.aclose()
