"""The embedded store kept on disk (``bot.state.embedded``, ``bot.state.statefile``).

Each test drives a persistent store and an in-memory twin (``memory://``) with the same
commands, closes the persistent one (as a clean stop does) and opens the directory again: what
it loads must be what the twin holds. Faults are injected into the files: a torn log tail, a
damaged record, a file of another format, a second process on the directory. The real
processes (``kill -9``, SIGTERM, ``/forget``) are tests/test_persistence_e2e.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest
from redis.asyncio import Redis

from bot.settings import ConfigError
from bot.state import embedded, statefile
from bot.state.connect import open_redis
from bot.state.statefile import StateRefused

# It starts processes (tests/suite_rules.py): `make test-fast` leaves it out.
pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent


async def reopen(directory: Path) -> Redis:
    return await open_redis("embedded://", data_dir=directory)


@pytest.fixture
async def twin() -> AsyncIterator[Redis]:
    client = await open_redis(f"memory://twin-{uuid.uuid4().hex[:8]}")
    yield client
    await client.aclose()


@pytest.fixture
def directory(tmp_path: Path) -> Any:
    path = tmp_path / "state"
    yield path
    embedded.shutdown(path)


async def view(redis: Redis, pattern: str = "*") -> dict[str, Any]:
    """Every key's type and content, read through ordinary commands."""
    seen: dict[Any, Any] = {}
    for key in sorted(await redis.keys(pattern)):
        kind = await redis.type(key)
        if kind == "string":
            value: Any = await redis.get(key)
        elif kind == "hash":
            value = await redis.hgetall(key)
        elif kind == "list":
            value = await redis.lrange(key, 0, -1)
        elif kind == "set":
            value = sorted(await redis.smembers(key))
        elif kind == "zset":
            value = await redis.zrange(key, 0, -1, withscores=True)
        else:
            groups = await redis.xinfo_groups(key)
            pending = [await redis.xpending_range(key, g["name"], "-", "+", 100) for g in groups]
            value = (
                await redis.xrange(key),
                [(g["name"], g["last-delivered-id"], g["pending"]) for g in groups],
                [
                    [(p["message_id"], p["consumer"], p["times_delivered"]) for p in ps]
                    for ps in pending
                ],
            )
        seen[key] = (kind, value, await redis.ttl(key) > 0)
    return seen


def damage(log: Path, text: bytes) -> None:
    """Change ``text`` in the log's records, keeping each frame's checksum true: only the
    ``DUMP`` payload's own checksum can tell."""
    data = log.read_bytes()
    start = data.index(b"\n") + 1
    bodies = []
    while start < len(data):
        size = int.from_bytes(data[start : start + 4], "big")
        bodies.append(data[start + 8 : start + 8 + size])
        start += 8 + size
    damaged = [
        r._replace(payload=r.payload.replace(text, text.upper()))
        for body in bodies
        for r in statefile.decode_batch(body)
    ]
    log.write_bytes(data[: data.index(b"\n") + 1] + statefile.encode_batch(damaged))


def append_log(directory: Path, generation: int, records: list[statefile.Record]) -> None:
    with statefile.open_log(directory, generation, embedded.ENGINE) as f:
        statefile.append(f, records)


def write(path: Path, content: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)


def chop(path: Path, count: int) -> None:
    path.write_bytes(path.read_bytes()[:-count])


def names(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir()]


def files_of(directory: Path) -> bytes:
    return b"".join(p.read_bytes() for p in directory.iterdir())


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


async def every_type(redis: Redis) -> None:
    """Every kind of value Chorus keeps, streams with a consumer group and pending entries."""
    await redis.set("s", "héllo ✓")
    await redis.set("counter", 7, ex=3600)
    await redis.hset("h", mapping={"a": "1", "b": "two"})
    await redis.rpush("l", "x", "y", "z")
    await redis.sadd("set", "m1", "m2")
    await redis.zadd("z", {"a": 1.5, "b": -2})
    for i in range(3):
        await redis.xadd("stream", {"n": str(i)}, id=f"1-{i + 1}")
    await redis.xgroup_create("stream", "workers", id="0")
    await redis.xreadgroup("workers", "w1", {"stream": ">"}, count=2)
    await redis.xack("stream", "workers", "1-1")
    await redis.set("stream:touch", "1")  # a later write: the stream's PEL is flushed with it
    await redis.xadd("stream", {"n": "3"}, id="1-4")


async def test_every_type_survives_a_clean_stop(directory: Path, twin: Redis) -> None:
    store = await reopen(directory)
    await every_type(store)
    await every_type(twin)
    await store.aclose()
    embedded.shutdown(directory)
    again = await reopen(directory)
    assert await view(again) == await view(twin)
    assert 3500 < await again.ttl("counter") <= 3600


async def test_random_writes_and_deletes_load_as_the_twin_holds_them(
    directory: Path, twin: Redis
) -> None:
    store = await reopen(directory)
    rng = random.Random(35)
    for step in range(400):
        key = f"k{rng.randrange(30)}"
        op = rng.randrange(6)
        for redis in (store, twin):
            if op == 0:
                await redis.set(key, f"v{step}")
            elif op == 1:
                await redis.delete(key)
            elif op == 2:
                await redis.hset(f"h{key}", f"f{step % 5}", step)
            elif op == 3:
                await redis.rpush(f"l{key}", step)
                await redis.ltrim(f"l{key}", -5, -1)
            elif op == 4:
                await redis.eval("redis.call('SET', ARGV[1], ARGV[2])", 0, key, f"lua{step}")
            else:
                async with redis.pipeline(transaction=True) as pipe:
                    pipe.zadd(f"z{key}", {str(step): step})
                    pipe.expire(f"z{key}", 600)
                    await pipe.execute()
        if step % 97 == 0:  # some batches on disk before the end, in the same log
            embedded.persistent(directory, compact_seconds=600).flush()
        if step == 250:
            embedded.persistent(directory, compact_seconds=600).compact()
    embedded.shutdown(directory)
    assert await view(await reopen(directory)) == await view(twin)


async def test_an_expiry_is_absolute_and_a_key_expired_while_down_is_gone(
    directory: Path,
) -> None:
    store = await reopen(directory)
    await store.set("short", "x", px=300)
    await store.set("long", "y", ex=3600)
    embedded.shutdown(directory)
    deadline = time.time() + 0.4
    while time.time() < deadline:  # noqa: ASYNC110 (the clock: the store is "down" past the expiry)
        await asyncio.sleep(0.05)
    again = await reopen(directory)
    assert await again.get("short") is None
    assert await again.get("long") == "y" and await again.ttl("long") > 3500


async def test_a_compaction_leaves_no_byte_of_deleted_or_overwritten_text(
    directory: Path,
) -> None:
    store = await reopen(directory)
    secret, note = b"the-forgotten-secret-8721", b"an-overwritten-note-3310"
    await store.set("memory:u1", secret)
    await store.hset("profile", "note", note)
    await store.set("keep", "kept")
    persistent = embedded.persistent(directory, compact_seconds=600)
    persistent.flush()
    assert secret in files_of(directory)
    await store.delete("memory:u1")
    await store.hset("profile", "note", "replaced")
    persistent.compact()
    files = files_of(directory)
    assert secret not in files and note not in files
    assert b"kept" in files


async def test_a_crash_between_the_log_switch_and_the_snapshot_loses_nothing(
    directory: Path,
) -> None:
    """A compaction starts the next log before its snapshot is renamed in: killed between the
    two, the old snapshot and both logs are read, in order."""
    store = await reopen(directory)
    await store.set("a", "1")
    await store.set("b", "old")
    embedded.shutdown(directory)
    payload = fakeredis.FakeRedis()
    payload.set("b", "new")
    dumped = payload.dump("b")
    assert isinstance(dumped, bytes)
    append_log(directory, 1, [statefile.Record(0, b"b", 0, dumped)])
    again = await reopen(directory)
    assert (await again.get("a"), await again.get("b")) == ("1", "new")
    await again.set("c", "3")  # appended to the newest log
    embedded.shutdown(directory)
    third = await reopen(directory)
    assert await third.mget("a", "b", "c") == ["1", "new", "3"]


async def test_a_torn_tail_costs_one_warning_and_the_rest_loads(
    directory: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = await reopen(directory)
    await store.set("first", "1")
    embedded.persistent(directory, compact_seconds=600).flush()
    await store.set("second", "2")
    embedded.shutdown(directory)
    log = directory / statefile.log_name(0)
    chop(log, 7)  # the last batch torn by a power loss
    with caplog.at_level(logging.WARNING, "chorus.store"):
        again = await reopen(directory)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "torn or corrupt tail" in warnings[0].getMessage()
    assert str(log) in warnings[0].getMessage()
    assert await again.get("first") == "1" and await again.get("second") is None
    await again.set("third", "3")  # appended after the cut, readable next time
    embedded.shutdown(directory)
    caplog.clear()
    with caplog.at_level(logging.WARNING, "chorus.store"):
        third = await reopen(directory)
    assert not caplog.records
    assert await third.get("first") == "1" and await third.get("third") == "3"


async def test_a_damaged_record_costs_one_warning_naming_its_key(
    directory: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = await reopen(directory)
    await store.set("good", "fine")
    await store.set("bad", "payload-to-damage")
    embedded.shutdown(directory)
    damage(directory / statefile.log_name(0), b"payload-to-damage")
    with caplog.at_level(logging.WARNING, "chorus.store"):
        again = await reopen(directory)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "bad" in warnings[0] and "1 keys" in warnings[0]
    assert await again.get("good") == "fine" and await again.get("bad") is None


async def test_another_format_is_refused_and_left_untouched(directory: Path) -> None:
    snapshot = directory / statefile.SNAPSHOT
    newer = b'{"format": "chorus-state", "version": 99}\nwhatever'
    other = b"SQLite format 3\x00"
    for content, refusal in ((newer, "version 99"), (other, "not a Chorus state file")):
        write(snapshot, content)
        with pytest.raises(StateRefused, match=refusal):
            await reopen(directory)
        assert files_of(directory) == content  # the lock file is empty: released
    assert isinstance(StateRefused("x"), ConfigError)  # chorus prints it without a traceback
    assert sorted(names(directory)) == ["lock", "snapshot"]


async def test_a_second_process_on_the_directory_is_refused_with_the_holders_pid(
    directory: Path,
) -> None:
    await reopen(directory)
    code = (
        "import asyncio, sys\n"
        "from bot.state.connect import open_redis\n"
        "try:\n"
        f"    asyncio.run(open_redis('embedded://', data_dir=__import__('pathlib').Path({str(directory)!r})))\n"
        "except Exception as exc:\n"
        "    print(exc); sys.exit(3)\n"
    )
    done = run_python(code)
    assert done.returncode == 3, done.stderr
    assert str(directory) in done.stdout and f"pid {os.getpid()}" in done.stdout
    embedded.shutdown(directory)
    again = run_python(code)
    assert again.returncode == 0, again.stdout + again.stderr  # released: the next one may


async def test_the_copy_to_redis_carries_every_type_its_content_and_expiry(
    tmp_path: Path, real_redis: Redis, real_redis_url: str, key_tag: str
) -> None:
    """``python -m bot.state.copy URL`` (the move to Redis), as a process, from the data
    directory of the settings to the real server; compared through ordinary commands."""
    data = tmp_path / "data"
    store = await open_redis("embedded://", data_dir=data / "state")
    await store.set(f"{key_tag}:s", "héllo", ex=3600)
    await store.hset(f"{key_tag}:h", mapping={"a": "1"})
    await store.rpush(f"{key_tag}:l", "x", "y")
    await store.sadd(f"{key_tag}:set", "m")
    await store.zadd(f"{key_tag}:z", {"a": 1.5})
    await store.xadd(f"{key_tag}:x", {"k": "v"}, id="1-1")
    await store.xgroup_create(f"{key_tag}:x", "g", id="0")
    embedded.shutdown(data / "state")
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "bot.state.copy", real_redis_url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "CHORUS_DATA_DIR": str(data)},
    )
    assert done.returncode == 0, done.stderr
    assert "copied 6 keys" in done.stdout
    source = await open_redis("embedded://", data_dir=data / "state")
    assert await view(real_redis, f"{key_tag}:*") == await view(source, f"{key_tag}:*")
    assert 3500 < await real_redis.ttl(f"{key_tag}:s") <= 3600


def test_the_copy_refuses_a_redis_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    """The cluster layout names some keys differently: a copy of names as they are would put
    a user's memory where a clustered Chorus never looks, so it is refused, saying why."""
    from bot.state import copy

    assert copy.main(["redis+cluster://127.0.0.1:7000,127.0.0.1:7001"]) == 2
    assert "Redis Cluster is not supported" in capsys.readouterr().err
