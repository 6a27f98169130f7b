"""The embedded store runs the claims' guarded commit natively, with the script's semantics.

``bot.state.embedded`` recognises ``GUARDED`` by its text and runs it in Python instead of
fakeredis's Lua engine (a fifth of an in-process turn's instructions). Each test runs the same
call twice on one embedded store: once as ``GUARDED`` (the native path) and once as the same
script with a trailing comment (which only Lua can run), and compares what they return and what
they leave in the store; a counter proves which path ran. The claims' contract over both real
Redis and the embedded store is tests/test_claims.py and tests/test_bus_contract.py.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from bot.state.connect import open_redis
from bot.state.embedded import _Socket
from bot.state.guarded import GUARDED

THROUGH_LUA = GUARDED + "-- not the claims' script, so fakeredis's Lua engine runs it\n"


@pytest.fixture
async def store() -> AsyncIterator[Redis]:
    client = await open_redis(f"memory://embedded-{uuid.uuid4().hex[:8]}")
    try:
        yield client
    finally:
        await client.aclose()


async def both(store: Redis, token: str, *commands: list[Any]) -> list[tuple[Any, Any]]:
    """Run the guarded commands natively on keys ``n:*`` and through Lua on ``l:*``; return
    each run's answer (or error text) and the keys it left (``history``, ``claim``)."""
    outcomes = []
    for prefix, script in (("n", GUARDED), ("l", THROUGH_LUA)):
        argv: list[Any] = [token]
        for command in commands:
            cmd = [
                part.replace("{p}", prefix) if isinstance(part, str) else part for part in command
            ]
            argv += [len(cmd), *cmd]
        before = _Socket.native_evals
        try:
            answer: Any = await store.eval(script, 1, f"{prefix}:claim", *argv)
        except ResponseError as exc:
            answer = "error: " + ("WRONGTYPE" if "WRONGTYPE" in str(exc) else str(exc))
        assert _Socket.native_evals - before == (1 if prefix == "n" else 0)
        left = (
            await store.lrange(f"{prefix}:history", 0, -1),
            await store.get(f"{prefix}:claim"),
            await store.get(f"{prefix}:done"),
        )
        outcomes.append((answer, left))
    return outcomes


async def test_a_held_claim_runs_every_command_and_answers_one(store: Redis) -> None:
    for prefix in ("n", "l"):
        await store.set(f"{prefix}:claim", "ours")
    native, lua = await both(
        store,
        "ours",
        ["RPUSH", "{p}:history", "q", "a"],
        ["LTRIM", "{p}:history", "-40", "-1"],
        ["SET", "{p}:claim", "done", "EX", "60"],
    )
    assert native == lua == (1, (["q", "a"], "done", None))
    assert 0 < await store.ttl("n:claim") <= 60


async def test_a_claim_held_by_someone_else_or_gone_runs_nothing(store: Redis) -> None:
    for prefix in ("n", "l"):
        await store.set(f"{prefix}:claim", "theirs")
    native, lua = await both(store, "ours", ["RPUSH", "{p}:history", "q"])
    assert native == lua == (0, ([], "theirs", None))
    for prefix in ("n", "l"):
        await store.delete(f"{prefix}:claim")
    native, lua = await both(store, "ours", ["SET", "{p}:done", "1"])
    assert native == lua == (0, ([], None, None))


async def test_a_failing_command_is_an_error_and_what_ran_before_it_stays(store: Redis) -> None:
    """As in Redis: a script stops at a failing ``redis.call``; no rollback."""
    for prefix in ("n", "l"):
        await store.set(f"{prefix}:claim", "ours")
    native, lua = await both(
        store,
        "ours",
        ["SET", "{p}:done", "1"],
        ["RPUSH", "{p}:claim", "x"],  # the claim is a string: WRONGTYPE
        ["RPUSH", "{p}:history", "never"],
    )
    assert native == lua == ("error: WRONGTYPE", ([], "ours", "1"))


async def test_other_scripts_still_run_through_lua(store: Redis) -> None:
    before = _Socket.native_evals
    assert await store.eval("return ARGV[1] .. KEYS[1]", 1, "k", "v") == "vk"
    assert _Socket.native_evals == before


async def test_commands_skip_the_wire_format_and_round_trip_every_kind_of_value(
    store: Redis,
) -> None:
    before = _Socket.direct_commands
    text = "héllo\r\n$3\r\n*2 ünïcode ✓"  # RESP framing characters inside a value
    await store.set("s", text)
    await store.hset("h", mapping={"int": 7, "float": 1.5, "bytes": b"\x00\xff"})
    async with store.pipeline(transaction=True) as pipe:
        pipe.rpush("l", "a", "b")
        pipe.lrange("l", 0, -1)
        pipe.incrby("n", 3)
        assert await pipe.execute() == [2, ["a", "b"], 3]
    assert await store.get("s") == text
    assert await store.hget("h", "int") == "7"
    assert await store.hget("h", "float") == "1.5"
    sha = await store.execute_command("SCRIPT LOAD", "return 1")  # type: ignore[no-untyped-call]
    assert await store.execute_command("SCRIPT EXISTS", sha) == [1]  # type: ignore[no-untyped-call]
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await store.rpush("s", "x")
    assert _Socket.direct_commands - before >= 9


def test_the_wire_format_written_while_paused_is_redis_pys_own() -> None:
    from redis.asyncio.connection import Connection

    from bot.state.embedded import resp

    args = ("SET", "k", "héllo", 3, 1.5, b"\x00")
    packed = b"".join(Connection().pack_command(*args))
    fields = [Connection().encoder.encode(a) for a in args]  # type: ignore[no-untyped-call]
    assert resp(fields) == packed


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
