"""The router's turns on the in-memory turn store (``MemoryTurnStore``): the whole path, and
what an answered turn leaves behind, without a Redis of any kind on the turn's side.

What the turn store's contract promises (tests/test_turn_store_contract.py) is what lets the
router run on either store; these tests show the router relies on nothing more: one answer per
message, a redelivery skipped, and each owner's change (history, activity, insights job, the
live channel's record) recorded by the commit.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from bot.agent.loop import Agent
from bot.agent.prompting import PromptAssembler
from bot.bus.base import InProcessBus
from bot.bus.topics import INBOUND, outbound_topic
from bot.events import Author, ChatMessage, ConversationKey, Reply
from bot.llm.scripted import ScriptedProvider
from bot.memory.buffers import MemorySettings, MemoryStore
from bot.router.build import build_router
from bot.router.text_commands import Commands
from bot.state import connect, keys
from bot.state.history import HistoryStore
from bot.state.memory_turn import MemoryTurnStore

CONV = ConversationKey(platform="console", channel="ada")


@dataclass
class Rig:
    bus: InProcessBus
    store: MemoryTurnStore
    provider: ScriptedProvider
    replies: list[Reply]

    async def say(self, text: str, msg_id: str, user: str = "ada") -> None:
        message = ChatMessage(
            platform="console",
            id=msg_id,
            conversation=CONV,
            author=Author(id=user, display_name=user.title()),
            text=text,
            is_direct=True,
        )
        await self.bus.publish(INBOUND, message)
        await self.bus.drain(timeout=10)


@pytest.fixture
async def rig(key_tag: str) -> AsyncIterator[Rig]:
    # The chat commands and the memory store's own reads keep their Redis (the embedded store);
    # the turn reads and records through the twin alone.
    commands_redis = await connect.open_redis(f"memory://twin-{key_tag}")
    bus, store, provider = InProcessBus(), MemoryTurnStore(max_messages=6), ScriptedProvider()
    router = build_router(
        bus=bus,
        store=store,
        assembler=PromptAssembler(model="m", system_prompt="SYSTEM"),
        agent=Agent(provider),
        commands=Commands(HistoryStore(commands_redis, max_messages=6, ttl_seconds=60)),
        memory=MemoryStore(commands_redis, MemorySettings()),
    )
    replies: list[Reply] = []

    async def collect() -> None:
        async for delivery in bus.consume(outbound_topic("console"), Reply):
            replies.append(delivery.event)
            await delivery.ack()

    tasks = [asyncio.create_task(router.run()), asyncio.create_task(collect())]
    try:
        yield Rig(bus, store, provider, replies)
    finally:
        await bus.close()
        await asyncio.gather(*tasks, return_exceptions=True)
        await router.close()
        await commands_redis.aclose()


async def test_an_answer_and_its_record_land_in_the_twin(rig: Rig) -> None:
    await rig.say("hello", "m1")
    assert [r.text for r in rig.replies] == ["echo: " + rig.provider.requests[0].messages[-1].text]
    assert [(e.role, e.text) for e in rig.store.history[CONV]] == [
        ("user", "hello"),
        ("assistant", rig.replies[0].text),
    ]
    assert list(rig.store.conversations[("console", "ada")]) == [CONV], "the author's activity"
    job = rig.store.insight_jobs[("main", "console", "ada")]
    assert (job.rev, job.name) == (1, "Ada") and job.due_ms < (job.deadline_ms or 0)
    assert rig.store.claims[keys.dedupe("console", "m1")][0] == "done"


async def test_a_redelivered_message_is_answered_once(rig: Rig) -> None:
    await rig.say("hi", "dup")
    await rig.say("hi", "dup")
    assert len(rig.replies) == 1 and len(rig.provider.requests) == 1
    assert len(rig.store.history[CONV]) == 2


async def test_the_next_turn_reads_the_history_the_last_one_recorded(rig: Rig) -> None:
    rig.provider.script.extend(["Nice to meet you.", "You are Ada."])
    await rig.say("My name is Ada.", "m1")
    await rig.say("What is my name?", "m2")
    texts = [m.text for m in rig.provider.requests[1].messages]
    assert "My name is Ada." in texts[0] and texts[1] == "Nice to meet you."
    assert [r.text for r in rig.replies] == ["Nice to meet you.", "You are Ada."]
