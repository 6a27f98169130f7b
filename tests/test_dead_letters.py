"""A message that kills every worker that takes it is not retried forever: past
``max_deliveries`` it goes to the ``dead_letters`` topic, unanswered, with its attempt count.

The deliveries are real: the message sits in a Redis Streams consumer group, taken (and
"died on") by workers that never acked it, so its delivery count is the one Redis keeps; the
surviving worker's router takes the partition over and reclaims it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis

from bot.agent.loop import Agent
from bot.agent.prompting import PromptAssembler
from bot.bus.streams import RedisStreamsBus
from bot.bus.topics import DEAD_LETTERS, INBOUND, outbound_topic
from bot.events import Author, ChatMessage, ConversationKey, DeadLetter, Reply
from bot.llm.scripted import ScriptedProvider
from bot.ops.metrics import Metrics
from bot.router.build import build_router
from bot.router.core import RouterLimits
from bot.router.text_commands import Commands
from bot.state import connect
from bot.state.history import HistoryStore


def poison(tag: str, n: int) -> ChatMessage:
    conv = ConversationKey(platform="console", channel=f"c{n}-{tag}")
    return ChatMessage(
        platform="console",
        id=f"m{n}-{tag}",
        conversation=conv,
        author=Author(id="ada"),
        text="hello",
        is_direct=True,
    )


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = await connect.open_redis(redis_url)
    yield client
    await client.aclose()


async def deliveries_so_far(redis: Redis, bus: RedisStreamsBus, times: int) -> str:
    """Publish nothing new; make the one pending entry look delivered ``times`` times."""
    stream = bus.stream(INBOUND, 0)
    await redis.xgroup_create(stream, "agent", id="0", mkstream=True)
    read: Any = await redis.xreadgroup("agent", "crashed-1", {stream: ">"}, count=1)
    [[_, [(entry_id, _)]]] = read  # redis-py types the reply loosely
    for n in range(2, times + 1):  # each later worker took it over and died too
        await redis.xclaim(stream, "agent", f"crashed-{n}", 0, [entry_id])
    return str(entry_id)


@pytest.mark.redis
@pytest.mark.parametrize(("deliveries", "dead"), [(3, True), (2, False)])
async def test_a_message_delivered_too_often_goes_to_dead_letters(
    redis: Redis, key_tag: str, deliveries: int, dead: bool
) -> None:
    gateway = RedisStreamsBus(redis, consumer="gateway", namespace=key_tag, partitions=1)
    message = poison(key_tag, deliveries)
    await gateway.publish(INBOUND, message)
    await deliveries_so_far(redis, gateway, deliveries)

    worker = RedisStreamsBus(
        redis, consumer="survivor", namespace=key_tag, partitions=1, claim_idle_ms=1
    )
    provider = ScriptedProvider(["answered at last"])
    metrics = Metrics(process_metrics=False)
    history = HistoryStore(redis, max_messages=20, ttl_seconds=3600)
    router = build_router(
        bus=worker,
        redis=redis,
        history=history,
        assembler=PromptAssembler(model="m", system_prompt="SYSTEM"),
        agent=Agent(provider),
        commands=Commands(history),
        metrics=metrics,
        limits=RouterLimits(max_deliveries=3),
    )
    routing = asyncio.create_task(router.run())
    try:
        if dead:
            letters = worker.consume(DEAD_LETTERS, DeadLetter, group="ops")
            letter = await asyncio.wait_for(anext(letters), 30)
            await letter.ack()
            assert letter.event.message == message and letter.event.attempts == 4
            assert "4 times" in letter.event.reason
            assert provider.requests == []  # nobody answered it
            rendered = (await metrics.render())[0].decode()
            assert 'chorus_dead_letters_total{platform="console"} 1.0' in rendered
        else:  # the third delivery is still a real try
            replies = worker.consume(outbound_topic("console"), Reply, group="console")
            reply = await asyncio.wait_for(anext(replies), 30)
            await reply.ack()
            assert reply.event.text == "answered at last"
        await worker.drain(timeout=30)
        assert await redis.xpending(worker.stream(INBOUND, 0), "agent") == {
            "pending": 0,
            "min": None,
            "max": None,
            "consumers": [],
        }
    finally:
        routing.cancel()
        await asyncio.gather(routing, return_exceptions=True)
        await router.close()
        await worker.close()
        await gateway.close()
        for key in await redis.keys(f"*{key_tag}*"):
            await redis.delete(key)
