"""The in-process event bus: JSON round trip, order, acks and drain, backpressure, competition,
bad payloads and close. Waiting is on tasks and events, never on the clock; ``settle`` only lets
already-runnable tasks reach their next await."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

from bot.bus.base import BusClosed, Delivery, EventBus, InProcessBus
from bot.events import Author, ChatMessage, ConversationKey, Reply

T0 = datetime(2025, 1, 2, tzinfo=UTC)
CONV = ConversationKey(platform="discord", channel="c1", thread="t:1")


def message(n: int) -> ChatMessage:
    return ChatMessage(
        platform="discord",
        id=f"m{n}",
        conversation=CONV,
        author=Author(id="u1", display_name="Ada"),
        text=f"hello {n}",
        sent_at=T0,
    )


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


@pytest.fixture
async def bus() -> AsyncIterator[InProcessBus]:
    bus = InProcessBus()
    yield bus
    await bus.close()


async def test_publish_consume_round_trip(bus: InProcessBus) -> None:
    sent = message(1)
    delivery_id = await bus.publish("inbound", sent)
    delivery = await anext(bus.consume("inbound", ChatMessage, group="agent", consumer="w1"))
    assert delivery.event == sent
    assert delivery.event is not sent  # it crossed a JSON boundary
    assert (delivery.id, delivery.topic, delivery.attempt) == (delivery_id, "inbound", 1)
    await delivery.ack()
    await bus.drain(timeout=5)


async def test_events_of_a_topic_arrive_in_order(bus: InProcessBus) -> None:
    ids = [await bus.publish("inbound", message(n)) for n in range(5)]
    consumer = bus.consume("inbound", ChatMessage)
    got = [await anext(consumer) for _ in range(5)]
    assert [d.id for d in got] == ids
    assert [d.event.text for d in got] == [f"hello {n}" for n in range(5)]


async def test_topics_are_independent(bus: InProcessBus) -> None:
    await bus.publish("outbound:slack", Reply(conversation=CONV, text="to slack"))
    await bus.publish("outbound:discord", Reply(conversation=CONV, text="to discord"))
    delivery = await anext(bus.consume("outbound:discord", Reply))
    assert delivery.event.text == "to discord"


async def test_drain_waits_for_the_ack(bus: InProcessBus) -> None:
    await bus.publish("inbound", message(1))
    delivery = await anext(bus.consume("inbound", ChatMessage))
    drained = asyncio.create_task(bus.drain())
    await settle()
    assert not drained.done(), "delivered is not done: drain must wait for the ack"
    await delivery.ack()
    await asyncio.wait_for(drained, 5)


async def test_drain_waits_for_a_chain_of_work(bus: InProcessBus) -> None:
    """A handler that publishes its follow-up before acking keeps drain waiting for both."""

    async def agent() -> None:
        async for delivery in bus.consume("inbound", ChatMessage):
            await bus.publish("outbound:discord", Reply(conversation=CONV, text="hi"))
            await delivery.ack()

    sent: list[Reply] = []

    async def adapter() -> None:
        async for delivery in bus.consume("outbound:discord", Reply):
            sent.append(delivery.event)
            await delivery.ack()

    workers = [asyncio.create_task(agent()), asyncio.create_task(adapter())]
    await bus.publish("inbound", message(1))
    await bus.drain(timeout=5)
    assert [r.text for r in sent] == ["hi"]
    await bus.close()
    await asyncio.wait_for(asyncio.gather(*workers), 5)


async def test_drain_times_out_naming_the_topics_with_unacked_events(bus: InProcessBus) -> None:
    await bus.publish("inbound", message(1))
    await bus.publish("turns", message(2))
    await bus.publish("turns", message(3))
    delivery = await anext(bus.consume("inbound", ChatMessage))
    await delivery.ack()
    await delivery.ack()  # a second ack must not count for another event
    with pytest.raises(TimeoutError, match=r"not yet acked: turns=2$"):
        await bus.drain(timeout=0.01)


async def test_publish_waits_while_the_topic_is_full() -> None:
    bus = InProcessBus(maxsize=2)
    await bus.publish("inbound", message(1))
    await bus.publish("inbound", message(2))
    blocked = asyncio.create_task(bus.publish("inbound", message(3)))
    await settle()
    assert not blocked.done(), "a full topic must make publish wait"
    consumer = bus.consume("inbound", ChatMessage)
    first = await anext(consumer)
    await asyncio.wait_for(blocked, 5)  # taking one event made room
    rest = [await anext(consumer), await anext(consumer)]
    assert [d.event.id for d in (first, *rest)] == ["m1", "m2", "m3"]
    assert blocked.result() == rest[1].id
    await bus.close()


async def test_competing_consumers_get_distinct_events(bus: InProcessBus) -> None:
    one = bus.consume("inbound", ChatMessage, group="agent", consumer="w1")
    two = bus.consume("inbound", ChatMessage, group="agent", consumer="w2")

    async def next_of(consumer: AsyncIterator[Delivery[ChatMessage]]) -> Delivery[ChatMessage]:
        return await anext(consumer)

    waiting = [asyncio.create_task(next_of(one)), asyncio.create_task(next_of(two))]
    await settle()
    await bus.publish("inbound", message(1))
    await bus.publish("inbound", message(2))
    got: list[Delivery[ChatMessage]] = await asyncio.wait_for(asyncio.gather(*waiting), 5)
    assert sorted(d.event.id for d in got) == ["m1", "m2"]


async def test_in_process_bus_refuses_a_second_group_on_a_topic(bus: InProcessBus) -> None:
    await bus.publish("inbound", message(1))
    await anext(bus.consume("inbound", ChatMessage, group="agent"))
    with pytest.raises(ValueError, match="one consumer group per topic"):
        await anext(bus.consume("inbound", ChatMessage, group="audit"))


async def test_invalid_payload_is_logged_and_dropped(
    bus: InProcessBus, caplog: pytest.LogCaptureFixture
) -> None:
    bad_id = await bus.publish("inbound", Reply(conversation=CONV, text="not a chat message"))
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


async def test_an_event_that_cannot_be_serialised_is_refused_at_publish(bus: InProcessBus) -> None:
    with pytest.raises(Exception, match="serialize"):
        await bus.publish("turns", Opaque(value=object()))
    await bus.drain(timeout=5)  # nothing was counted as outstanding


async def test_close_ends_consumers_and_refuses_publish() -> None:
    bus = InProcessBus(maxsize=1)
    received: list[str] = []

    async def consumer() -> None:
        async for delivery in bus.consume("inbound", ChatMessage):
            received.append(delivery.event.id)
            await delivery.ack()

    task = asyncio.create_task(consumer())
    await bus.publish("inbound", message(1))
    await bus.drain(timeout=5)
    await bus.publish("outbound:slack", Reply(conversation=CONV, text="never sent"))
    blocked = asyncio.create_task(bus.publish("outbound:slack", Reply(conversation=CONV, text="x")))
    await settle()
    await bus.close()
    await asyncio.wait_for(task, 5)  # the consumer's loop ended without an error
    assert received == ["m1"]
    with pytest.raises(BusClosed, match="outbound:slack"):
        await blocked
    with pytest.raises(BusClosed, match="closed.*'inbound'"):
        await bus.publish("inbound", message(2))
    assert [d async for d in bus.consume("turns", ChatMessage)] == []
    await bus.drain(timeout=5)  # undelivered events were dropped with the bus
    await bus.close()  # closing twice is fine


def test_constructor_needs_no_running_loop() -> None:
    bus = InProcessBus()

    async def use() -> str:
        await bus.publish("turns", message(1))
        delivery = await anext(bus.consume("turns", ChatMessage))
        await delivery.ack()
        await bus.drain()
        return delivery.event.id

    assert asyncio.run(use()) == "m1"


def test_in_process_bus_satisfies_the_protocol() -> None:
    bus: EventBus = InProcessBus()
    assert isinstance(bus, InProcessBus)
