"""A graceful stop of the router (what SIGTERM does to a worker) on a real Redis.

The router runs over the Redis Streams bus with a scripted model that awaits a gate, so a turn
is provably in progress when ``shutdown`` starts. Within the grace, the turn finishes: one reply,
recorded and acked once, and nothing new is taken. Past the grace, the turn is cancelled: its
claim is released (the key no longer holds this worker's token) and its delivery is not acked,
so a second router takes the message over as soon as the first one's bus has closed, without
waiting for the 60 s claim lease. A commit in progress is never cut: the shutdown waits for it.

Waiting is on events, the router's own state and ``XREAD BLOCK``; no sleeps decide an outcome.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import cast

import pytest
from redis.asyncio import Redis

from bot.agent.loop import Agent
from bot.agent.prompting import PromptAssembler
from bot.bus.base import InProcessBus
from bot.bus.streams import FIELD, RedisStreamsBus
from bot.bus.topics import INBOUND, outbound_topic
from bot.events import Author, ChatMessage, ConversationKey, Reply
from bot.llm.scripted import ScriptedProvider
from bot.llm.types import LLMRequest, LLMResponse
from bot.router.build import build_router
from bot.router.core import Router, RouterLimits
from bot.router.text_commands import Commands
from bot.state import keys
from bot.state.history import HistoryStore
from tests.waiting import until

CLAIM_LEASE_MS = 60_000  # long: a takeover that waited for it would blow every limit below


def _said(request: LLMRequest) -> str:
    found = re.search(r"message \d+", request.messages[-1].text)
    return found.group() if found else "?"


class GatedModel(ScriptedProvider):
    """Answers ``<name>: <text>`` once ``gate`` is open; ``started`` is set on a request."""

    def __init__(self, name: str, *, open_gate: bool = False) -> None:
        super().__init__(responder=lambda r: f"{name}: {_said(r)}")
        self.gate = asyncio.Event()
        self.started = asyncio.Event()
        if open_gate:
            self.gate.set()

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.started.set()
        await self.gate.wait()
        return await super().complete(request)


@pytest.fixture
def redis(real_redis: Redis) -> Redis:
    return real_redis


def _bus(redis: Redis, tag: str, name: str) -> RedisStreamsBus:
    return RedisStreamsBus(
        redis, consumer=name, namespace=tag, partitions=1, block_ms=100, lease_ms=1500
    )


def _router(redis: Redis, bus: RedisStreamsBus | InProcessBus, model: ScriptedProvider) -> Router:
    history = HistoryStore(redis, max_messages=20, ttl_seconds=600)
    return build_router(
        worker_id=getattr(bus, "consumer", "solo"),
        bus=bus,
        redis=redis,
        history=history,
        assembler=PromptAssembler(model="m", system_prompt="SYSTEM"),
        agent=Agent(model),
        commands=Commands(history),
        limits=RouterLimits(claim_lease_ms=CLAIM_LEASE_MS),
    )


def _message(tag: str, n: int) -> ChatMessage:
    return ChatMessage(
        platform="console",
        id=f"{tag}-m{n}",
        conversation=ConversationKey(platform="console", channel=f"ada-{tag}"),
        author=Author(id="ada"),
        text=f"message {n}",
        is_direct=True,
    )


async def _replies(redis: Redis, tag: str, count: int) -> list[Reply]:
    """The first ``count`` replies on the (one-partition) outbound stream, waited for."""
    stream = keys.bus_stream(outbound_topic("console"), 0, tag)
    while await redis.xlen(stream) < count:
        await redis.xread({stream: "$"}, block=200)
    rows = cast("list[tuple[str, dict[str, str]]]", await redis.xrange(stream))
    return [Reply.model_validate_json(fields[FIELD]) for _, fields in rows]


async def _pending(redis: Redis, tag: str, consumer: str) -> dict[str, int]:
    """The messages pending (delivered, not acked) at ``consumer``, with their delivery counts."""
    stream = keys.bus_stream(INBOUND, 0, tag)
    rows = await redis.xpending_range(stream, "agent", "-", "+", 100, consumername=consumer)
    ids = {str(row["message_id"]): int(row["times_delivered"]) for row in rows}
    entries = cast("list[tuple[str, dict[str, str]]]", await redis.xrange(stream))
    return {
        ChatMessage.model_validate_json(fields[FIELD]).id: ids[entry_id]
        for entry_id, fields in entries
        if entry_id in ids
    }


async def _next_worker(redis: Redis, tag: str, publisher: RedisStreamsBus) -> list[Reply]:
    """A second worker ("w2", a model that answers at once) until both messages are answered
    and every inbound entry is acked; the two replies."""
    bus = _bus(redis, tag, "w2")
    router = _router(redis, bus, GatedModel("w2", open_gate=True))
    running = asyncio.create_task(router.run())
    try:
        replies = await asyncio.wait_for(_replies(redis, tag, 2), 20)
        await asyncio.wait_for(publisher.drain(), 20)
    finally:
        await router.close()
        await bus.close()
        await asyncio.gather(running, return_exceptions=True)
        await publisher.close()
    return replies


def _drain_record(caplog: pytest.LogCaptureFixture) -> logging.LogRecord:
    [record] = [r for r in caplog.records if r.getMessage() == "shutdown drain finished"]
    return record


async def test_a_turn_in_progress_finishes_within_the_grace_and_nothing_new_is_taken(
    redis: Redis, key_tag: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="chorus")
    publisher = _bus(redis, key_tag, "gateway")
    first_bus, model = _bus(redis, key_tag, "w1"), GatedModel("w1")
    first = _router(redis, first_bus, model)
    running = asyncio.create_task(first.run())
    await publisher.publish(INBOUND, _message(key_tag, 1))
    await asyncio.wait_for(model.started.wait(), 20)

    stopping = asyncio.create_task(first.shutdown(grace=60))
    await until(lambda: first.admission.closed, every=0)
    await publisher.publish(INBOUND, _message(key_tag, 2))  # for whoever reads next
    model.gate.set()
    await asyncio.wait_for(stopping, 20)
    await asyncio.wait_for(running, 5)  # the run loop ended by itself

    [reply] = await _replies(redis, key_tag, 1)
    assert (reply.reply_to_id, reply.text) == (f"{key_tag}-m1", "w1: message 1")
    assert await redis.get(keys.dedupe("console", f"{key_tag}-m1")) == "done"
    assert f"{key_tag}-m1" not in await _pending(redis, key_tag, "w1"), "answered, so acked"
    assert len(model.requests) == 1
    record = _drain_record(caplog)
    assert (record.finished, record.abandoned) == (1, 0)  # type: ignore[attr-defined]
    await first_bus.close()

    replies = await _next_worker(redis, key_tag, publisher)
    assert [(r.reply_to_id, r.text) for r in replies] == [
        (f"{key_tag}-m1", "w1: message 1"),
        (f"{key_tag}-m2", "w2: message 2"),
    ]


async def test_past_the_grace_a_turn_is_released_and_taken_over_at_once(
    redis: Redis, key_tag: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="chorus")
    publisher = _bus(redis, key_tag, "gateway")
    first_bus, stuck = _bus(redis, key_tag, "w1"), GatedModel("w1")  # never answers
    first = _router(redis, first_bus, stuck)
    running = asyncio.create_task(first.run())
    await publisher.publish(INBOUND, _message(key_tag, 1))
    await publisher.publish(INBOUND, _message(key_tag, 2))  # queued behind it
    await asyncio.wait_for(stuck.started.wait(), 20)
    claim = keys.dedupe("console", f"{key_tag}-m1")
    assert str(await redis.get(claim)).startswith("claimed:w1:")

    await asyncio.wait_for(first.shutdown(grace=0.2), 20)
    await asyncio.wait_for(running, 5)
    assert await redis.get(claim) is None, "the cancelled turn gave its claim back"
    assert await _pending(redis, key_tag, "w1") == {f"{key_tag}-m1": 1, f"{key_tag}-m2": 1}
    record = _drain_record(caplog)
    assert (record.finished, record.abandoned, record.returned) == (0, 1, 1)  # type: ignore[attr-defined]
    lease = keys.bus_lease(INBOUND, "agent", 0, key_tag)
    assert str(await redis.get(lease)).startswith("w1:"), "held until the bus closes"
    await first_bus.close()
    assert await redis.get(lease) is None
    # handed back: still pending, but the stop does not count as an attempt that failed
    assert await _pending(redis, key_tag, "w1") == {f"{key_tag}-m1": 0, f"{key_tag}-m2": 0}

    # (within 20 s: a takeover that waited for the 60 s claim lease could not make it)
    replies = await _next_worker(redis, key_tag, publisher)
    assert [(r.reply_to_id, r.text) for r in replies] == [
        (f"{key_tag}-m1", "w2: message 1"),
        (f"{key_tag}-m2", "w2: message 2"),
    ]
    assert "message claimed by another worker; waiting" not in caplog.messages


async def test_a_commit_in_progress_is_not_cut_by_the_shutdown(redis: Redis, key_tag: str) -> None:
    """The reply's publish and the commit are one shielded step: here the publish blocks (the
    in-process outbound topic is full) when the grace runs out, and the stop waits for it."""
    bus = InProcessBus(maxsize=1)
    outbound = outbound_topic("console")
    filler = Reply(conversation=_message(key_tag, 0).conversation, text="earlier reply")
    await bus.publish(outbound, filler)  # the topic is full: the next publish waits
    router = _router(redis, bus, GatedModel("solo", open_gate=True))
    running = asyncio.create_task(router.run())
    await bus.publish(INBOUND, _message(key_tag, 1))
    await until(
        lambda: bus.backlog().get((outbound, "")) == (1, 1), every=0
    )  # 1 queued, 1 publishing

    stopping = asyncio.create_task(router.shutdown(grace=0))
    await until(lambda: router.admission.closed, every=0)
    await asyncio.sleep(0.3)  # the turn is cancelled over and over meanwhile (every 0.1 s)
    assert not stopping.done(), "the stop waits for the commit in flight"
    replies = bus.consume(outbound, Reply, group="console")
    texts = []
    for _ in range(2):
        delivery = await asyncio.wait_for(anext(replies), 10)
        texts.append(delivery.event.text)
        await delivery.ack()
    await asyncio.wait_for(stopping, 10)
    await asyncio.gather(running, return_exceptions=True)

    assert texts == ["earlier reply", "solo: message 1"]
    assert await redis.get(keys.dedupe("console", f"{key_tag}-m1")) == "done"
    assert router.history is not None
    history = await router.history.load(_message(key_tag, 1).conversation)
    assert [e.role for e in history] == ["user", "assistant"]
    await asyncio.wait_for(bus.drain(), 5)  # the inbound delivery was acked too
    await bus.close()
