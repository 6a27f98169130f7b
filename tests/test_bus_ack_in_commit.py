"""The Redis Streams delivery's ``XACK`` riding in the turn's commit (``Delivery.ack_change``).

On the bus, then through the whole app: an answered message's commit carries the ack of its
inbound entry, the worker sends no ``XACK`` of its own, and the entry is acked once the turn
ends; where the commit did not run its commands, the ack is sent as before. The bus tests run
on the embedded store and a real server; the app needs a real one (the Streams bus refuses the
embedded store).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest
from redis.asyncio import Redis

from bot.app import Chorus
from bot.bus.streams import RedisStreamsBus
from bot.bus.topics import INBOUND, outbound_topic
from bot.events import Author, ChatMessage, ConversationKey, Reply
from bot.llm.scripted import ScriptedProvider
from bot.settings import ConfigError, settings_from
from bot.state.redis_turn import RedisTurnStore
from bot.state.turn import TurnChanges
from tests.redis_cluster import WITH_CLUSTER, store_url
from tests.roundtrips import counting_round_trips
from tests.test_bus_redis import message, pending


@pytest.fixture(params=WITH_CLUSTER)
def redis_url(request: pytest.FixtureRequest, key_tag: str) -> Iterator[str]:
    """The stores, and a Redis Cluster of three primaries (``tests/redis_cluster.py``)."""
    yield from store_url(request, key_tag)


def acks(writes: list[bytes]) -> list[bytes]:
    """The writes that are an ``XACK`` command of their own."""
    return [write for write in writes if write.split(b"\r\n", 3)[2:3] == [b"XACK"]]


async def unacked(redis: Redis, streams_bus: RedisStreamsBus) -> int:
    return sum((await pending(redis, streams_bus, "inbound", "agent")).values())


@pytest.mark.redis
async def test_an_ack_that_rode_in_a_commit_costs_no_round_trip(
    redis_client: Redis, streams_bus: RedisStreamsBus, key_tag: str
) -> None:
    await streams_bus.publish("inbound", message(1))
    delivery = await anext(streams_bus.consume("inbound", ChatMessage, group="agent"))
    assert delivery.ack_change is not None
    await RedisTurnStore(redis_client).write(TurnChanges(ack=delivery.ack_change))
    assert await unacked(redis_client, streams_bus) == 0
    delivery.acked_in_commit()
    with counting_round_trips() as trips:
        await delivery.ack()
    assert acks(trips.writes) == []  # (the consumer's own reads may run meanwhile)
    assert delivery.acked
    await streams_bus.drain(timeout=5)  # the consumer's own count of entries in hand is settled too


@pytest.mark.redis
async def test_an_ack_whose_commit_never_ran_is_sent_on_its_own(
    redis_client: Redis, streams_bus: RedisStreamsBus
) -> None:
    await streams_bus.publish("inbound", message(2))
    delivery = await anext(streams_bus.consume("inbound", ChatMessage, group="agent"))
    assert delivery.ack_change is not None  # offered, but no commit carried it
    assert await unacked(redis_client, streams_bus) == 1
    with counting_round_trips() as trips:
        await delivery.ack()
    assert len(acks(trips.writes)) == 1
    assert await unacked(redis_client, streams_bus) == 0


@pytest.mark.redis
async def test_an_acked_delivery_offers_no_ack_change(
    redis_client: Redis, streams_bus: RedisStreamsBus
) -> None:
    await streams_bus.publish("inbound", message(3))
    delivery = await anext(streams_bus.consume("inbound", ChatMessage, group="agent"))
    await delivery.ack()
    assert delivery.ack_change is None


async def test_the_streams_bus_on_the_embedded_store_is_refused_with_the_fix() -> None:
    settings = settings_from(
        {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "test",
            "CHORUS_REDIS_URL": f"memory://refused-{uuid.uuid4().hex[:8]}",
            "CHORUS_BUS": "redis",
        }
    )
    with pytest.raises(ConfigError, match=r"CHORUS_BUS=redis needs a Redis server") as caught:
        await Chorus.from_settings(settings, provider=ScriptedProvider(responder=lambda _: "ok"))
    assert "CHORUS_REDIS_URL=redis://" in str(caught.value)
    assert "CHORUS_BUS=memory" in str(caught.value)


@pytest.mark.redis
async def test_an_answered_message_is_acked_inside_its_commit(real_redis_url: str) -> None:
    namespace = f"ack{uuid.uuid4().hex[:8]}"
    settings = settings_from(
        {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "test",
            "CHORUS_REDIS_URL": real_redis_url,
            "CHORUS_BUS": "redis",
            "CHORUS_BUS_NAMESPACE": namespace,
        }
    )
    app = await Chorus.from_settings(settings, provider=ScriptedProvider(responder=lambda _: "ok"))
    replies: asyncio.Queue[Reply] = asyncio.Queue()

    async def collect() -> None:
        async for delivery in app.bus.consume(outbound_topic("bench"), Reply, group="outbound"):
            await replies.put(delivery.event)
            await delivery.ack()

    collector = asyncio.create_task(collect())
    await app.start()
    try:
        for n in range(3):
            inbound = ChatMessage(
                platform="bench",
                id=f"{namespace}-{n}",
                conversation=ConversationKey(platform="bench", channel=namespace),
                author=Author(id=f"u-{namespace}", display_name="Ada"),
                text=f"hello {n}",
                mentions_bot=True,
            )
            with counting_round_trips() as trips:
                await app.bus.publish(INBOUND, inbound)
                reply = await asyncio.wait_for(replies.get(), 30)
                await app.bus.drain(timeout=30)  # every entry acked, the turn's tail ended
            assert reply.reply_to_id == inbound.id and reply.text == "ok"
            inbound_stream = app.bus.stream(INBOUND, app.bus.partition_of(inbound)).encode()  # type: ignore[attr-defined]
            commits = [w for w in trips.writes if b"EVAL" in w and b"XACK" in w]
            assert len(commits) == 1 and inbound_stream in commits[0]
            assert b"XADD" in commits[0]  # the reply in the same commit
            assert all(inbound_stream not in w for w in acks(trips.writes)), "no XACK of its own"
    finally:
        await app.aclose()
        collector.cancel()
        await asyncio.gather(collector, return_exceptions=True)
