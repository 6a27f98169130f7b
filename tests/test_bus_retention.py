"""The Redis Streams bus keeps an entry for CHORUS_BUS_RETENTION at most: the sweep trims every
stream of the namespace (dead letters and idle streams included) exactly at the window, keeps
younger entries even when they are pending, and an older pending entry is reported lost by the
consumer that reclaims it. The clock is controlled through the entry ids the tests choose and
``sweep(now_ms=...)``; no sleeps. Runs on the embedded store and a real Redis."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime

import pytest
from redis.asyncio import Redis

from bot.bus.base import InProcessBus
from bot.bus.retention import StreamRetention
from bot.bus.streams import FIELD, RedisStreamsBus
from bot.bus.topics import DEAD_LETTERS, INBOUND, outbound_topic
from bot.events import Author, ChatMessage, ConversationKey
from bot.settings import ConfigError, settings_from
from bot.state import keys
from tests.redis_cluster import WITH_CLUSTER, store_url


@pytest.fixture(params=WITH_CLUSTER)
def redis_url(request: pytest.FixtureRequest, key_tag: str) -> Iterator[str]:
    """The stores, and a Redis Cluster of three primaries (``tests/redis_cluster.py``)."""
    yield from store_url(request, key_tag)


HOUR_MS = 3600 * 1000
T = 10 * HOUR_MS  # "now" in the tests that pass it; entry ids are milliseconds before it


def message(n: int) -> ChatMessage:
    return ChatMessage(
        platform="discord",
        id=f"m{n}",
        conversation=ConversationKey(platform="discord", channel="c1"),
        author=Author(id="u1"),
        text=f"hello {n}",
        sent_at=datetime(2025, 1, 2, tzinfo=UTC),
    )


@pytest.fixture
async def bus(redis_client: Redis, key_tag: str) -> AsyncIterator[RedisStreamsBus]:
    made = RedisStreamsBus(
        redis_client, consumer="w1", namespace=key_tag, partitions=2, block_ms=50, lease_ms=600
    )
    yield made
    await made.close()


async def add(redis: Redis, stream: str, ms: int, n: int = 0) -> str:
    """An entry with the id ``ms-0``: as if published at that moment."""
    return str(await redis.xadd(stream, {FIELD: message(n).model_dump_json()}, id=f"{ms}-0"))


async def ids(redis: Redis, stream: str) -> list[str]:
    return [str(entry_id) for entry_id, _ in await redis.xrange(stream) or []]


@pytest.mark.redis
async def test_entries_older_than_the_window_go_younger_ones_stay(
    redis_client: Redis, key_tag: str, bus: RedisStreamsBus
) -> None:
    inbound, dead = bus.stream(INBOUND, 0), bus.stream(DEAD_LETTERS, 1)
    quiet = bus.stream(outbound_topic("youtube"), 1)  # nobody writes here any more
    for stream in (inbound, dead, quiet):
        for ms in (T - 3 * HOUR_MS, T - HOUR_MS - 1, T - HOUR_MS, T - 1):
            await add(redis_client, stream, ms)
    other = keys.bus_stream(INBOUND, 0, f"{key_tag}other")  # another deployment's namespace
    await add(redis_client, other, 1)
    retention = StreamRetention(redis_client, namespace=key_tag, retention_seconds=3600)

    assert await retention.sweep(now_ms=T) == 6
    for stream in (inbound, dead, quiet):
        assert await ids(redis_client, stream) == [f"{T - HOUR_MS}-0", f"{T - 1}-0"]
    assert await ids(redis_client, other) == ["1-0"]
    assert await retention.sweep(now_ms=T) == 0  # idempotent


@pytest.mark.redis
async def test_the_default_clock_is_redis_time(
    redis_client: Redis, key_tag: str, bus: RedisStreamsBus
) -> None:
    """Entry ids are Redis's milliseconds, so the cutoff is too: a fresh entry stays, one
    published (by id) two windows ago goes."""
    stream = bus.stream(INBOUND, 0)
    seconds, _ = await redis_client.time()
    old = await add(redis_client, stream, (int(seconds) - 7200) * 1000, 1)
    fresh = (await bus.publish(INBOUND, message(2))).partition(":")[2]
    retention = StreamRetention(redis_client, namespace=key_tag, retention_seconds=3600)
    assert await retention.sweep() >= 1
    remaining = await ids(redis_client, stream)
    assert old not in remaining and fresh in remaining


@pytest.mark.redis
async def test_a_pending_entry_stays_inside_the_window_and_is_reported_lost_after(
    redis_client: Redis, key_tag: str, bus: RedisStreamsBus, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker read two entries and died before acking them. The sweep leaves the young one
    (pending or not, it is inside the window) and trims the old one; the worker that takes the
    partition over gets the young one again and logs the old one as lost, acking it."""
    partition = bus.partition_of(message(0))
    stream = bus.stream(INBOUND, partition)
    seconds, _ = await redis_client.time()
    now = int(seconds) * 1000
    await add(redis_client, stream, now - 2 * HOUR_MS, 1)
    await add(redis_client, stream, now - 60_000, 2)
    await redis_client.xgroup_create(stream, "agent", id="0")
    await redis_client.xreadgroup("agent", "dead", {stream: ">"}, count=2)  # never acked
    assert (await redis_client.xpending(stream, "agent"))["pending"] == 2

    retention = StreamRetention(redis_client, namespace=key_tag, retention_seconds=3600)
    assert await retention.sweep(now_ms=now) == 1
    assert await ids(redis_client, stream) == [f"{now - 60_000}-0"]
    assert (await redis_client.xpending(stream, "agent"))["pending"] == 2  # the PEL keeps both

    caplog.set_level(logging.ERROR, logger="chorus.bus")
    again = await asyncio.wait_for(anext(bus.consume(INBOUND, ChatMessage, group="agent")), 30)
    assert again.event.id == "m2" and again.attempt == 2
    await again.ack()
    assert (await redis_client.xpending(stream, "agent"))["pending"] == 0
    assert any("trimmed before it was handled" in r.getMessage() for r in caplog.records)


@pytest.mark.redis
async def test_one_process_per_interval_sweeps(
    redis_client: Redis, key_tag: str, bus: RedisStreamsBus
) -> None:
    first = StreamRetention(redis_client, namespace=key_tag, retention_seconds=3600)
    second = StreamRetention(redis_client, namespace=key_tag, retention_seconds=3600)
    assert first.interval == 300.0  # a tenth of the window, at most five minutes
    assert await first.sweep_if_due() == 0
    assert await second.sweep_if_due() is None  # the lease is taken for one interval
    ttl = await redis_client.pttl(keys.bus_retention(key_tag))
    assert 0 < ttl <= 300_000


@pytest.mark.redis
async def test_the_background_sweep_trims_without_being_asked(
    redis_client: Redis, key_tag: str, bus: RedisStreamsBus
) -> None:
    stream = bus.stream(DEAD_LETTERS, 0)
    await add(redis_client, stream, 1)
    retention = StreamRetention(redis_client, namespace=key_tag, retention_seconds=600)
    retention.start()
    try:
        for _ in range(1500):  # 30 s at most; the first sweep runs at once
            if not await redis_client.xlen(stream):
                break
            await asyncio.sleep(0.02)
    finally:
        await retention.aclose()
    assert await redis_client.xlen(stream) == 0
    assert retention.interval == 60.0


async def test_only_the_streams_bus_keeps_anything(redis_client: Redis) -> None:
    assert StreamRetention.for_bus(InProcessBus(), redis_client, 3600) is None
    streams = RedisStreamsBus(redis_client, consumer="w", namespace="retention_for_bus")
    made = StreamRetention.for_bus(streams, redis_client, 7200)
    assert made is not None and made.retention_ms == 7_200_000 and made.interval == 300.0


def test_the_window_has_a_floor_and_a_day_by_default() -> None:
    assert settings_from({}).state.bus_retention_seconds == 24 * 3600
    assert settings_from({"CHORUS_BUS_RETENTION": "600"}).state.bus_retention_seconds == 600
    with pytest.raises(ConfigError, match="CHORUS_BUS_RETENTION"):
        settings_from({"CHORUS_BUS_RETENTION": "599"})
