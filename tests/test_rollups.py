"""The timeline's rollups (bot/state/rollups.py) under a controlled clock: what the router's
counts become on the 24-hour and 7-day charts, the latency histogram's percentiles, the TTLs of
the hour buckets, and the Charts page drawing both spans from them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from bot.admin import charts_page
from bot.admin.server import AdminServer
from bot.admin.views import Sources
from bot.memory.buffers import MemoryStore
from bot.safety.audit import Audit
from bot.settings import Settings
from bot.state import keys, rollups, turnlog
from bot.state.history import HistoryStore

pytestmark = pytest.mark.redis
TOKEN = "admin-token-0123456789abcdef"
# A week of its own far in the past, so no other test's counts share its buckets.
NOW = datetime(2003, 5, 17, 12, 7, 30, tzinfo=UTC)


async def clear(redis: Redis) -> None:
    names = [turnlog.minute_bucket(NOW - timedelta(minutes=m)) for m in range(24 * 60 + 2)]
    names += [turnlog.hour_bucket(NOW - timedelta(hours=h)) for h in range(24 * 8)]
    names += [turnlog.day_bucket(NOW - timedelta(days=d)) for d in range(9)]
    await redis.delete(*(keys.timeline(n) for n in names))


async def answer(redis: Redis, at: datetime, latency_ms: int, *, errors: int = 0) -> None:
    """What the router's observer counts for one answer (bot/router/observe.py), flushed at
    ``at`` (the controlled clock)."""
    line = turnlog.Timeline()
    line.count("replies")
    line.count(rollups.latency_field(latency_ms))
    line.count("tokens_in", 1000)
    line.count("tokens_out", 100)
    line.count("cache_read", 800)
    line.cost(0.002)
    if errors:
        line.count("errors", errors)
    await line.flush(turnlog.TurnLog(redis), at)


def test_latency_fields_and_percentiles() -> None:
    assert rollups.latency_field(0) == "lat:100"
    assert rollups.latency_field(100) == "lat:100"
    assert rollups.latency_field(101) == "lat:200"
    assert rollups.latency_field(10**6) == rollups.OVER
    histogram = {"lat:100": 50, "lat:1000": 45, "lat:5000": 4, "lat:over": 1}
    assert rollups.percentile(histogram, 0.5) == 100
    assert rollups.percentile(histogram, 0.95) == 1000
    assert rollups.percentile(histogram, 0.99) == 5000
    assert rollups.percentile(histogram, 1.0) == rollups.LATENCY_BOUNDS_MS[-1]
    assert rollups.percentile({}, 0.5) is None


async def test_the_24_hour_rollup_reads_the_hours_of_the_last_day(
    redis_client: Redis,
) -> None:
    await clear(redis_client)
    try:
        for _ in range(3):
            await answer(redis_client, NOW, 250)  # this hour: the last point
        await answer(redis_client, NOW - timedelta(minutes=7), 4000, errors=2)  # 12:00: the same
        await answer(redis_client, NOW - timedelta(minutes=8), 900)  # 11:59: the point before
        await answer(redis_client, NOW - timedelta(hours=23), 90)  # the first point
        await answer(redis_client, NOW - timedelta(hours=24), 90)  # too old
        day = await rollups.last_24_hours(redis_client, NOW)
        assert len(day.points) == rollups.POINTS_24H == 24
        assert day.points[-1].at == datetime(2003, 5, 17, 12, tzinfo=UTC)
        assert day.points[0].at == datetime(2003, 5, 16, 13, tzinfo=UTC)
        answers = day.series("answers")
        assert answers[-1] == 4 and answers[-2] == 1 and answers[0] == 1
        assert sum(answers) == 6  # the answer 24 hours old is outside
        assert day.series("errors")[-1] == 2
        assert day.series("p50")[-1] == 300 and day.series("p99")[-1] == 4000
        assert day.series("p50")[-2] == 1000 and day.series("p50")[1] == 0
        assert day.series("tokens")[-1] == 4 * 1100
        assert day.series("cost")[-1] == pytest.approx(0.008)
        assert day.series("cache_share")[-1] == pytest.approx(0.8)
        total = day.total
        assert total.answers == 6 and total.errors == 2 and total.latency(0.5) == 300
        minute = await redis_client.hgetall(keys.timeline(turnlog.minute_bucket(NOW)))
        assert int(minute["replies"]) == 3  # the minutes keep the same counts (the Overview's)
    finally:
        await clear(redis_client)


async def test_the_7_day_rollup_reads_the_hour_buckets_with_their_ttl(
    redis_client: Redis,
) -> None:
    await clear(redis_client)
    try:
        await answer(redis_client, NOW, 250)
        await answer(redis_client, NOW - timedelta(minutes=7), 250)  # the same hour
        await answer(redis_client, NOW - timedelta(days=3), 2500)
        await answer(redis_client, NOW - timedelta(days=6, hours=23), 2500)  # the first hour
        await answer(redis_client, NOW - timedelta(days=7, hours=1), 2500)  # too old
        week = await rollups.last_7_days(redis_client, NOW)
        assert len(week.points) == rollups.POINTS_7D
        assert week.points[-1].at == datetime(2003, 5, 17, 12, tzinfo=UTC)
        answers = week.series("answers")
        assert answers[-1] == 2 and answers[-1 - 72] == 1 and answers[0] == 1
        assert sum(answers) == 4
        assert week.series("p95")[-1] == 300 and week.series("p95")[-73] == 3000
        hour = keys.timeline(turnlog.hour_bucket(NOW))
        ttl = await redis_client.ttl(hour)
        assert turnlog.HOUR_SECONDS - 60 < ttl <= turnlog.HOUR_SECONDS
        assert turnlog.HOUR_SECONDS > 7 * 24 * 3600  # outlives the week it is charted in
    finally:
        await clear(redis_client)


async def test_the_charts_page_draws_both_spans_from_the_rollups(
    redis_client: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    await clear(redis_client)
    try:
        await answer(redis_client, NOW - timedelta(minutes=3), 1200, errors=1)
        await answer(redis_client, NOW - timedelta(days=2), 700)
        sources = Sources(
            settings=Settings(),
            redis=redis_client,
            memory=MemoryStore(redis_client),
            history=HistoryStore(redis_client, max_messages=20, ttl_seconds=3600),
            audit=Audit(redis_client),
        )

        class Clock(datetime):
            @classmethod
            def now(cls, tz: object = None) -> datetime:  # type: ignore[override]
                return NOW

        monkeypatch.setattr("bot.admin.server.datetime", Clock)
        server = AdminServer(sources, TOKEN)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with TestClient(TestServer(server.app())) as http:
            day = await (await http.get("/charts", headers=headers)).text()
            week = await (await http.get("/charts?span=7d", headers=headers)).text()
            bogus = await http.get("/charts?span=1y", headers=headers)
            fallback = await bogus.text()
        assert 'id="total-answers">1<' in day and 'id="total-errors">1<' in day
        assert 'id="total-p95">1500 ms<' in day and "Last 24 hours" in day
        assert "latency p95 (peak 1500 ms)" in day
        assert 'id="total-answers">2<' in week and "Last 7 days" in week
        assert "one point per 60 minutes" in week
        assert bogus.status == 200 and "Last 24 hours" in fallback
        assert day.count("<svg") == len(charts_page.SERIES)
    finally:
        await clear(redis_client)
