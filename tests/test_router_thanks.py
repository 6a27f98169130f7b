"""Stream events through the real router and live chat: a burst becomes ONE thanks turn made by
``LiveChat.tick`` (kind ``thanks``), a mention inside a resub is answered at once, kinds that are
off and paused channels thank nobody. The bus, the claims (Redis) and the prompt assembly are
real; the model is scripted, so the test sees exactly what it was asked."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from bot.agent.loop import Agent
from bot.agent.prompting import PromptAssembler
from bot.bus.base import InProcessBus
from bot.bus.topics import INBOUND, outbound_topic
from bot.engagement.policy import Engagement, PolicyConfig
from bot.engagement.thanks import ThanksConfig
from bot.engagement.turns import LiveChat
from bot.events import Author, ChatMessage, ConversationKey, Reply, Role
from bot.llm.scripted import ScriptedProvider
from bot.quota.gate import ReplyGate
from bot.router.build import build_router
from bot.router.core import Router
from bot.router.text_commands import Commands
from bot.state import connect
from bot.state.history import HistoryStore
from tests.thanks_rig import K, burst, event

Rig = tuple[InProcessBus, Router, ScriptedProvider, list[Reply], list[float]]


@asynccontextmanager
async def running(key_tag: str, thanks: ThanksConfig | None) -> AsyncIterator[Rig]:
    redis = await connect.open_redis(f"memory://thanks-{key_tag}")
    bus = InProcessBus()
    history = HistoryStore(redis, max_messages=20, ttl_seconds=3600)
    provider = ScriptedProvider(responder=lambda request: "Thank you all!")
    clock = [1000.0]
    live = LiveChat(
        Engagement(PolicyConfig(min_pending=50, channel_cooldown_seconds=0)),
        clock=lambda: clock[0],
        thanks=thanks,
    )
    router = build_router(
        bus=bus,
        redis=redis,
        history=history,
        assembler=PromptAssembler(model="m", system_prompt="S"),
        agent=Agent(provider),
        commands=Commands(history),
        engagement=live,
    )
    replies: list[Reply] = []

    async def collect() -> None:
        async for delivery in bus.consume(outbound_topic("twitch"), Reply):
            replies.append(delivery.event)
            await delivery.ack()

    tasks = [asyncio.create_task(router.run()), asyncio.create_task(collect())]
    try:
        yield bus, router, provider, replies, clock
    finally:
        await bus.close()
        await asyncio.gather(*tasks, return_exceptions=True)
        await router.close()
        await redis.aclose()


async def publish(bus: InProcessBus, router: Router, messages: list[ChatMessage]) -> None:
    for message in messages:
        await bus.publish(INBOUND, message)
    await bus.drain(timeout=10)
    await router.join()
    await bus.drain(timeout=10)


async def tick(router: Router, clock: list[float], seconds: float) -> int:
    clock[0] += seconds
    turns = router.live_tick()
    await router.join()
    return turns


def mention_resub() -> ChatMessage:
    message = event(K.RESUB, "fan", months=9, text="@mybot 9 months! what's the plan?")
    return message.model_copy(update={"mentions_bot": True, "ambient": False})


async def test_a_burst_is_one_thanks_turn_and_a_resub_mention_is_answered_at_once(
    key_tag: str,
) -> None:
    config = ThanksConfig(kinds=frozenset({K.GIFT_SUB, K.SUB, K.RESUB}), min_gap_seconds=0)
    async with running(key_tag, config) as (bus, router, provider, replies, clock):
        resub = mention_resub()
        await publish(bus, router, [*burst("gifter", "g1", 5), event(K.SUB, "newbie"), resub])
        assert [r.reply_to_id for r in replies] == [resub.id]  # the mention, at once
        assert router.in_flight == 0  # the events were acked, holding no slot
        assert await tick(router, clock, 1) == 0  # the burst is still settling
        assert await tick(router, clock, 5) == 1
        await bus.drain(timeout=10)
        assert len(replies) == 2 and replies[-1].text == "Thank you all!"
        thanks_reply = replies[-1]
        assert thanks_reply.reply_to_id is None
        assert set(thanks_reply.addressed_user_ids) == {"gifter", "fan", "newbie"}
        request = provider.requests[-1]
        parts = [p.text for p in request.messages[-1].parts if hasattr(p, "text")]
        block = next(p for p in parts if p.startswith('<user_message from="live chat">'))
        assert "GIFTER: gifted 5 subs to the community (Tier 1)" in block
        assert "FAN: resubscribed, 9 months in total" in block
        assert "@mybot 9 months! what's the plan?" in block  # the viewer's words: data
        assert parts[-1].startswith("STREAM EVENTS:")  # the instruction: outside the block
        assert len(provider.requests) == 2  # one model call for the whole burst
        assert await tick(router, clock, 60) == 0  # thanked once


async def test_kinds_that_are_off_thank_nobody(key_tag: str) -> None:
    async with running(key_tag, None) as (bus, router, provider, replies, clock):
        await publish(bus, router, [*burst("gifter", "g2", 3), event(K.RAID, "raider", count=9)])
        assert await tick(router, clock, 60) == 0
        assert replies == [] and provider.requests == [] and router.in_flight == 0


async def test_a_paused_channel_thanks_nobody(key_tag: str) -> None:
    config = ThanksConfig(kinds=frozenset(K), min_gap_seconds=0)
    async with running(key_tag, config) as (bus, router, provider, replies, clock):
        mod = Author(id="mod", display_name="Mod", roles=frozenset({Role.MODERATOR}))
        conv = ConversationKey(platform="twitch", channel="streamer")
        pause = ChatMessage(
            platform="twitch", id="p", conversation=conv, author=mod, text="!chorus pause"
        )
        await publish(bus, router, [event(K.RAID, "early", count=3)])
        await publish(bus, router, [pause, event(K.RAID, "raider", count=9)])
        assert await tick(router, clock, 60) == 0
        assert len(replies) == 1 and provider.requests == []  # only the pause acknowledgement


class Gate(ReplyGate):
    """A reply budget on Twitch whose room the test opens and closes."""

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__(clock=clock, platform="twitch")
        self.open, self.took = False, 0

    def covers(self, platform: str) -> bool:
        return platform == "twitch"

    def room_open(self, platform: str, now: float) -> bool:
        return self.open

    def took_room(self, now: float) -> None:
        self.took += 1


def test_a_thanks_is_an_unprompted_turn_the_reply_budget_paces() -> None:
    clock = [1000.0]
    gate = Gate(lambda: clock[0])
    live = LiveChat(
        Engagement(PolicyConfig(channel_cooldown_seconds=0)),
        clock=lambda: clock[0],
        budget=gate,
        thanks=ThanksConfig(kinds=frozenset({K.CHEER}), min_gap_seconds=0),
    )
    live.observe(event(K.CHEER, "c", bits=100, text="Cheer100 hi"))
    clock[0] += 60
    assert live.tick() == [] and gate.took == 0  # the room is closed: the thanks waits
    live.observe(event(K.CHEER, "d", bits=5))  # and events keep gathering meanwhile
    gate.open = True
    clock[0] += 60
    (turn,) = live.tick()
    assert (turn.kind, turn.mentions, turn.addressed) == ("room", (), ("c", "d"))
    assert turn.message.id.startswith("thanks-") and gate.took == 1
    assert live.tick() == []  # thanked once
