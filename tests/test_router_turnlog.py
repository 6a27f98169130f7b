"""The router writes the turn log as it decides: an answered message with its numbers inside the
commit, a failure (and any decision that commits nothing) with the next commit or the tick;
the conversation joins the activity index and its author the names index."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from bot.agent.loop import Agent
from bot.agent.prompting import PromptAssembler
from bot.bus.base import InProcessBus
from bot.events import Author, ChatMessage, ConversationKey
from bot.llm.errors import ProviderUnavailable
from bot.llm.scripted import ScriptedProvider
from bot.router import observe as observer_module
from bot.router.build import build_router
from bot.router.observe import TurnObserver
from bot.router.text_commands import Commands
from bot.state import connect, keys, turnlog
from bot.state.history import HistoryStore
from tests.test_router import Rig, rig

__all__ = ["rig"]

pytestmark = pytest.mark.redis


async def logged(rig: Rig, count: int) -> list[turnlog.TurnRecord]:
    """The conversation's records once ``count`` are there (the tick flushes within a second)."""
    async with asyncio.timeout(30):
        while True:
            records = await turnlog.read_log(rig.redis, rig.conv)
            if len(records) >= count:
                return records
            await asyncio.sleep(0.05)


async def test_each_decision_is_logged_newest_first_with_its_numbers(rig: Rig) -> None:
    rig.provider.script.append(ProviderUnavailable("down", provider="x", status=503, attempts=5))
    await rig.say("hello", "m1")
    await rig.bus.drain(timeout=10)
    await rig.say("x" * 51, "m2")  # too long: a fixed answer, no model
    await rig.bus.drain(timeout=10)
    await rig.say("hello again", "m3")
    await rig.bus.drain(timeout=10)
    records = await logged(rig, 3)
    assert [(r.message_id, r.decision) for r in records] == [
        (f"m3-{rig.tag}", "answered"),
        (f"m2-{rig.tag}", "error"),
        (f"m1-{rig.tag}", "error"),
    ]
    answered, _, failed = records
    assert failed.reason == "ProviderUnavailable"
    assert answered.model == "m" and answered.latency_ms >= 0
    assert answered.user_id == "ada" and answered.user_name == "Ada"
    recent = await turnlog.recent(rig.redis, ["console"], limit=100_000)
    assert rig.conv in [conv for conv, _ in recent["console"]]
    found = await turnlog.find_people(rig.redis, "ada", platform="console", limit=100_000)
    assert ("ada", "console", "ada") in found
    await rig.redis.zrem(keys.recent_conversations("console"), str(rig.conv))


async def test_upkeep_names_and_the_timeline_are_throttled_and_the_stop_sends_all(
    redis_client: Redis, key_tag: str
) -> None:
    """One LPUSH per record; the cap, TTL and activity index once per UPKEEP_SECONDS per
    conversation; the timeline once per TIMELINE_SECONDS unless forced (the router's stop)."""
    observer = TurnObserver(turnlog.TurnLog(redis_client))
    now = [1000.0]
    observer.clock = lambda: now[0]
    conv = ConversationKey(platform="slack", channel=f"c-{key_tag}")

    def message(i: int) -> ChatMessage:
        author = Author(id=f"u-{key_tag}", display_name=f"Bo{key_tag}")
        return ChatMessage(platform="slack", id=f"m{i}", conversation=conv, author=author, text="")

    recent = keys.recent_conversations("slack")
    observer.note(message(1), "quiet", "chatter")
    observer.timeline.count("in:slack")
    await observer.flush()
    first = await redis_client.zscore(recent, str(conv))
    assert first is not None and await redis_client.ttl(keys.turn_log(conv)) > 0
    await redis_client.zadd(recent, {str(conv): 1})  # to see whether the next flush moves it
    now[0] += 1
    observer.note(message(2), "batched", "chatter")
    observer.timeline.count("in:slack")
    await observer.flush()
    assert [r.message_id for r in await turnlog.read_log(redis_client, conv)] == ["m2", "m1"]
    assert await redis_client.zscore(recent, str(conv)) == 1  # not yet
    assert observer.timeline.pending["in:slack"] == 1  # held for the next timeline flush
    now[0] += observer_module.UPKEEP_SECONDS
    observer.note(message(3), "quiet", "paused")
    await observer.flush(force=True)
    assert await redis_client.zscore(recent, str(conv)) == first  # upkept again
    assert not observer.timeline.pending
    found = await turnlog.find_people(redis_client, f"bo{key_tag}", "slack")
    assert found == [(f"bo{key_tag}", "slack", f"u-{key_tag}")]
    await redis_client.zrem(recent, str(conv))
    async with redis_client.pipeline() as pipe:
        turnlog.forget_names(pipe, "slack", f"u-{key_tag}", [f"Bo{key_tag}"])
        await pipe.execute()


async def test_the_stop_does_not_cut_off_a_tick_writing_the_turn_log(
    redis_url_real_only: str, key_tag: str
) -> None:
    """The router stops while its tick is writing the held records (Redis holds the write:
    ``CLIENT PAUSE ... WRITE``): the tick finishes that write instead of being cancelled in
    it, which lost every record the write had taken."""
    redis = await connect.open_redis(redis_url_real_only)
    admin = await connect.open_redis(redis_url_real_only)
    bus = InProcessBus()
    history = HistoryStore(redis, max_messages=20, ttl_seconds=3600)
    router = build_router(
        bus=bus,
        redis=redis,
        history=history,
        assembler=PromptAssembler(model="m", system_prompt="SYSTEM"),
        agent=Agent(ScriptedProvider()),
        commands=Commands(history),
    )
    running = asyncio.create_task(router.run())
    conv = ConversationKey(platform="console", channel=f"c-{key_tag}")
    author = Author(id=f"u-{key_tag}", display_name="Ada")
    message = ChatMessage(platform="console", id="held", conversation=conv, author=author, text="")
    try:
        await admin.client_pause(60_000, all=False)  # writes only
        router.observer.note(message, "quiet", "held while Redis paused")
        async with asyncio.timeout(30):
            while True:
                if not router.observer.pending:  # the tick took it: its write waits on the pause
                    break
                await asyncio.sleep(0.01)
        stopping = asyncio.create_task(router.shutdown(10))
        # The stop acts on the ticker while Redis still holds the write: a stop that cancelled
        # the tick had its cancel land in the held write (this pass fails then, not after).
        await asyncio.sleep(0.1)
        await admin.client_unpause()
        await stopping
        records = await turnlog.read_log(redis, conv)
        assert [(r.message_id, r.reason) for r in records] == [("held", "held while Redis paused")]
    finally:
        await admin.client_unpause()
        await bus.close()
        await asyncio.gather(running, return_exceptions=True)
        await router.close()
        await redis.delete(keys.turn_log(conv))
        await redis.zrem(keys.recent_conversations("console"), str(conv))
        await redis.aclose()
        await admin.aclose()
