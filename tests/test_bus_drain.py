"""The Redis Streams bus's ``drain`` reads only the streams not yet seen settled.

Drain is what tests, the benchmarks and a clean shutdown wait on. It used to read three
commands' worth of state from every stream the bus had ever published to, on every re-check
(each ack or publish re-checks), which was most of the benchmark's Redis work per message. Now
a stream it has seen fully acked is read again only after this bus publishes to it again, and
it still waits for everything published since (tests/test_bus_contract.py: the drain contract).
Round trips are counted at the connection (tests/roundtrips.py)."""

from __future__ import annotations

import pytest

from bot.bus.streams import RedisStreamsBus
from bot.events import Author, ChatMessage, ConversationKey
from tests.roundtrips import counting_round_trips


def message(n: int, channel: str) -> ChatMessage:
    return ChatMessage(
        platform="discord",
        id=f"m{n}",
        conversation=ConversationKey(platform="discord", channel=channel),
        author=Author(id="u1"),
        text=f"hello {n}",
    )


def _checks(writes: list[bytes]) -> list[bytes]:
    """The drain's reads among a connection's writes (the consumer's own reads run too)."""
    return [write for write in writes if b"XINFO" in write]


async def _answer_one(streams_bus: RedisStreamsBus, topic: str) -> None:
    delivery = await anext(streams_bus.consume(topic, ChatMessage, group="agent"))
    await delivery.ack()


@pytest.mark.redis
async def test_a_settled_stream_is_not_read_again_until_published_to(
    streams_bus: RedisStreamsBus,
) -> None:
    for n, channel in enumerate(("a", "b", "c", "d", "e", "f")):  # several partitions
        await streams_bus.publish("inbound", message(n, channel))
        await _answer_one(streams_bus, "inbound")
    await streams_bus.drain(timeout=10)
    with counting_round_trips() as trips:
        await streams_bus.drain(timeout=10)
    assert _checks(trips.writes) == [], "nothing published since it settled: nothing to read"

    await streams_bus.publish("inbound", message(9, "a"))
    with counting_round_trips() as trips, pytest.raises(TimeoutError, match="inbound=1"):
        await streams_bus.drain(timeout=0.3)  # the new entry is not acked yet: drain waits for it
    checks = _checks(trips.writes)
    assert checks, "drain read the stream it published to"
    assert all(check.count(b"XINFO") == 1 for check in checks), "and that stream only"
    await _answer_one(streams_bus, "inbound")
    await streams_bus.drain(timeout=10)
