"""What following a ``/link`` alias costs the reply path (bot/state/alias_scripts.py).

The router's read pipeline (history + memory, one round trip) is timed on a real Redis three
ways: the memory read as a plain ``GET`` (what it was before ``/link`` existed), as the
alias-following ``LOAD`` script for an unlinked user, and for a linked one. Interleaved rounds,
so the machine's load hits each variant alike; reported as p50/p99 and as ratios to the plain
``GET``. Also the Redis bytes a link adds (``MEMORY USAGE`` of the alias and the member set).
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from bot.events import ConversationKey
from bot.memory.buffers import MemoryStore
from bot.memory.people import People
from bot.settings.memory import MemorySettings
from bot.state import connect, keys
from bot.state.alias_scripts import LOAD
from bot.state.history import HistoryEntry, HistoryStore
from tests.memory_samples import full_buffer

ROUNDS = 3000


async def _read(
    redis: Redis, history: HistoryStore, conv: ConversationKey, load: Callable[[Pipeline], object]
) -> float:
    started = time.perf_counter()
    async with redis.pipeline(transaction=False) as pipe:
        history.queue_load(pipe, conv)
        load(pipe)
        await pipe.execute()
    return time.perf_counter() - started


def _alias_read(pipe: Pipeline, user: str) -> object:
    """The memory read a turn sends (``bot.state.redis_turn``): the alias-following script."""
    who = ("discord", user)
    return pipe.eval(LOAD, 2, keys.person_of(*who), keys.memory(*who), keys.person_prefix(), 0)


def _pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1] * 1000


async def measure(url: str, rounds: int = ROUNDS) -> dict[str, dict[str, float]]:
    redis = await connect.open_redis(url)
    tag = uuid.uuid4().hex[:10]
    memory = MemoryStore(redis, MemorySettings())
    history = HistoryStore(redis, max_messages=40, ttl_seconds=3600)
    conv = ConversationKey(platform="discord", channel=f"bench-{tag}")
    plain, linked = f"plain-{tag}", f"linked-{tag}"
    try:
        await history.append(
            conv, *[HistoryEntry(role="user", text=f"line {n}", author_id="x") for n in range(40)]
        )
        for user in (plain, linked):
            await memory.save(full_buffer(user, "a"))
        people = People(memory, person_ids=lambda: f"bench{tag}")
        twitch = full_buffer(linked, "b").model_copy(update={"platform": "twitch"})
        await memory.save(twitch)
        await people.link(("twitch", linked), ("discord", linked))
        variants: dict[str, Callable[[Pipeline], object]] = {
            "plain GET (before /link)": lambda p: p.get(keys.memory("discord", plain)),
            "alias script, unlinked user": lambda p: _alias_read(p, plain),
            "alias script, linked user": lambda p: _alias_read(p, linked),
        }
        times: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(200):  # warm the connection and the script cache
            for load in variants.values():
                await _read(redis, history, conv, load)
        for _ in range(rounds):
            for name, load in variants.items():
                times[name].append(await _read(redis, history, conv, load))
        alias_bytes = await redis.memory_usage(keys.person_of("discord", linked)) or 0
        members_bytes = await redis.memory_usage(keys.person_members(f"bench{tag}")) or 0
        base = _pct(times["plain GET (before /link)"], 50)
        result = {
            name: {"p50": _pct(ts, 50), "p99": _pct(ts, 99), "ratio": _pct(ts, 50) / base}
            for name, ts in times.items()
        }
        result["bytes"] = {"alias": float(alias_bytes), "members": float(members_bytes)}
        return result
    finally:
        doomed = [k async for k in redis.scan_iter(match=f"*{tag}*")]
        if doomed:
            await redis.delete(*doomed)
        await redis.aclose()


async def main(url: str | None = None) -> list[str]:
    from bench.memory import REAL

    result = await measure(url or REAL)
    sizes = result.pop("bytes")
    lines = [
        "## Following a /link alias on the reply path",
        "",
        f"The turn's read pipeline (40 history lines + a full memory buffer), {ROUNDS} "
        "interleaved rounds on Redis 127.0.0.1:",
        "",
        "| memory read | p50 | p99 | p50 ratio to the plain GET |",
        "|---|---|---|---|",
    ]
    for name, row in result.items():
        lines.append(f"| {name} | {row['p50']:.3f} ms | {row['p99']:.3f} ms | {row['ratio']:.2f} |")
    lines += [
        "",
        f"A link adds {sizes['alias']:.0f} bytes per identity (the alias) and "
        f"{sizes['members']:.0f} bytes per person (the member set, two identities); the two "
        "buffers become one.",
    ]
    return lines
