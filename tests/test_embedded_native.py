"""The embedded store's native commands answer and write exactly as fakeredis's own code.

``bot.state.embedded_native`` runs the hot commands of an answered message (GET, SET, EXPIRE,
LRANGE, RPUSH, LTRIM, HSET, HINCRBY, ZADD) without fakeredis's generic machinery. Each test here
runs one random sequence of commands - over a few shared keys, so types collide; with odd
numbers, unknown and lower-case options, field TTLs, and a clock that moves past the TTLs it
sets - on two stores at once: chorus's embedded store and a plain fakeredis. Every reply (or
error) must be equal, every key the stores hold must be equal (value, type, expiry, whether an
expired key is still held), and the watchers told of a change must be the same keys; a counter
proves most commands really took the native path. A fakeredis release whose internals moved,
or a native function that drifted, fails here.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

import fakeredis
import pytest
from fakeredis._core import Database
from fakeredis.model import Hash, ZSet
from redis.asyncio import Redis

from bot.state import embedded
from bot.state.embedded_direct import COUNTS

SHARED = ["a", "b"]  # any command may use these, so types collide
OWN = {"string": ["s1", "s2"], "list": ["l1", "l2"], "hash": ["h1", "h2"], "zset": ["z1", "z2"]}
KINDS = ["GET", "SET", "SET", "SETGET", "EXPIRE", "LRANGE", "RPUSH", "LTRIM", "HSET", "HINCRBY"]
KINDS += ["ZADD", "ZADD", "DEL", "HEXPIRE"]
NUMBERS = ["0", "1", "2", "-1", "-2", "3", "10", "-20", "7", "99"]
ODD = ["01", "+1", " 1", "1.5", "-0", "x", "", "9223372036854775807", "9223372036854775808"]


class Clock:
    """The time both stores read (``time.time`` in fakeredis's dispatch and in ours)."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def time(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    import fakeredis._socket._base as base
    import fakeredis.commands_mixins.hash_mixin as hash_commands
    import fakeredis.model._hash as hashes

    now = Clock()
    monkeypatch.setattr(base, "time", now)
    monkeypatch.setattr(embedded, "time", now)
    for module in (hashes, hash_commands):  # field TTLs read the clock in milliseconds
        monkeypatch.setattr(module, "current_time", lambda: int(now.now * 1000))
    return now


@pytest.fixture
async def stores() -> AsyncIterator[tuple[Redis, Redis]]:
    native = embedded.client(fakeredis.FakeServer(), 0)
    plain = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer(), decode_responses=True)
    try:
        yield native, plain
    finally:
        await native.aclose()
        await plain.aclose()


@pytest.fixture
def notified(monkeypatch: pytest.MonkeyPatch) -> dict[int, list[bytes]]:
    """The keys each database's watchers were told of (``Database.notify_watch``)."""
    seen: dict[int, list[bytes]] = {}
    original = Database.notify_watch

    def spy(db: Database, key: bytes) -> None:
        seen.setdefault(id(db), []).append(key)
        original(db, key)

    monkeypatch.setattr(Database, "notify_watch", spy)
    return seen


def number(rng: random.Random) -> str:
    return rng.choice(NUMBERS if rng.random() < 0.9 else ODD)


def key_for(rng: random.Random, kind: str) -> str:
    return rng.choice(SHARED if rng.random() < 0.2 else OWN[kind])


def command(rng: random.Random) -> list[str]:
    """One random command, mostly of the native shapes, sometimes not."""
    kind = rng.choice(KINDS)
    of = {"GET": "string", "SET": "string", "SETGET": "string", "LRANGE": "list"}
    of |= {"RPUSH": "list", "LTRIM": "list", "HSET": "hash", "HINCRBY": "hash", "ZADD": "zset"}
    key = key_for(rng, of.get(kind) or rng.choice(list(OWN)))
    if kind == "GET":
        return ["GET", key]
    if kind in ("SET", "SETGET"):
        options = [
            ["NX"],
            ["PX", str(rng.choice([1, 500, 1500, 4000]))],
            ["EX", rng.choice(["1", "2", "0", "-1", "x"])],
            ["GET"] if kind == "SETGET" else [],
            [rng.choice(["XX", "nx", "KEEPTTL", "PXAT", "px"])] if rng.random() < 0.15 else [],
        ]
        picked = [word for option in rng.sample(options, rng.randint(0, 4)) for word in option]
        return ["SET", key, rng.choice(["v", "w", ""]), *picked]
    if kind == "EXPIRE":
        extra = [rng.choice(["NX", "GT", "XX"])] if rng.random() < 0.15 else []
        return ["EXPIRE", key, rng.choice(["1", "2", "3", "-1", "0", "x"]), *extra]
    if kind in ("LRANGE", "LTRIM"):
        return [kind, key, number(rng), number(rng)]
    if kind == "RPUSH":
        return ["RPUSH", key, *rng.choices(["p", "q", "r"], k=rng.randint(1, 3))]
    if kind == "HSET":
        pairs = [part for _ in range(rng.randint(1, 3)) for part in (rng.choice("fgh"), "1")]
        return ["HSET", key, *pairs[: len(pairs) - (rng.random() < 0.05)]]
    if kind == "HINCRBY":
        return ["HINCRBY", key, rng.choice("fgh"), number(rng)]
    if kind == "HEXPIRE":  # a field TTL: the native path must leave such a hash alone
        return ["HPEXPIRE", key, str(rng.choice([500, 2500])), "FIELDS", "1", rng.choice("fgh")]
    if kind == "DEL":
        return ["DEL", key]
    flags = rng.sample(["NX", "XX", "GT", "LT", "CH", "INCR", "gt"], rng.randint(0, 2))
    pairs = [part for _ in range(rng.randint(1, 3)) for part in (number(rng), rng.choice("mno"))]
    return ["ZADD", key, *flags, *pairs]


async def answer(redis: Redis, args: list[str]) -> Any:
    try:
        return await redis.execute_command(*args)  # type: ignore[no-untyped-call]
    except Exception as exc:  # the error, as a caller would see it
        return f"{type(exc).__name__}: {exc}"


def held(server: fakeredis.FakeServer) -> dict[bytes, tuple[str, Any, float | None]]:
    """Every key the store holds, expired or not, as (type, value, expiry)."""
    out: dict[bytes, tuple[str, Any, float | None]] = {}
    for key, item in server.dbs[0]._dict.items():
        value = item.value
        shown: Any
        if isinstance(value, Hash):
            shown = (sorted(value._values.items()), sorted(value._expirations.items()))
        elif isinstance(value, ZSet):
            shown = sorted(value.items())
        else:
            shown = value
        out[key] = (type(value).__name__, shown, item.expireat)
    return out


def servers(native: Redis, plain: Redis) -> tuple[fakeredis.FakeServer, fakeredis.FakeServer]:
    def pick(redis: Redis) -> fakeredis.FakeServer:
        server: fakeredis.FakeServer = redis.connection_pool.connection_kwargs["server"]
        return server

    return pick(native), pick(plain)


@pytest.mark.parametrize("seed", range(24))
async def test_random_commands_answer_and_write_as_fakeredis_does(
    seed: int, clock: Clock, stores: tuple[Redis, Redis], notified: dict[int, list[bytes]]
) -> None:
    native, plain = stores
    rng = random.Random(seed)
    before = COUNTS.native_commands
    for step in range(250):
        args = command(rng)
        got, expected = await answer(native, args), await answer(plain, args)
        assert got == expected, f"step {step}: {args}"
        if rng.random() < 0.3:
            clock.now += rng.choice([0.2, 0.7, 1.3, 2.6])
    native_server, plain_server = servers(native, plain)
    assert held(native_server) == held(plain_server)
    assert notified[id(native_server.dbs[0])] == notified[id(plain_server.dbs[0])]
    assert COUNTS.native_commands - before > 100  # most took the native path


@pytest.mark.parametrize("seed", range(8))
async def test_inside_a_transaction_the_native_commands_answer_as_fakeredis_does(
    seed: int, clock: Clock, stores: tuple[Redis, Redis]
) -> None:
    native, plain = stores
    rng = random.Random(1000 + seed)
    before = COUNTS.native_commands
    for _ in range(40):
        batch = [command(rng) for _ in range(rng.randint(1, 5))]
        results: list[Any] = []
        for redis in (native, plain):
            async with redis.pipeline(transaction=True) as pipe:
                for args in batch:
                    pipe.execute_command(*args)
                try:
                    outcome = await pipe.execute(raise_on_error=False)
                except Exception as exc:  # a command refused while queueing aborts them all
                    results.append(repr(exc))
                    continue
            results.append([r if not isinstance(r, Exception) else repr(r) for r in outcome])
        assert results[0] == results[1], batch
        clock.now += rng.choice([0.0, 0.9, 2.1])
    assert held(servers(native, plain)[0]) == held(servers(native, plain)[1])
    assert COUNTS.native_commands - before > 40


async def test_while_someone_listens_for_keyspace_events_fakeredis_runs_the_command(
    stores: tuple[Redis, Redis],
) -> None:
    """Notifications come from fakeredis's own dispatch, so the native path steps aside."""
    native, _ = stores
    await native.config_set("notify-keyspace-events", "KEA")
    pubsub = native.pubsub()
    await pubsub.psubscribe("__keyspace@0__:*")
    assert (await pubsub.get_message(timeout=1.0))["type"] == "psubscribe"
    before = COUNTS.native_commands
    await native.rpush("l", "x")
    message = await pubsub.get_message(timeout=1.0)
    assert message is not None and message["data"] == "rpush"
    assert COUNTS.native_commands == before
    await pubsub.punsubscribe()
    assert (await pubsub.get_message(timeout=1.0))["type"] == "punsubscribe"
    await pubsub.aclose()  # type: ignore[no-untyped-call]
    await native.rpush("l", "y")  # nobody listens now: native again
    assert COUNTS.native_commands == before + 1
    assert await native.lrange("l", 0, -1) == ["x", "y"]
