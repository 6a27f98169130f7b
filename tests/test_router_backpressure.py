"""Backpressure: a burst waits on the bus, not in the router's queues.

The router runs over the in-process bus (a small topic) with a model that answers nothing
until the test opens its gate. Publishing far more messages than the router may hold then
blocks ``publish`` once the router holds ``max_in_flight`` messages and the topic is full;
the router's own queues never hold more than the limit. Opening the gate lets everything
through, each message answered once. The counts are read off the router, never off a clock.
"""

from __future__ import annotations

import asyncio

import pytest

from bot.agent.loop import Agent
from bot.agent.prompting import PromptAssembler
from bot.app import Chorus
from bot.bus.base import InProcessBus
from bot.bus.topics import INBOUND, outbound_topic
from bot.events import Author, ChatMessage, ConversationKey, Reply
from bot.ops.metrics import Metrics
from bot.router.build import build_router
from bot.router.core import RouterLimits
from bot.router.text_commands import Commands
from bot.settings import settings_from
from bot.state import connect
from bot.state.history import HistoryStore
from tests.test_router_shutdown import GatedModel
from tests.waiting import until

LIMIT, TOPIC_SIZE, CONCURRENCY = 8, 4, 2
CONVERSATIONS, TOTAL = 5, 100


def _message(tag: str, n: int, conversation: str) -> ChatMessage:
    return ChatMessage(
        platform="console",
        id=f"{tag}-{n}",
        conversation=ConversationKey(platform="console", channel=f"{conversation}-{tag}"),
        author=Author(id="ada"),
        text=f"message {n}",
        is_direct=True,
    )


@pytest.mark.redis
async def test_a_burst_blocks_publish_and_the_router_never_holds_more_than_its_limit(
    redis_url: str, key_tag: str
) -> None:
    redis = await connect.open_redis(redis_url)
    bus = InProcessBus(maxsize=TOPIC_SIZE)
    history = HistoryStore(redis, max_messages=10, ttl_seconds=600)
    model = GatedModel("bp")
    router = build_router(
        bus=bus,
        redis=redis,
        history=history,
        assembler=PromptAssembler(model="m", system_prompt="SYSTEM"),
        agent=Agent(model),
        commands=Commands(history),
        limits=RouterLimits(max_in_flight=LIMIT, concurrency=CONCURRENCY),
    )
    published: list[str] = []
    replies: list[str] = []
    held: list[int] = []  # what the router held (running + queued) each time a reply came

    async def publish_all() -> None:
        for n in range(TOTAL):
            message = _message(key_tag, n, f"c{n % CONVERSATIONS}")
            await bus.publish(INBOUND, message)
            published.append(message.id)

    async def collect() -> None:
        async for delivery in bus.consume(outbound_topic("console"), Reply, group="console"):
            held.append(router.queued + CONCURRENCY)
            replies.append(delivery.event.reply_to_id or "")
            await delivery.ack()

    tasks = [asyncio.create_task(router.run()), asyncio.create_task(collect())]
    publishing = asyncio.create_task(publish_all())
    try:
        # Blocked model: the router fills up to its limit, then the topic fills, then publish
        # waits. Nothing the router holds is ever more than the limit.
        await until(
            lambda: router.in_flight == LIMIT and len(published) == LIMIT + TOPIC_SIZE, every=0
        )
        assert len(model.requests) <= CONCURRENCY  # (a request is recorded once answered)
        assert router.queued == LIMIT - CONCURRENCY
        assert bus.backlog()[(INBOUND, "agent")][0] == TOPIC_SIZE  # the topic is full
        assert not publishing.done(), "the 13th publish waits for room"

        model.gate.set()
        await asyncio.wait_for(publishing, 60)
        await bus.drain(timeout=60)
    finally:
        await router.close()
        await bus.close()
        await asyncio.gather(*tasks, publishing, return_exceptions=True)
        await redis.aclose()

    assert sorted(replies) == sorted(published) and len(replies) == TOTAL
    assert router.admission.peak == LIMIT
    assert max(held) <= LIMIT
    assert router.in_flight == 0 and router.queued == 0


async def test_the_turns_in_flight_gauge_counts_running_and_queued_messages(key_tag: str) -> None:
    settings = settings_from(
        {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "test-key",
            "CHORUS_REDIS_URL": f"memory://gauge-{key_tag}",
            "CHORUS_INSIGHTS_ENABLED": "false",
        }
    )
    model = GatedModel("bp")
    app = await Chorus.from_settings(settings, provider=model)
    async with app:
        for n in range(3):  # one conversation: one runs, two wait behind it
            await app.bus.publish(INBOUND, _message(key_tag, n, "c"))
        await until(lambda: app.router.in_flight == 3, every=0)
        assert isinstance(app.metrics, Metrics)
        rendered = (await app.metrics.render())[0].decode()
        model.gate.set()
    assert "chorus_turns_in_flight 3.0" in rendered
