"""The admin dashboard's pages on a large deployment: 10,000 conversations and 100,000 people.

Seeds a real Redis database of its own (``CHORUS_BENCH_ADMIN_REDIS_URL``, default db 12 on
127.0.0.1, flushed before and after) through pipelines: every conversation with a full turn log
(20 records), a history and its place in the activity index; every person with a memory buffer
(5 pins, 2 recommendations) and the names index; a 1,000-job insights queue, the timeline's
rollups (a day of minutes, a week of hours) and 10,000 audit entries; the repository's docs
indexed as the deployment's knowledge base and the example quote-book plugin loaded. Then
serves the real dashboard (aiohttp, Jinja2, Bearer login) on a loopback port and times each
page over HTTP: p50 and p95 of ``ROUNDS`` requests.
The budget is 200 ms per page (issue 18); the section says whether each page keeps it.

Run alone: ``.venv/bin/python -m bench.admin``; in ``make bench`` as "Admin dashboard".
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
from redis.asyncio import Redis

from bot.admin.server import AdminServer
from bot.admin.views import Sources
from bot.events import ConversationKey
from bot.knowledge.wiring import RecallParts
from bot.memory.buffers import MemoryStore, Pin, Recommendation, UserBuffer, encode
from bot.plugins.loader import Source, load_plugins
from bot.safety.audit import Audit, AuditEntry
from bot.settings import load_settings
from bot.state import connect, keys, rollups, turnlog
from bot.state.history import HistoryEntry, HistoryStore
from bot.state.turnlog import Timeline, TurnLog

URL = os.environ.get("CHORUS_BENCH_ADMIN_REDIS_URL", "redis://127.0.0.1:6379/12")
CONVERSATIONS, PEOPLE, RECORDS, ROUNDS = 10_000, 100_000, 20, 40
TOKEN = "bench-admin-token-0123456789"
BUDGET_MS = 200.0
ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "chorus.example.toml"
GUILD, CHANNEL = "123456789012345678", "223456789012345678"  # a scope of the example file
CHUNK = 1_000


async def seed(redis: Redis, now: datetime) -> float:
    """Fill the database; returns the seconds it took."""
    started = time.perf_counter()
    history = HistoryStore(redis, max_messages=20, ttl_seconds=3600)
    platforms = turnlog.PLATFORMS
    for start in range(0, CONVERSATIONS, CHUNK):
        async with redis.pipeline(transaction=False) as pipe:
            for i in range(start, min(start + CHUNK, CONVERSATIONS)):
                conv = ConversationKey(platform=platforms[i % len(platforms)], channel=f"c{i}")
                at = now.timestamp() - (CONVERSATIONS - i)
                records = [
                    turnlog.TurnRecord(
                        at=at + j,
                        message_id=f"m{i}-{j}",
                        user_id=f"u{(i * 7 + j) % PEOPLE}",
                        user_name=f"Person {(i * 7 + j) % PEOPLE}",
                        decision="answered" if j % 3 else "quiet",
                        reason="" if j % 3 else "chatter",
                        model="anthropic:claude-sonnet-4-5",
                        prompt_tokens=1800,
                        cache_share=0.9,
                        output_tokens=60,
                        latency_ms=900,
                        cost_usd=0.0012,
                    )  # fmt: skip
                    for j in range(RECORDS)
                ]
                turnlog.queue_records(pipe, conv, records, names=False)
                lines = [
                    HistoryEntry(
                        role="user",
                        text=f"line {j} in {i}",
                        message_id=f"m{i}-{j}",
                        author_id="u1",
                        author_name="Person 1",
                        at=now,
                    )  # fmt: skip
                    for j in range(10)
                ]
                history.queue_append(pipe, conv, *lines)
            await pipe.execute()
    memory = MemoryStore(redis)
    stamp = now.replace(microsecond=0)
    for start in range(0, PEOPLE, CHUNK * 5):
        async with redis.pipeline(transaction=False) as pipe:
            names: dict[str, float] = {}
            for u in range(start, min(start + CHUNK * 5, PEOPLE)):
                platform, user = platforms[u % len(platforms)], f"u{u}"
                buffer = UserBuffer(
                    platform=platform,
                    user_id=user,
                    pins=tuple(
                        Pin(
                            text=f"fact {k} about {u}",
                            source=f"m{k}",
                            confidence=0.8,
                            created_at=stamp,
                            updated_at=stamp,
                        )  # fmt: skip
                        for k in range(5)
                    ),
                    recommendations=(
                        Recommendation(text="keep answers short", created_at=stamp),
                        Recommendation(text="likes examples", created_at=stamp),
                    ),
                )
                pipe.set(keys.memory(platform, user), encode(buffer), ex=3600)
                names[turnlog.name_member(f"Person {u}", platform, user)] = 0
                names[turnlog.name_member(user, platform, user)] = 0
            pipe.zadd(keys.user_names(), names)
            await pipe.execute()
    async with redis.pipeline(transaction=False) as pipe:
        for u in range(1_000):
            member = keys.insights_member("discord", f"u{u}")
            pipe.zadd(keys.insights_due(), {member: int(now.timestamp() * 1000) + u})
            pipe.hset(keys.insights_job("discord", f"u{u}"), mapping={"rev": 3, "name": f"P{u}"})
        for u in range(10_000):
            entry = AuditEntry(at_ms=u, direction="in", rule="slur:x:1", action="refused")
            pipe.xadd(keys.safety_audit(), entry.fields())  # type: ignore[arg-type]
        await pipe.execute()
    line = Timeline()
    for minute in range(0, 24 * 60, 1):  # a full day of minutes (and so of hours)
        line.count("in:twitch", 300)
        line.count("out:twitch", 20)
        line.count("replies", 20)
        line.count(rollups.latency_field(900 + minute % 7 * 300), 20)
        line.count("tokens_in", 36_000)
        await line.flush(TurnLog(redis), now - timedelta(minutes=minute))
    for hour in range(24, 7 * 24):  # and the rest of the week's hours
        line.count("replies", 1200)
        line.count(rollups.latency_field(1500), 1200)
        await line.flush(TurnLog(redis), now - timedelta(hours=hour))
    await memory.redis.ping()
    return time.perf_counter() - started


# What each page must show of the seeded data (a fast empty page would prove nothing).
EXPECT = {
    "conversations": "c9999",
    "one conversation": "line 9 in 1",
    "people: search": "u1234",
    "people: one person": "fact 4 about 1236",
    "live channels": "c9998",
    "insights": "P0",
    "config": "Captain Byte",
    "config: scope preview": "pirate",
    "charts: 24 hours": "latency p95",
    "charts: 7 days": "latency p95",
    "plugins": "QuoteSettings",
    "knowledge": "chunks from",
    "knowledge: search": ".md # ",
    "chat": "Test chat",
}


async def measure(base: str) -> dict[str, list[float]]:
    pages = {
        "overview": "/",
        "conversations": "/conversations",
        "one conversation": f"/conversations/{ConversationKey(platform='discord', channel='c1')}",
        "people: search": "/people?q=person%201234",
        "people: one person": "/people/discord/u1236",
        "live channels": "/live",
        "insights": "/insights",
        "settings": "/settings",
        "logs": "/logs?level=warning",
        "config": "/config",
        "config: scope preview": f"/config?scope=discord:{GUILD}/{CHANNEL}",
        "charts: 24 hours": "/charts?span=24h",
        "charts: 7 days": "/charts?span=7d",
        "plugins": "/plugins",
        "knowledge": "/knowledge",
        "knowledge: search": "/knowledge?q=how+do+I+pause+a+live+channel",
        "chat": "/chat",
    }
    timings: dict[str, list[float]] = {name: [] for name in pages}
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession(headers=headers) as http:
        for _ in range(ROUNDS):
            for name, path in pages.items():
                started = time.perf_counter()
                async with http.get(base + path) as response:
                    body = await response.text()
                    assert response.status == 200, (path, response.status)
                    assert EXPECT.get(name, "") in body, (name, "shows nothing seeded")
                timings[name].append((time.perf_counter() - started) * 1000)
    return timings


async def main() -> list[str]:
    redis = await connect.open_redis(URL)
    try:
        await redis.flushdb()
        now = datetime.now(UTC)
        seeded = await seed(redis, now)
        keys_count = await redis.dbsize()
        # The example file: the config page's form and its scope preview read a real one.
        # ... with the repository's own docs as the deployment's knowledge base, indexed.
        environ = {"CHORUS_KNOWLEDGE_PATHS": str(ROOT / "docs")}
        os.environ.update(environ)  # the pages read the file as a reload would: with these
        settings = load_settings(environ=environ, env_file=None, config=EXAMPLE, warn=False)
        kb = await RecallParts.build(settings, redis).indexer.index(  # type: ignore[union-attr]
            settings.memory.knowledge_sources, force=True
        )
        sys.path.insert(0, str(ROOT / "examples" / "plugins" / "chorus_quotes"))
        plugins = load_plugins(
            settings.plugins,
            sources=[Source("quotes", "chorus_quotes", "bench")],
            file=settings.file,
            variables=settings.variable,
        )
        sources = Sources(
            settings=settings,
            redis=redis,
            memory=MemoryStore(redis),
            history=HistoryStore(redis, max_messages=20, ttl_seconds=3600),
            audit=Audit(redis),
            plugins=plugins,
        )
        server = AdminServer(sources, TOKEN, "127.0.0.1", 0)
        await server.start()
        try:
            timings = await measure(server.url)
        finally:
            await server.aclose()
    finally:
        await redis.flushdb()
        await redis.aclose()
    lines = [
        "## Admin dashboard: pages on a large deployment",
        "",
        f"{CONVERSATIONS:,} conversations ({RECORDS} turn records each), {PEOPLE:,} people "
        f"with memory, {keys_count:,} keys in a real Redis (seeded in {seeded:.1f} s, "
        f"pipelined); the repository's docs as a knowledge base ({kb.chunks} chunks), the "
        f"example quote-book plugin; {ROUNDS} requests per page over loopback HTTP with a Bearer token. "
        f"Budget: {BUDGET_MS:.0f} ms per page.",
        "",
        "| page | p50 ms | p95 ms | within budget |",
        "|---|---:|---:|---|",
    ]
    for name, samples in timings.items():
        p50 = statistics.median(samples)
        p95 = statistics.quantiles(samples, n=20)[-1]
        lines.append(f"| {name} | {p50:.1f} | {p95:.1f} | {'yes' if p95 < BUDGET_MS else 'NO'} |")
    return lines


if __name__ == "__main__":
    from bot.ops import aio

    async def _print() -> None:
        print("\n".join(await main()))

    aio.run(_print())
