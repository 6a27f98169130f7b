"""``/forget`` reaches the Redis Streams bus: a user's entries still held in the streams (their
messages, deletions naming them, replies addressed to them, their dead letters) are deleted in
every partition, nobody else's; unread work, the ``/forget`` message itself and what the user
wrote after it stay; the pending entries of others are still delivered. A real
``RedisStreamsBus`` per test (its own namespace), on the embedded store and a real Redis."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from pydantic import BaseModel
from redis.asyncio import Redis

from bot.bus.base import InProcessBus
from bot.bus.erasure import Erased, StreamEraser
from bot.bus.streams import FIELD, RedisStreamsBus
from bot.bus.topics import DEAD_LETTERS, DELETIONS, INBOUND, moderation_topic, outbound_topic
from bot.events import (
    Author,
    ChatMessage,
    ConversationKey,
    DeadLetter,
    MessageDeleted,
    ModerationRequest,
    Reply,
)
from bot.memory.buffers import MemorySettings, MemoryStore
from bot.router.memory_commands import register
from bot.router.text_commands import Commands
from bot.state.history import HistoryStore

T0 = datetime(2025, 1, 2, tzinfo=UTC)
ADA, BOB = "ada", 'b"o\\b'  # Bob's id needs JSON escaping: every entry is parsed for him
TOPICS = (
    INBOUND,
    DELETIONS,
    outbound_topic("discord"),
    outbound_topic("slack"),
    DEAD_LETTERS,
    moderation_topic("discord"),
)


def conv(channel: str, platform: str = "discord") -> ConversationKey:
    return ConversationKey(platform=platform, channel=channel)


def said(user: str, text: str, channel: str = "c1", platform: str = "discord") -> ChatMessage:
    return ChatMessage(
        platform=platform,
        id=f"{platform}-{text}",
        conversation=conv(channel, platform),
        author=Author(id=user),
        text=text,
        sent_at=T0,
    )


def reply(text: str, *users: str, channel: str = "c1", platform: str = "discord") -> Reply:
    return Reply(conversation=conv(channel, platform), text=text, addressed_user_ids=users)


@pytest.fixture
async def bus(redis_client: Redis, key_tag: str) -> AsyncIterator[RedisStreamsBus]:
    made = RedisStreamsBus(
        redis_client, consumer="w1", namespace=key_tag, partitions=3, block_ms=50, lease_ms=600
    )
    yield made
    await made.close()


def eraser(bus: RedisStreamsBus, redis: Redis, page: int = 2) -> StreamEraser:
    made = StreamEraser.for_bus(bus, redis)
    assert made is not None
    made.page = page  # small pages: the scan crosses page boundaries
    return made


async def texts(redis: Redis, bus: RedisStreamsBus) -> set[str]:
    """Every entry's JSON, in every partition of every topic the tests use."""
    found: set[str] = set()
    for topic in TOPICS:
        for partition in range(bus.partitions):
            for _, fields in await redis.xrange(bus.stream(topic, partition)) or []:
                found.add(str((fields or {})[FIELD]))
    return found


def mentions(entries: set[str], needle: str) -> list[str]:
    return [e for e in entries if needle in e]


async def read_all(bus: RedisStreamsBus, topic: str, group: str, count: int) -> list[str]:
    """Deliver ``count`` entries of ``topic`` to ``group`` without acking them."""
    deliveries = bus.consume(topic, ChatMessage if topic == INBOUND else Reply, group=group)
    got = [await asyncio.wait_for(anext(deliveries), 30) for _ in range(count)]
    return [d.id for d in got]


async def consume_and_ack(bus: RedisStreamsBus, topic: str, group: str, count: int) -> None:
    models: dict[str, type[BaseModel]] = {INBOUND: ChatMessage, DELETIONS: MessageDeleted}
    deliveries = bus.consume(topic, models.get(topic, Reply), group=group)
    for _ in range(count):
        await (await asyncio.wait_for(anext(deliveries), 30)).ack()


@pytest.mark.redis
async def test_only_the_users_entries_go_in_every_topic_and_partition(
    redis_client: Redis, bus: RedisStreamsBus
) -> None:
    channels = [f"c{n}" for n in range(6)]  # spread over the three partitions
    assert len({bus.partition_of(said(ADA, "x", c)) for c in channels}) == 3
    for n, channel in enumerate(channels):
        await bus.publish(INBOUND, said(ADA, f"ada-secret-{n}", channel))
        await bus.publish(INBOUND, said(BOB, f"bob-{n}", channel))
        await bus.publish(outbound_topic("discord"), reply(f"to-ada-{n}", ADA, channel=channel))
        await bus.publish(outbound_topic("discord"), reply(f"to-bob-{n}", BOB, channel=channel))
    await bus.publish(outbound_topic("discord"), reply("to-both", BOB, ADA))  # a live batch
    await bus.publish(INBOUND, said(ADA, "ada-on-slack", platform="slack"))  # another identity
    await bus.publish(outbound_topic("slack"), reply("slack-for-ada", ADA, platform="slack"))
    await bus.publish(DELETIONS, MessageDeleted(conversation=conv("c0"), author_id=ADA))
    await bus.publish(
        DELETIONS, MessageDeleted(conversation=conv("c1"), message_id="discord-ada-secret-1")
    )
    await bus.publish(
        DELETIONS, MessageDeleted(conversation=conv("c2"), message_id="discord-bob-2")
    )
    await bus.publish(DELETIONS, MessageDeleted(conversation=conv("c3", "slack"), author_id=ADA))
    for user, name in ((ADA, "ada"), (BOB, "bob")):
        letter = DeadLetter(message=said(user, f"dead-{name}"), attempts=4, reason="x")
        await bus.publish(DEAD_LETTERS, letter)
        timeout = ModerationRequest(
            conversation=conv("c0"),
            action="timeout",
            user_id=user,
            seconds=60,
            reason=f"ban-{name}",
        )
        await bus.publish(moderation_topic("discord"), timeout)
    # Every consumer has handled everything (nobody consumes the dead letters, and here no
    # gateway the moderation requests).
    await consume_and_ack(bus, INBOUND, "agent", 13)
    await consume_and_ack(bus, DELETIONS, "agent", 4)
    await consume_and_ack(bus, outbound_topic("discord"), "outbound", 13)
    await consume_and_ack(bus, outbound_topic("slack"), "outbound", 1)
    before = await texts(redis_client, bus)

    erased = await eraser(bus, redis_client).erase_user("discord", ADA)

    assert erased == Erased(messages=6, deletions=2, replies=7, dead_letters=1, moderation=1)
    after = await texts(redis_client, bus)
    assert mentions(after, "ada-secret") == [] and mentions(after, "to-ada") == []
    assert mentions(after, "to-both") == [] and mentions(after, "dead-ada") == []
    assert mentions(after, "ada-secret-1") == []  # (the deletion naming it went too)
    assert after <= before and len(before - after) == erased.total
    assert mentions(after, "ban-ada") == [] and mentions(after, "ban-bob")
    for kept in ("bob-", "to-bob-", "discord-bob-2", "ada-on-slack", "slack-for-ada", "dead-bob"):
        assert mentions(after, kept), kept
    assert len(mentions(after, '"slack"')) == 3  # ada's slack message, reply and deletion
    assert await eraser(bus, redis_client).erase_user("discord", ADA) == Erased()  # idempotent
    # Bob's id needs escaping in JSON; he is found all the same.
    assert await eraser(bus, redis_client).erase_user("discord", BOB) == Erased(
        messages=6, deletions=1, replies=6, dead_letters=1, moderation=1
    )


@pytest.mark.redis
async def test_pending_entries_of_others_are_still_delivered_and_unread_work_stays(
    redis_client: Redis, bus: RedisStreamsBus
) -> None:
    """A worker read four messages and died before acking them; two more were never read. The
    erasure deletes Ada's two read ones (an XACK of a deleted id still clears the pending
    list), keeps her unread one, and the next worker gets Bob's and the unread ones."""
    first = [said(ADA, "a1"), said(BOB, "b1"), said(ADA, "a2"), said(BOB, "b2")]
    for message in first:
        await bus.publish(INBOUND, message)
    stream = bus.stream(INBOUND, bus.partition_of(first[0]))
    await redis_client.xgroup_create(stream, "agent", id="0")
    await redis_client.xreadgroup("agent", "dead", {stream: ">"}, count=4)  # never acked
    await bus.publish(INBOUND, said(ADA, "a3"))  # not read by anyone yet
    await bus.publish(INBOUND, said(BOB, "b3"))

    erased = await eraser(bus, redis_client).erase_user("discord", ADA)

    assert erased.messages == 2
    assert [f for _, f in await redis_client.xrange(stream) or [] if '"a1"' in str(f)] == []
    assert (await redis_client.xpending(stream, "agent"))["pending"] == 4  # the PEL keeps ids
    deliveries = bus.consume(INBOUND, ChatMessage, group="agent")
    got = [await asyncio.wait_for(anext(deliveries), 30) for _ in range(4)]
    assert [d.event.text for d in got] == ["b1", "b2", "a3", "b3"]
    for delivery in got:
        await delivery.ack()
    assert (await redis_client.xpending(stream, "agent"))["pending"] == 0


@pytest.mark.redis
async def test_an_ack_of_an_erased_entry_clears_it(
    redis_client: Redis, bus: RedisStreamsBus
) -> None:
    """A consumer still holding an entry erased under it acks it as usual."""
    await bus.publish(INBOUND, said(ADA, "in-flight"))
    delivery = await asyncio.wait_for(anext(bus.consume(INBOUND, ChatMessage, group="agent")), 30)
    assert (await eraser(bus, redis_client).erase_user("discord", ADA)).messages == 1
    stream = bus.stream(INBOUND, bus.partition_of(delivery.event))
    assert await redis_client.xlen(stream) == 0
    await delivery.ack()
    assert (await redis_client.xpending(stream, "agent"))["pending"] == 0


@pytest.mark.redis
async def test_the_forget_message_and_what_follows_it_stay(
    redis_client: Redis, bus: RedisStreamsBus
) -> None:
    """Ids chosen: before at ms 1000, /forget at 2000 in c1's partition, after at 3000; in
    another partition an entry of the very millisecond of /forget is kept (ids' sequence
    numbers count per stream, so it cannot be ordered against it)."""
    here = said(ADA, "x").conversation.channel
    elsewhere = next(
        f"c{n}"
        for n in range(2, 50)
        if bus.partition_of(said(ADA, "x", f"c{n}")) != bus.partition_of(said(ADA, "x"))
    )
    forget = said(ADA, "/forget", here)
    for ms, text, channel in (
        (1000, "before-here", here),
        (1000, "before-elsewhere", elsewhere),
        (2000, "/forget", here),
        (2000, "same-ms-elsewhere", elsewhere),
        (3000, "after-here", here),
        (3000, "after-elsewhere", elsewhere),
    ):
        message = forget if text == "/forget" else said(ADA, text, channel)
        stream = bus.stream(INBOUND, bus.partition_of(message))
        await redis_client.xadd(stream, {FIELD: message.model_dump_json()}, id=f"{ms}-0")
    await consume_and_ack(bus, INBOUND, "agent", 6)

    erased = await eraser(bus, redis_client).erase_user("discord", ADA, request=forget)

    assert erased.messages == 2
    left = {json.loads(e)["text"] for e in await texts(redis_client, bus)}
    assert left == {"/forget", "same-ms-elsewhere", "after-here", "after-elsewhere"}


@pytest.mark.redis
async def test_forget_command_reports_what_it_erased_from_the_streams(
    redis_client: Redis, bus: RedisStreamsBus, key_tag: str
) -> None:
    history = HistoryStore(redis_client, max_messages=50, ttl_seconds=3600)
    commands = Commands(history)
    memory = MemoryStore(redis_client, MemorySettings())
    register(commands, memory, history, insights_queue=key_tag, eraser=eraser(bus, redis_client))
    user = f"ada-{key_tag}"
    await bus.publish(INBOUND, said(user, "my secret"))
    await bus.publish(outbound_topic("discord"), reply("about your secret", user))
    await bus.publish(INBOUND, said("bob", "bob's words"))
    await consume_and_ack(bus, INBOUND, "agent", 2)
    await consume_and_ack(bus, outbound_topic("discord"), "outbound", 1)

    answer = await commands.handle(said(user, "/forget"))

    assert answer is not None and "2 messages and replies still queued for delivery" in answer
    left = await texts(redis_client, bus)
    assert mentions(left, "secret") == [] and mentions(left, "bob's words")


async def test_the_in_process_bus_has_nothing_to_erase(redis_client: Redis) -> None:
    assert StreamEraser.for_bus(InProcessBus(), redis_client) is None
