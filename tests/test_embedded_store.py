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
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import fakeredis
import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError, WatchError

from bot.state import embedded
from bot.state.alias_scripts import LOAD
from bot.state.connect import open_redis
from bot.state.embedded import _Connection
from bot.state.embedded_direct import COUNTS, Pool
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
        before, unparsed = COUNTS.native_evals, COUNTS.unparsed_evals
        try:
            answer: Any = await store.eval(script, 1, f"{prefix}:claim", *argv)
        except ResponseError as exc:
            answer = "error: " + ("WRONGTYPE" if "WRONGTYPE" in str(exc) else str(exc))
        assert COUNTS.native_evals - before == (1 if prefix == "n" else 0)
        assert COUNTS.unparsed_evals - unparsed == (1 if prefix == "n" else 0)
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
    before = COUNTS.native_evals
    assert await store.eval("return ARGV[1] .. KEYS[1]", 1, "k", "v") == "vk"
    assert COUNTS.native_evals == before


async def test_commands_skip_the_wire_format_and_round_trip_every_kind_of_value(
    store: Redis,
) -> None:
    before, wire_before = COUNTS.direct, COUNTS.unpacked
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
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await store.rpush("s", "x")
    assert COUNTS.direct - before == 11  # 2 + MULTI, 3 commands, EXEC + 4
    # Commands off the direct path still skip RESP on the way in (the connection's own path).
    sha = await store.execute_command("SCRIPT LOAD", "return 1")  # type: ignore[no-untyped-call]
    assert await store.execute_command("SCRIPT EXISTS", sha) == [1]  # type: ignore[no-untyped-call]
    assert COUNTS.unpacked - wire_before >= 2
    assert COUNTS.direct - before == 11


async def _session(redis: Redis) -> list[Any]:
    """Commands of every reply shape, error replies and pipelines: what a caller sees."""
    seen: list[Any] = []

    def shown(value: Any) -> Any:  # an error is its class and text (a pipeline's included)
        if isinstance(value, Exception):
            return (type(value), str(value))
        return [shown(item) for item in value] if isinstance(value, list) else value

    async def see(call: Awaitable[Any]) -> None:
        try:
            seen.append(shown(await call))
        except Exception as exc:
            seen.append(shown(exc))

    await see(redis.set("s", "héllo"))
    await see(redis.set("s", "again", get=True))
    await see(redis.get("missing"))
    await see(redis.mget("s", "missing"))
    await see(redis.incrbyfloat("f", 1.5))
    await see(redis.hset("h", mapping={"a": 1, "b": b"\xc3\xa9"}))
    await see(redis.hgetall("h"))
    await see(redis.zadd("z", {"x": 1.5, "y": 2}))
    await see(redis.zrange("z", 0, -1, withscores=True))
    await see(redis.zscore("z", "x"))
    await see(redis.expire("s", 100))
    await see(redis.ttl("s"))
    await see(redis.exists("s", "h", "missing"))
    await see(redis.xadd("x", {"k": "v"}, id="1-1"))
    await see(redis.xrange("x"))
    await see(redis.ping())
    await see(redis.eval("return {1, 'two', {3}}", 0))
    await see(redis.evalsha("0" * 40, 0))  # NoScriptError
    await see(redis.rpush("s", "x"))  # WRONGTYPE
    await see(redis.set("k", True))  # refused before it is sent (bool)
    await see(redis.execute_command("GET"))  # type: ignore[no-untyped-call]  # arity
    for transaction in (False, True):
        for raise_on_error in (False, True):
            async with redis.pipeline(transaction=transaction) as pipe:
                pipe.incr("n")
                pipe.rpush("s", "x")  # WRONGTYPE
                pipe.hgetall("h")
                pipe.zrange("z", 0, -1, withscores=True)
                await see(pipe.execute(raise_on_error=raise_on_error))
        async with redis.pipeline(transaction=transaction) as pipe:
            pipe.incr("n")
            pipe.execute_command("GET")  # EXECABORT in a transaction
            await see(pipe.execute())
    seen.append(sorted(await redis.keys()))
    return seen


async def test_the_direct_path_answers_as_the_wire_path_did() -> None:
    """The same session on a store taking the direct path and on one without it (fakeredis's
    own client with the RESP-less connection, as before): the same answers, errors and data."""
    direct = embedded.client(fakeredis.FakeServer(), 0)
    wire = fakeredis.FakeAsyncRedis(
        server=fakeredis.FakeServer(), decode_responses=True, connection_class=_Connection
    )
    before = COUNTS.direct
    try:
        through_direct = await _session(direct)
        assert COUNTS.direct - before > 40
        before = COUNTS.direct
        assert await _session(wire) == through_direct
        assert COUNTS.direct == before
    finally:
        await direct.aclose()
        await wire.aclose()


async def test_first_commands_at_once_share_one_direct_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = embedded.client(fakeredis.FakeServer(), 0)
    pool = client.connection_pool
    assert isinstance(pool, Pool)
    made: list[Any] = []
    make = pool.make_connection

    def slow_to_connect() -> Any:  # a handshake that yields, so the three tasks overlap
        conn = make()  # type: ignore[no-untyped-call]
        connect = conn.connect

        async def later() -> None:
            await asyncio.sleep(0)
            await connect()

        conn.connect = later
        made.append(conn)
        return conn

    monkeypatch.setattr(pool, "make_connection", slow_to_connect)
    try:
        answers = await asyncio.gather(*(client.incr("n") for _ in range(3)))
        assert sorted(answers) == [1, 2, 3]
        assert len(made) == 3
        live = [conn for conn in made if conn._sock is not None]
        assert live == [pool.live()]  # the others were closed again
        assert await client.get("n") == "3"
    finally:
        await client.aclose()


async def test_watch_blocking_and_a_killed_or_stopped_store_keep_the_wire_paths_answers(
    store: Redis,
) -> None:
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
    pool = store.connection_pool
    assert isinstance(pool, Pool)
    killed = pool.live()
    await store.execute_command("CLIENT KILL", "ID", killed._sock._client_info["id"])  # type: ignore[no-untyped-call]
    assert await store.get("w") == "2"  # a new direct connection
    assert pool.live() is not killed
    server = killed._server
    server.connected = False
    try:
        with pytest.raises(RedisConnectionError):
            await store.get("w")
    finally:
        server.connected = True
    assert await store.get("w") == "2"


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


@pytest.mark.parametrize("linked", [False, True])
@pytest.mark.parametrize("ttl", [0, 600])
async def test_the_link_alias_read_runs_natively_with_the_scripts_answer_and_effects(
    store: Redis, linked: bool, ttl: int
) -> None:
    """``alias_scripts.LOAD`` (every answered message's memory read) natively and through Lua:
    the same answer, the same expiries (``EXPIRE`` never creates a key)."""
    found = []
    for prefix, script in (("n", LOAD), ("l", LOAD + "-- only Lua runs this\n")):
        alias, own, people = f"{prefix}:alias", f"{prefix}:own", f"{prefix}:person:"
        await store.set(own, "own buffer")
        if linked:
            await store.set(alias, "p1")
            await store.set(f"{people}p1:memory", "shared buffer")  # no members set: not created
        before, unparsed = COUNTS.native_evals, COUNTS.unparsed_evals
        answer = await store.eval(script, 2, alias, own, people, ttl)
        assert COUNTS.native_evals - before == (1 if prefix == "n" else 0)
        assert COUNTS.unparsed_evals - unparsed == (1 if prefix == "n" else 0)
        ttls = [await store.ttl(k) for k in (alias, f"{people}p1:memory", f"{people}p1:members")]
        found.append((answer, ttls))
    assert found[0] == found[1]
    answer, ttls = found[0]
    assert answer == (["p1", "shared buffer"] if linked else ["", "own buffer"])
    assert ttls == ([ttl, ttl, -2] if linked and ttl else [-1, -1, -2] if linked else [-2, -2, -2])
