"""The embedded store answers as Redis does: the claims' guarded commit, the ``/link`` alias
read, transactions under ``WATCH``, blocking reads woken by another client.

It is fakeredis through its public API (``bot.state.embedded``), so these pin the semantics the
state modules rely on. The claims' contract over both real Redis and the embedded store is
tests/test_claims.py and tests/test_bus_contract.py; persistence is tests/test_persistence.py.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError, WatchError

from bot.state.alias_scripts import LOAD
from bot.state.connect import open_redis
from bot.state.guarded import GUARDED


@pytest.fixture
async def store() -> AsyncIterator[Redis]:
    client = await open_redis(f"memory://embedded-{uuid.uuid4().hex[:8]}")
    try:
        yield client
    finally:
        await client.aclose()


async def guarded(store: Redis, token: str, *commands: list[Any]) -> tuple[Any, Any]:
    """Run ``GUARDED`` with the claim ``claim``; its answer (or error text) and the keys it
    left (``history``, ``claim``, ``done``)."""
    argv: list[Any] = [token]
    for command in commands:
        argv += [len(command), *command]
    try:
        answer: Any = await store.eval(GUARDED, 1, "claim", *argv)
    except ResponseError as exc:
        answer = "error: " + ("WRONGTYPE" if "WRONGTYPE" in str(exc) else str(exc))
    left = (await store.lrange("history", 0, -1), await store.get("claim"), await store.get("done"))
    return answer, left


async def test_a_held_claim_runs_every_command_and_answers_one(store: Redis) -> None:
    await store.set("claim", "ours")
    assert await guarded(
        store,
        "ours",
        ["RPUSH", "history", "q", "a"],
        ["LTRIM", "history", "-40", "-1"],
        ["SET", "claim", "done", "EX", "60"],
    ) == (1, (["q", "a"], "done", None))
    assert 0 < await store.ttl("claim") <= 60


async def test_a_claim_held_by_someone_else_or_gone_runs_nothing(store: Redis) -> None:
    await store.set("claim", "theirs")
    assert await guarded(store, "ours", ["RPUSH", "history", "q"]) == (0, ([], "theirs", None))
    await store.delete("claim")
    assert await guarded(store, "ours", ["SET", "done", "1"]) == (0, ([], None, None))


async def test_a_failing_command_is_an_error_and_what_ran_before_it_stays(store: Redis) -> None:
    """As in Redis: a script stops at a failing ``redis.call``; no rollback."""
    await store.set("claim", "ours")
    assert await guarded(
        store,
        "ours",
        ["SET", "done", "1"],
        ["RPUSH", "claim", "x"],  # the claim is a string: WRONGTYPE
        ["RPUSH", "history", "never"],
    ) == ("error: WRONGTYPE", ([], "ours", "1"))


async def test_watch_aborts_a_transaction_and_a_blocking_read_times_out(store: Redis) -> None:
    await store.set("w", "1")
    async with store.pipeline(transaction=True) as pipe:
        await pipe.watch("w")
        await store.set("w", "2")  # another client changes it: the transaction must not run
        pipe.multi()  # type: ignore[no-untyped-call]
        pipe.set("w", "3")
        with pytest.raises(WatchError):
            await pipe.execute()
    assert await store.get("w") == "2"
    assert await store.blpop(["empty"], timeout=0.01) is None


async def test_a_blocking_command_is_answered_when_another_client_writes() -> None:
    name = f"memory://embedded-{uuid.uuid4().hex[:8]}"
    reader, writer = await open_redis(name), await open_redis(name)
    try:
        popped: Any = reader.blpop(["queue"], timeout=30)
        waiting = asyncio.ensure_future(popped)
        await asyncio.sleep(0.05)
        await writer.rpush("queue", "x")
        assert await asyncio.wait_for(waiting, 30) == ("queue", "x")
        assert await reader.get("after") is None  # the connection still works after it
    finally:
        await reader.aclose()
        await writer.aclose()


@pytest.mark.parametrize("linked", [False, True])
@pytest.mark.parametrize("ttl", [0, 600])
async def test_the_link_alias_read_answers_and_keeps_the_link_alive(
    store: Redis, linked: bool, ttl: int
) -> None:
    """``alias_scripts.LOAD`` (every answered message's memory read): the linked person's
    buffer or the identity's own, and the link's expiries renewed (``EXPIRE`` never creates)."""
    await store.set("own", "own buffer")
    if linked:
        await store.set("alias", "p1")
        await store.set("person:p1:memory", "shared buffer")  # no members set: not created
    answer = await store.eval(LOAD, 2, "alias", "own", "person:", ttl)
    ttls = [await store.ttl(k) for k in ("alias", "person:p1:memory", "person:p1:members")]
    assert answer == (["p1", "shared buffer"] if linked else ["", "own buffer"])
    assert ttls == ([ttl, ttl, -2] if linked and ttl else [-1, -1, -2] if linked else [-2, -2, -2])
