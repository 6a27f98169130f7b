"""Live-chat state outlives the process that holds the channel: two real routers on one Redis.

Process A handles a channel, then process B - a restart, or the bus partition moved to another
worker - takes over with an empty memory. B must not answer a paused channel, must hold the
cooldowns A started, and must not answer again what A answered; a resume in either reaches the
other. Each "process" is a real ``Router`` with its own bus and ``LiveChat`` over a
``RedisLiveStore`` on the shared store (embedded and a real Redis server).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest
from redis.asyncio import Redis

from bot.agent.loop import Agent
from bot.agent.prompting import PromptAssembler
from bot.bus.base import InProcessBus
from bot.bus.topics import INBOUND, outbound_topic
from bot.engagement.policy import Engagement, PolicyConfig, Reason
from bot.engagement.turns import LiveChat, ack
from bot.events import Author, ChatMessage, ConversationKey, Reply, Role
from bot.llm.scripted import ScriptedProvider
from bot.router.build import build_router
from bot.router.core import Router
from bot.router.text_commands import Commands
from bot.state.engagement import RedisLiveStore
from bot.state.history import HistoryStore
from tests.roundtrips import counting_round_trips

MOD = frozenset({Role.MODERATOR})
POLICY = PolicyConfig(
    min_pending=3, min_gap_seconds=30, channel_cooldown_seconds=0, mention_burst=1
)
CLOCK = [0.0]  # the policy's clock (epoch seconds), shared by every process of a test


def advance(seconds: float) -> None:
    CLOCK[0] += seconds


@dataclass
class Process:
    """One Chorus worker: its own bus, router and live-chat memory; the shared Redis."""

    bus: InProcessBus
    router: Router
    live: LiveChat
    conv: ConversationKey
    tag: str
    replies: list[Reply] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def say(
        self,
        msg: str,
        user: str,
        text: str,
        *,
        mention: bool = False,
        roles: frozenset[Role] = frozenset(),
    ) -> None:
        """Publish one chat line (id ``<tag>-<msg>``) and wait until it is handled."""
        message = ChatMessage(
            platform="twitch",
            id=f"{self.tag}-{msg}",
            conversation=self.conv,
            author=Author(id=user, display_name=user.title(), roles=roles),
            text=text,
            mentions_bot=mention,
            ambient=not mention,
        )
        await self.bus.publish(INBOUND, message)
        await self.settle()

    async def settle(self) -> None:
        await self.bus.drain(timeout=10)
        await self.router.join()
        await self.bus.drain(timeout=10)

    async def tick(self) -> int:
        turns = self.router.live_tick()
        await self.settle()
        return turns

    def answered(self) -> list[str | None]:
        return [
            r.reply_to_id.removeprefix(f"{self.tag}-") if r.reply_to_id else None
            for r in self.replies
        ]

    async def stop(self) -> None:
        await self.bus.close()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.router.close()


@pytest.fixture
async def start(
    redis_client: Redis, key_tag: str
) -> AsyncIterator[Callable[[], Awaitable[Process]]]:
    """Start a worker process on the shared Redis (all on one fake clock: ``clock``)."""
    started: list[Process] = []
    conv = ConversationKey(platform="twitch", channel=f"chan-{key_tag}")

    async def one() -> Process:
        history = HistoryStore(redis_client, max_messages=20, ttl_seconds=3600)
        bus = InProcessBus()
        live = LiveChat(
            Engagement(POLICY), clock=lambda: CLOCK[0], store=RedisLiveStore(redis_client)
        )
        router = build_router(
            bus=bus,
            redis=redis_client,
            history=history,
            assembler=PromptAssembler(model="m", system_prompt="S"),
            agent=Agent(ScriptedProvider()),
            commands=Commands(history),
            engagement=live,
        )
        proc = Process(bus, router, live, conv, key_tag)

        async def collect() -> None:
            async for delivery in bus.consume(outbound_topic("twitch"), Reply):
                proc.replies.append(delivery.event)
                await delivery.ack()

        proc.tasks = [asyncio.create_task(router.run()), asyncio.create_task(collect())]
        started.append(proc)
        return proc

    CLOCK[0] = 1_750_000_000.0
    try:
        yield one
    finally:
        for proc in started:
            await proc.stop()


async def test_a_pause_holds_in_the_next_process_until_resumed_there(
    start: Callable[[], Awaitable[Process]],
) -> None:
    a = await start()
    await a.say("p", "mod", "!chorus pause", roles=MOD)
    assert [r.text for r in a.replies] == [ack(Reason.PAUSE)]
    await a.stop()  # the process ends (or the channel's partition moves away)

    b = await start()
    advance(60)
    for i, user in enumerate(("ann", "bob", "cat", "dan")):
        await b.say(f"c{i}", user, f"anyone here? line {i}")
    await b.say("m1", "eve", "hey bot?", mention=True)
    advance(60)
    assert await b.tick() == 0
    assert b.replies == []  # paused: no batch, not even the mention

    await b.say("r", "mod", "!chorus resume", roles=MOD)
    await b.say("m2", "eve", "and now?", mention=True)
    assert b.answered() == ["r", "m2"]
    assert b.replies[0].text == ack(Reason.RESUME)


async def test_a_resume_elsewhere_reaches_the_process_that_still_holds_the_pause(
    start: Callable[[], Awaitable[Process]],
) -> None:
    a = await start()
    await a.say("p", "mod", "!chorus pause", roles=MOD)
    advance(58)
    await a.say("x1", "ann", "quiet in here")  # A still holds the channel, paused
    b = await start()
    await b.say("r", "mod", "!chorus resume", roles=MOD)  # resumed by another process
    assert b.answered() == ["r"]
    await b.live.maintain()

    advance(3)  # chat goes on in A, too soon to read the channel's state again
    await a.say("x2", "ann", "still quiet?")
    await a.live.maintain()  # a minute into the pause: its TTL is refreshed, and found gone
    advance(1)
    await a.say("m", "ann", "hello bot?", mention=True)
    assert a.answered() == ["p", "m"]


async def test_a_process_that_was_away_reads_the_pause_again(
    start: Callable[[], Awaitable[Process]],
) -> None:
    a = await start()
    await a.say("m1", "ann", "hi bot", mention=True)
    b = await start()  # the channel moved to B, where it is paused
    await b.say("p", "mod", "!chorus pause", roles=MOD)
    advance(10)  # ...and back to A, which has not seen the channel for a while
    await a.say("m2", "bob", "are you there?", mention=True)
    assert a.answered() == ["m1"]


async def test_a_pause_elsewhere_reaches_a_busy_channel_with_the_next_maintain_pass(
    start: Callable[[], Awaitable[Process]],
) -> None:
    """A busy channel is never re-read; the pause feed brings another worker's pause (or the
    dashboard's) to it on the next one-second pass, and the resume the same way."""
    a = await start()
    await a.say("m1", "ann", "hi bot", mention=True)  # A holds the channel
    b = await start()
    advance(1)
    await b.say("p", "mod", "!chorus pause", roles=MOD)  # another worker pauses it
    advance(1)
    await a.say("x1", "bob", "chatting on")  # busy in A: too soon to read its state again
    await a.live.maintain()
    advance(1)
    await a.say("m2", "cat", "are you there?", mention=True)
    assert a.answered() == ["m1"]  # paused in A too
    await b.say("r", "mod", "!chorus resume", roles=MOD)
    await a.live.maintain()
    advance(1)
    await a.say("m3", "dan", "and now?", mention=True)
    assert a.answered() == ["m1", "m3"]


async def test_cooldowns_hold_in_the_next_process(
    start: Callable[[], Awaitable[Process]],
) -> None:
    a = await start()
    await a.say("m1", "ann", "hi bot!", mention=True)
    assert a.answered() == ["m1"]
    await a.stop()

    b = await start()
    advance(3)
    await b.say("m2", "ann", "me again, bot?", mention=True)
    assert b.replies == []  # inside ann's 10 s cooldown, which A started: queued
    advance(4)
    assert await b.tick() == 0
    advance(4)  # the cooldown is over
    assert await b.tick() == 1
    assert b.answered() == ["m2"]


async def test_what_one_process_answered_the_next_does_not_answer_again(
    start: Callable[[], Awaitable[Process]],
) -> None:
    a = await start()
    await a.say("m1", "ann", "hi bot!", mention=True)
    advance(2)
    await a.say("m2", "ann", "one more thing, bot?", mention=True)  # behind the cooldown
    advance(10)
    assert await a.tick() == 1  # answered in a batch turn of its own
    assert a.answered() == ["m1", "m2"]
    await a.stop()

    b = await start()
    advance(1)
    for msg in ("m1", "m2"):  # both delivered again to the new process
        await b.say(msg, "ann", "again", mention=True)
    advance(60)
    assert await b.tick() == 0
    assert b.replies == []


async def test_an_answered_live_message_costs_two_round_trips(
    start: Callable[[], Awaitable[Process]],
) -> None:
    a = await start()
    await a.say("m0", "ann", "hi bot", mention=True)  # the channel is active here now
    with counting_round_trips() as trips:
        await a.say("m1", "bob", "hello bot", mention=True)
    assert a.answered() == ["m0", "m1"]
    assert trips.count == 2, trips.writes  # claim + read, then the commit with its record
    assert b"users" in trips.writes[1] and b"answered" in trips.writes[1]
