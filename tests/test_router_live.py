"""Live chat through the real router: the engagement policy decides, the router runs the turns
(immediate answers, one batched answer to several chatters, pause/resume acknowledgements)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bot.agent.loop import Agent
from bot.agent.prompting import PromptAssembler
from bot.bus.base import InProcessBus
from bot.bus.topics import INBOUND, outbound_topic
from bot.engagement.policy import Engagement, PolicyConfig, Reason
from bot.engagement.turns import LiveChat, ack
from bot.events import Author, ChatMessage, ConversationKey, Reply, Role
from bot.llm.scripted import ScriptedProvider
from bot.ops.metrics import Metrics
from bot.router.build import build_router
from bot.router.core import Router
from bot.router.text_commands import Commands
from bot.state import connect
from bot.state.history import HistoryStore


@dataclass
class Live:
    bus: InProcessBus
    router: Router
    provider: ScriptedProvider
    replies: list[Reply]
    clock: list[float]
    conv: ConversationKey
    metrics: Metrics
    n: int = 0

    async def chat(
        self, user: str, text: str, *, mention: bool = False, roles: frozenset[Role] = frozenset()
    ) -> str:
        self.n += 1
        msg_id = f"{self.conv.channel}-{self.n}"
        await self.bus.publish(
            INBOUND,
            ChatMessage(
                platform="twitch",
                id=msg_id,
                conversation=self.conv,
                author=Author(id=user, display_name=user.title(), roles=roles),
                text=text,
                mentions_bot=mention,
                ambient=not mention,
            ),
        )
        return msg_id


@pytest.fixture
async def live(key_tag: str) -> AsyncIterator[Live]:
    redis = await connect.open_redis(f"memory://live-{key_tag}")
    bus = InProcessBus()
    history = HistoryStore(redis, max_messages=20, ttl_seconds=3600)
    provider = ScriptedProvider()
    clock = [1000.0]
    policy = PolicyConfig(
        min_pending=3, min_gap_seconds=30, channel_cooldown_seconds=0, mention_burst=1
    )
    metrics = Metrics(process_metrics=False)
    router = build_router(
        bus=bus,
        redis=redis,
        history=history,
        assembler=PromptAssembler(model="m", system_prompt="S"),
        agent=Agent(provider),
        commands=Commands(history),
        engagement=LiveChat(Engagement(policy), clock=lambda: clock[0], metrics=metrics),
        metrics=metrics,
    )
    replies: list[Reply] = []

    async def collect() -> None:
        async for delivery in bus.consume(outbound_topic("twitch"), Reply):
            replies.append(delivery.event)
            await delivery.ack()

    tasks = [asyncio.create_task(router.run()), asyncio.create_task(collect())]
    try:
        yield Live(
            bus,
            router,
            provider,
            replies,
            clock,
            ConversationKey(platform="twitch", channel=f"chan{key_tag}"),
            metrics,
        )
    finally:
        await bus.close()
        await asyncio.gather(*tasks, return_exceptions=True)
        await router.close()
        await redis.aclose()


async def test_a_mention_is_answered_and_chatter_waits_for_a_batch(live: Live) -> None:
    mention = await live.chat("ann", "hey bot, how are you?", mention=True)
    await live.bus.drain(timeout=10)
    assert [r.reply_to_id for r in live.replies] == [mention]

    for user, text in (("bob", "anyone know the next map?"), ("cat", "gg"), ("dan", "lol")):
        await live.chat(user, text)
    await live.bus.drain(timeout=10)
    assert len(live.replies) == 1  # chatter is not answered one by one
    assert live.router.in_flight == 0  # acked at once, holding no turn slot
    assert live.router.live_tick() == 0  # too soon after the bot last spoke

    live.clock[0] += 31
    assert live.router.live_tick() == 1
    await live.router.join()  # the batch turn runs on the conversation's worker
    await live.bus.drain(timeout=10)
    assert live.router.in_flight == 0
    batch = live.replies[-1]
    assert 1 <= len(batch.addressed_user_ids) <= 2
    assert "bob" in batch.addressed_user_ids  # the question ranks first
    prompt = live.provider.requests[-1].messages[-1].text
    assert "LIVE CHAT" in prompt and "anyone know the next map?" in prompt
    assert len(live.provider.requests) == 2  # one model call for the whole batch


async def test_pause_and_resume_only_for_moderators(live: Live) -> None:
    await live.chat("viewer", "!chorus pause")
    await live.chat("mod", "!chorus pause", roles=frozenset({Role.MODERATOR}))
    await live.bus.drain(timeout=10)
    assert [r.text for r in live.replies] == [ack(Reason.PAUSE)]
    await live.chat("ann", "hello bot?", mention=True)
    await live.bus.drain(timeout=10)
    assert len(live.replies) == 1  # paused: not even mentions
    await live.chat("owner", "!chorus resume", roles=frozenset({Role.OWNER}))
    await live.bus.drain(timeout=10)
    assert live.replies[-1].text == ack(Reason.RESUME)
    assert live.provider.requests == []  # acknowledgements never call the model


async def _decisions(live: Live) -> dict[str, float]:
    body, _ = await live.metrics.render()
    found = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == "chorus_engagement_decisions_total":
                found[sample.labels["decision"]] = sample.value
    return found


async def test_a_busy_regular_flooding_between_mentions_is_answered_once(live: Live) -> None:
    first = await live.chat("reg", "hey bot?", mention=True)
    live.clock[0] += 2
    waiting = await live.chat("reg", "and one more thing?", mention=True)
    for i in range(8):  # then a flood of ordinary lines inside the 15 s flood window
        live.clock[0] += 0.5
        await live.chat("reg", f"spam line {i}")
    await live.bus.drain(timeout=10)
    assert [r.reply_to_id for r in live.replies] == [first]
    assert (await _decisions(live))["ignore"] >= 1  # the flood lines were ignored
    live.clock[0] += 10  # the regular's 10 s cooldown is over
    assert live.router.live_tick() == 1
    await live.router.join()
    await live.bus.drain(timeout=10)
    assert [r.reply_to_id for r in live.replies] == [first, waiting]
    prompt = live.provider.requests[-1].messages[-1].text
    assert "and one more thing?" in prompt and "spam line" not in prompt
    live.clock[0] += 30
    assert live.router.live_tick() == 0  # answered once
    assert live.router.engagement is not None and live.router.engagement.declined == 0


async def test_a_declined_mention_is_logged_and_counted(
    live: Live, caplog: pytest.LogCaptureFixture
) -> None:
    await live.chat("reg", "hi bot", mention=True)
    waiting = await live.chat("reg", "still there?", mention=True)  # waits for the cooldown
    with caplog.at_level(logging.INFO, logger="chorus.live"):
        await live.chat("mod", "!chorus pause", roles=frozenset({Role.MODERATOR}))
        await live.bus.drain(timeout=10)
    (record,) = [r for r in caplog.records if r.getMessage() == "live chat: mention declined"]
    assert (record.message_id, record.reason) == (waiting, "paused")  # type: ignore[attr-defined]
    assert (await _decisions(live))["declined_paused"] == 1
