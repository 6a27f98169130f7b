"""What only the Redis Streams bus does: consumer groups and XACK after the side effect,
XAUTOCLAIM of a dead consumer's entries, MAXLEN trimming, conversation order across two
workers, the transactional ``queue_publish``, and riding over a Redis restart. Runs on the
embedded store and a real server (``redis_url``); the restart test needs ``redis-server``."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import pytest
from redis.asyncio import Redis

from bot.bus.streams import FIELD, RedisStreamsBus
from bot.events import Author, ChatMessage, ConversationKey
from bot.state import connect, keys
from bot.state.claims import Claims
from bot.state.redis_turn import RedisTurnStore
from bot.state.turn import Record, TurnChanges
from tests.redis_cluster import WITH_CLUSTER, store_url
from tests.redis_server import free_port, start_redis, stop_redis


@pytest.fixture(params=WITH_CLUSTER)
def redis_url(request: pytest.FixtureRequest, key_tag: str) -> Iterator[str]:
    """The stores, and a Redis Cluster of three primaries (``tests/redis_cluster.py``)."""
    yield from store_url(request, key_tag)


T0 = datetime(2025, 1, 2, tzinfo=UTC)


def message(n: int, channel: str = "c1") -> ChatMessage:
    return ChatMessage(
        platform="discord",
        id=f"m{n}",
        conversation=ConversationKey(platform="discord", channel=channel),
        author=Author(id="u1"),
        text=f"hello {n}",
        sent_at=T0,
    )


@pytest.fixture
async def buses(redis_client: Redis, key_tag: str) -> AsyncIterator[list[RedisStreamsBus]]:
    made: list[RedisStreamsBus] = []
    yield made
    for bus in made:
        await bus.close()


def make(
    redis: Redis, tag: str, made: list[RedisStreamsBus], name: str, **options: int
) -> RedisStreamsBus:
    settings = {"partitions": 4, "block_ms": 50, "lease_ms": 600, **options}
    bus = RedisStreamsBus(redis, consumer=name, namespace=tag, **settings)  # type: ignore[arg-type]
    made.append(bus)
    return bus


async def pending(redis: Redis, bus: RedisStreamsBus, topic: str, group: str) -> dict[str, int]:
    by_consumer: dict[str, int] = defaultdict(int)
    for p in range(bus.partitions):
        summary = await redis.xpending(bus.stream(topic, p), group)
        for consumer in summary.get("consumers") or []:
            by_consumer[consumer["name"]] += int(consumer["pending"])
    return dict(by_consumer)


@pytest.mark.redis
async def test_an_entry_stays_pending_until_acked(
    redis_client: Redis, key_tag: str, buses: list[RedisStreamsBus]
) -> None:
    bus = make(redis_client, key_tag, buses, "w1")
    await bus.publish("inbound", message(1))
    delivery = await anext(bus.consume("inbound", ChatMessage, group="agent"))
    assert await pending(redis_client, bus, "inbound", "agent") == {"w1": 1}
    await delivery.ack()
    assert sum((await pending(redis_client, bus, "inbound", "agent")).values()) == 0


@pytest.mark.redis
async def test_each_group_gets_every_event(
    redis_client: Redis, key_tag: str, buses: list[RedisStreamsBus]
) -> None:
    bus = make(redis_client, key_tag, buses, "w1")
    await bus.publish("turns", message(1))
    agent = await anext(bus.consume("turns", ChatMessage, group="agent"))
    audit = await anext(bus.consume("turns", ChatMessage, group="audit"))
    assert agent.event == audit.event == message(1)
    await agent.ack()
    with pytest.raises(TimeoutError, match="turns=1"):
        await bus.drain(timeout=0.2)  # the audit group has not acked yet
    await audit.ack()
    await bus.drain(timeout=5)


@pytest.mark.redis
async def test_a_dead_consumers_pending_entries_are_reclaimed_in_order(
    redis_client: Redis, key_tag: str, buses: list[RedisStreamsBus]
) -> None:
    bus = make(redis_client, key_tag, buses, "w2")
    sent = [await bus.publish("inbound", message(n)) for n in range(3)]
    partition = int(sent[0].split(":")[0])
    stream = bus.stream("inbound", partition)
    await redis_client.xgroup_create(stream, "agent", id="0", mkstream=True)
    # A worker read two entries and died without acking them (and without a lease).
    await redis_client.xreadgroup("agent", "dead", {stream: ">"}, count=2)
    deliveries = bus.consume("inbound", ChatMessage, group="agent")
    got = [await anext(deliveries) for _ in range(3)]
    assert [d.id for d in got] == sent
    assert [d.attempt for d in got] == [2, 2, 1]  # the reclaimed ones were delivered before
    for delivery in got:
        await delivery.ack()
    assert sum((await pending(redis_client, bus, "inbound", "agent")).values()) == 0


@pytest.mark.redis
async def test_stale_entries_of_a_zombie_are_reclaimed_after_the_idle_time(
    redis_client: Redis, key_tag: str, buses: list[RedisStreamsBus]
) -> None:
    bus = make(redis_client, key_tag, buses, "w1", claim_idle_ms=200)
    first = await bus.publish("inbound", message(1))
    deliveries = bus.consume("inbound", ChatMessage, group="agent")
    assert (await anext(deliveries)).id == first  # w1 now holds the partitions
    # A consumer that lost its lease but still runs grabs an entry of w1's partition.
    zombie_id = await bus.publish("inbound", message(2))
    stream = bus.stream("inbound", int(zombie_id.split(":")[0]))
    await redis_client.xreadgroup("agent", "zombie", {stream: ">"}, count=1)
    reclaimed = await asyncio.wait_for(anext(deliveries), 10)
    assert (reclaimed.id, reclaimed.attempt) == (zombie_id, 2)
    assert (await pending(redis_client, bus, "inbound", "agent")).get("zombie", 0) == 0


@pytest.mark.redis
async def test_streams_are_trimmed_to_about_maxlen(
    redis_client: Redis, key_tag: str, buses: list[RedisStreamsBus]
) -> None:
    bus = make(redis_client, key_tag, buses, "w1", maxlen=10, partitions=1)
    for n in range(600):
        await bus.publish("turns", message(n))
    length = await redis_client.xlen(bus.stream("turns", 0))
    assert 10 <= length < 300  # "~" trims whole macro nodes, never below maxlen


@pytest.mark.redis
async def test_two_workers_keep_each_conversation_in_order(
    redis_client: Redis, key_tag: str, buses: list[RedisStreamsBus]
) -> None:
    """Twenty messages of one conversation (and of two others), two workers, one of them
    joining midway: each conversation is handled in publish order, each message once."""
    handled: list[tuple[str, str, str]] = []
    total = 60
    everything = asyncio.Event()

    async def worker(bus: RedisStreamsBus) -> None:
        async for delivery in bus.consume("inbound", ChatMessage, group="agent"):
            await asyncio.sleep(0)  # let the other worker run in between
            handled.append((bus.consumer, delivery.event.conversation.channel, delivery.event.id))
            await delivery.ack()
            if len(handled) >= total:
                everything.set()

    publisher = make(redis_client, key_tag, buses, "pub")
    first = make(redis_client, key_tag, buses, "w1")
    second = make(redis_client, key_tag, buses, "w2")
    tasks = [asyncio.create_task(worker(first))]
    sent: dict[str, list[str]] = defaultdict(list)
    for n in range(20):
        for channel in ("one", "two", "three"):
            event = message(n, channel).model_copy(update={"id": f"{channel}-{n}"})
            sent[channel].append(event.id)
            await publisher.publish("inbound", event)
        if n == 5:
            tasks.append(asyncio.create_task(worker(second)))
    await asyncio.wait_for(everything.wait(), 20)
    await publisher.drain(timeout=10)
    for channel, ids in sent.items():
        assert [i for _, c, i in handled if c == channel] == ids
    assert len(handled) == total
    for bus in (first, second):
        await bus.close()
    await asyncio.gather(*tasks)


@pytest.mark.redis
async def test_a_published_change_goes_out_with_its_commit_or_not_at_all(
    redis_client: Redis, key_tag: str, buses: list[RedisStreamsBus]
) -> None:
    """``publish_change`` is a reply that rides a turn's guarded commit: a claim another worker
    holds writes nothing; one still ours writes the entry with the rest."""
    bus = make(redis_client, key_tag, buses, "w1", partitions=1)
    store = RedisTurnStore(redis_client)
    claims = Claims(store, worker_id="w1")
    lost = claims.new("discord", f"m1-{key_tag}")
    await redis_client.set(lost.key, "claimed:another-worker:1")  # taken over
    change = TurnChanges(reply=bus.publish_change("outbound:discord", message(1)))
    assert not await store.if_holds(lost.key, lost.token, Record(change, 60))
    assert await redis_client.xlen(bus.stream("outbound:discord", 0)) == 0

    ours = claims.new("discord", f"m2-{key_tag}")
    assert await store.take(ours.key, ours.token, 10_000) is None
    change = TurnChanges(reply=bus.publish_change("outbound:discord", message(2)))
    assert await store.if_holds(ours.key, ours.token, Record(change, 60))
    [(_, fields)] = cast(
        "list[tuple[str, dict[str, str]]]",
        await redis_client.xrange(bus.stream("outbound:discord", 0)),
    )
    assert ChatMessage.model_validate_json(fields[FIELD]) == message(2)
    delivery = await anext(bus.consume("outbound:discord", ChatMessage))
    await delivery.ack()
    await bus.drain(timeout=5)  # a published change is tracked by drain too


@pytest.mark.redis
async def test_a_cancelled_consumer_stops_while_the_bus_stays_open(
    redis_client: Redis, key_tag: str, buses: list[RedisStreamsBus]
) -> None:
    """Cancelling the task that iterates ``consume`` ends it at any moment of the blocking
    read cycle (on Python 3.11 a cancel that races redis-py's read timeout can be swallowed:
    before the fix about 1 in 100 of these hung for good), and its partitions go back."""
    bus = make(redis_client, key_tag, buses, "w1", block_ms=20, lease_ms=200)
    for n in range(40):

        async def consume() -> None:
            async for delivery in bus.consume("inbound", ChatMessage, group="agent"):
                await delivery.ack()

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.005 + (n % 9) * 0.0031)  # spread over the 20 ms read cycle
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=10)
        assert done, f"cancelled consumer {n} did not stop"
    held = await redis_client.mget(
        [keys.bus_lease("inbound", "agent", p, key_tag) for p in range(bus.partitions)]
    )
    assert held == [None] * bus.partitions


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="consumer"):
        RedisStreamsBus(None, consumer="")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="twice block_ms"):
        RedisStreamsBus(None, consumer="w", block_ms=1000, lease_ms=1500)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="namespace"):
        RedisStreamsBus(None, consumer="w", namespace="Bad:ns")  # type: ignore[arg-type]


# -- outage --------------------------------------------------------------------------------------
# An fsync-always AOF: what the bus queued survives the restart.
AOF = ("--appendonly", "yes", "--appendfsync", "always")


@pytest.fixture
def redis_binary() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true requires redis-server for the outage test", pytrace=False)
        pytest.skip("redis-server is not installed: cannot restart a private Redis")
    return binary


@pytest.mark.e2e
async def test_consume_and_publish_ride_over_a_redis_restart(
    redis_binary: str, tmp_path: Path
) -> None:
    port = free_port()
    server = start_redis(redis_binary, port, tmp_path, *AOF)
    client = await connect.open_redis(f"redis://127.0.0.1:{port}/0")
    bus = RedisStreamsBus(
        client, consumer="w1", partitions=2, block_ms=50, lease_ms=600, backoff_cap=0.3
    )
    received: asyncio.Queue[str] = asyncio.Queue()

    async def consumer() -> None:
        async for delivery in bus.consume("inbound", ChatMessage, group="agent"):
            await received.put(delivery.event.id)
            await delivery.ack()

    task = asyncio.create_task(consumer())
    try:
        await bus.publish("inbound", message(1))
        assert await asyncio.wait_for(received.get(), 10) == "m1"
        await asyncio.to_thread(stop_redis, server)
        publishing = asyncio.create_task(bus.publish("inbound", message(2)))
        await asyncio.wait({publishing}, timeout=0.5)
        assert not publishing.done(), "publish waits for Redis to come back"
        assert not task.done(), "the consumer survives the outage"
        server = await asyncio.to_thread(start_redis, redis_binary, port, tmp_path, *AOF)
        await asyncio.wait_for(publishing, 20)
        assert await asyncio.wait_for(received.get(), 20) == "m2"
        await bus.drain(timeout=10)
    finally:
        await bus.close()
        await asyncio.wait_for(task, 10)
        await client.aclose()
        await asyncio.to_thread(stop_redis, server)
