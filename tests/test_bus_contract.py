"""One contract suite for every ``EventBus``: the in-process bus, and the Redis Streams bus on
the embedded store and on a real Redis server. What an adapter, the router or a worker may rely
on holds for all of them: a JSON round trip, order within a conversation, acks and drain,
competing consumers, bad payloads dropped with their id, close. Waiting is on tasks and the
bus's own drain, never on the clock."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
from pydantic import BaseModel

from bot.bus.base import BusClosed, Delivery, EventBus, InProcessBus
from bot.bus.streams import RedisStreamsBus
from bot.events import Author, ChatMessage, ConversationKey, Reply
from bot.state import connect, keys

T0 = datetime(2025, 1, 2, tzinfo=UTC)


def conv(name: str = "c1") -> ConversationKey:
    return ConversationKey(platform="discord", channel=name, thread="t:1")


def message(n: int, channel: str = "c1") -> ChatMessage:
    return ChatMessage(
        platform="discord",
        id=f"m{n}",
        conversation=conv(channel),
        author=Author(id="u1", display_name="Ada"),
        text=f"hello {n}",
        sent_at=T0,
    )


def _delete_tagged(url: str, tag: str) -> None:
    client = redis.Redis.from_url(url)
    try:
        doomed = list(client.scan_iter(match=f"*{tag}*", count=1000))
        if doomed:
            client.delete(*doomed)
    finally:
        client.close()


@pytest.fixture
def bus_url(request: pytest.FixtureRequest, key_tag: str) -> Iterator[str | None]:
    kind = request.param
    if kind == "inprocess":
        yield None
    elif kind == "memory":
        yield f"memory://test-{key_tag}"
    elif kind == "cluster":  # three primaries; the keys in the cluster layout meanwhile
        yield request.getfixturevalue("redis_cluster_url")
        keys.use_cluster_layout(False)
    else:
        url: str = request.getfixturevalue("real_redis_url")
        yield url
        _delete_tagged(url, key_tag)


@pytest.fixture
async def bus(bus_url: str | None, key_tag: str) -> AsyncIterator[EventBus]:
    if bus_url is None:
        in_process = InProcessBus()
        yield in_process
        await in_process.close()
        return
    client = await connect.open_redis(bus_url)
    streams = RedisStreamsBus(
        client, consumer="w0", namespace=key_tag, partitions=4, block_ms=50, lease_ms=600
    )
    try:
        yield streams
    finally:
        await streams.close()
        await client.aclose()


pytestmark = pytest.mark.parametrize(
    "bus_url",
    [
        pytest.param("inprocess", id="inprocess"),
        pytest.param("memory", id="streams-memory", marks=pytest.mark.redis),
        pytest.param("real", id="streams-real", marks=pytest.mark.redis),
        pytest.param("cluster", id="streams-cluster", marks=[pytest.mark.redis, pytest.mark.e2e]),
    ],
    indirect=True,
)


async def test_publish_consume_round_trip(bus: EventBus) -> None:
    sent = message(1)
    delivery_id = await bus.publish("inbound", sent)
    delivery = await anext(bus.consume("inbound", ChatMessage, group="agent", consumer="w1"))
    assert delivery.event == sent
    assert delivery.event is not sent  # it crossed a JSON boundary
    assert (delivery.id, delivery.topic, delivery.attempt) == (delivery_id, "inbound", 1)
    await delivery.ack()
    await bus.drain(timeout=5)


async def test_events_of_a_conversation_arrive_in_order(bus: EventBus) -> None:
    ids = [await bus.publish("inbound", message(n)) for n in range(5)]
    consumer = bus.consume("inbound", ChatMessage, group="agent")
    got = [await anext(consumer) for _ in range(5)]
    assert [d.id for d in got] == ids
    assert [d.event.text for d in got] == [f"hello {n}" for n in range(5)]


async def test_topics_are_independent(bus: EventBus) -> None:
    await bus.publish("outbound:slack", Reply(conversation=conv(), text="to slack"))
    await bus.publish("outbound:discord", Reply(conversation=conv(), text="to discord"))
    delivery = await anext(bus.consume("outbound:discord", Reply))
    assert delivery.event.text == "to discord"


async def test_drain_waits_for_the_ack(bus: EventBus) -> None:
    await bus.publish("inbound", message(1))
    delivery = await anext(bus.consume("inbound", ChatMessage))
    with pytest.raises(TimeoutError, match="inbound=1"):
        await bus.drain(timeout=0.2)  # delivered is not done
    await delivery.ack()
    await bus.drain(timeout=5)


async def test_drain_waits_for_a_chain_of_work(bus: EventBus) -> None:
    """A handler that publishes its follow-up before acking keeps drain waiting for both."""
    sent: list[Reply] = []

    async def agent() -> None:
        async for delivery in bus.consume("inbound", ChatMessage, group="agent"):
            await bus.publish("outbound:discord", Reply(conversation=conv(), text="hi"))
            await delivery.ack()

    async def adapter() -> None:
        async for delivery in bus.consume("outbound:discord", Reply, group="discord"):
            sent.append(delivery.event)
            await delivery.ack()

    workers = [asyncio.create_task(agent()), asyncio.create_task(adapter())]
    await bus.publish("inbound", message(1))
    await bus.drain(timeout=10)
    assert [r.text for r in sent] == ["hi"]
    await bus.close()
    await asyncio.wait_for(asyncio.gather(*workers), 5)


async def test_drain_times_out_naming_the_topics_with_unacked_events(bus: EventBus) -> None:
    await bus.publish("inbound", message(1))
    await bus.publish("turns", message(2))
    await bus.publish("turns", message(3))
    delivery = await anext(bus.consume("inbound", ChatMessage))
    await delivery.ack()
    await delivery.ack()  # a second ack must not count for another event
    with pytest.raises(TimeoutError, match=r"not yet acked: turns=2$"):
        await bus.drain(timeout=0.2)


async def test_competing_consumers_of_a_group_share_the_events(bus: EventBus) -> None:
    """Each event goes to exactly one consumer of the group, whichever that is."""
    sent = [message(n, channel=f"c{n % 7}") for n in range(30)]
    for event in sent:
        await bus.publish("inbound", event)
    got: list[tuple[str, str]] = []
    everything = asyncio.Event()

    async def worker(name: str) -> None:
        async for delivery in bus.consume("inbound", ChatMessage, group="agent", consumer=name):
            got.append((name, delivery.event.id))
            await delivery.ack()
            if len(got) == len(sent):
                everything.set()

    workers = [asyncio.create_task(worker("w1")), asyncio.create_task(worker("w2"))]
    await asyncio.wait_for(everything.wait(), 10)
    await bus.drain(timeout=5)
    assert sorted(event_id for _, event_id in got) == sorted(e.id for e in sent)
    await bus.close()
    await asyncio.wait_for(asyncio.gather(*workers), 5)


async def test_invalid_payload_is_logged_and_dropped(
    bus: EventBus, caplog: pytest.LogCaptureFixture
) -> None:
    bad_id = await bus.publish("inbound", Reply(conversation=conv(), text="not a chat message"))
    await bus.publish("inbound", message(2))
    with caplog.at_level(logging.WARNING, logger="chorus.bus"):
        delivery = await anext(bus.consume("inbound", ChatMessage))
    assert delivery.event.id == "m2"
    [record] = [r for r in caplog.records if r.name == "chorus.bus"]
    assert record.event_id == bad_id  # type: ignore[attr-defined]
    assert record.topic == "inbound"  # type: ignore[attr-defined]
    assert record.exc_info
    await delivery.ack()
    await bus.drain(timeout=5)  # the dropped event does not hold the drain


class Opaque(BaseModel):
    value: Any


async def test_an_event_that_cannot_be_serialised_is_refused_at_publish(bus: EventBus) -> None:
    with pytest.raises(Exception, match="serialize"):
        await bus.publish("turns", Opaque(value=object()))
    await bus.drain(timeout=5)  # nothing was counted as outstanding


async def test_close_ends_consumers_and_refuses_publish(bus: EventBus) -> None:
    received: list[str] = []

    async def consumer() -> None:
        async for delivery in bus.consume("inbound", ChatMessage):
            received.append(delivery.event.id)
            await delivery.ack()

    task = asyncio.create_task(consumer())
    await bus.publish("inbound", message(1))
    await bus.drain(timeout=5)
    await bus.close()
    await asyncio.wait_for(task, 5)  # the consumer's loop ended without an error
    assert received == ["m1"]
    with pytest.raises(BusClosed, match="closed.*'inbound'"):
        await bus.publish("inbound", message(2))
    assert [d async for d in bus.consume("turns", ChatMessage)] == []
    await bus.close()  # closing twice is fine


async def test_a_delivery_acks_once(bus: EventBus) -> None:
    await bus.publish("inbound", message(1))
    delivery: Delivery[ChatMessage] = await anext(bus.consume("inbound", ChatMessage))
    assert not delivery.acked
    await delivery.ack()
    assert delivery.acked
    await bus.drain(timeout=5)


async def test_stop_consuming_ends_that_intake_while_acks_and_other_topics_go_on(
    bus: EventBus,
) -> None:
    """A graceful stop: the router's consumers end, what they hold can still be acked, other
    groups' consumers (an adapter's replies) keep going, and what arrives later waits."""
    await bus.publish("inbound", message(1))
    inbound = bus.consume("inbound", ChatMessage, group="agent")
    held = await anext(inbound)
    await bus.stop_consuming("inbound", "agent")
    assert [d async for d in inbound] == []  # the iterator ended
    assert [d async for d in bus.consume("inbound", ChatMessage, group="agent")] == []
    await bus.publish("inbound", message(2))  # accepted: it waits for the next worker
    await held.ack()
    await bus.publish("outbound:discord", Reply(conversation=conv(), text="hi"))
    reply = await anext(bus.consume("outbound:discord", Reply, group="discord"))
    await reply.ack()
    assert reply.event.text == "hi"
