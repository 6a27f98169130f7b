"""Memory end to end: a fact a user states becomes a pin (through the real insights worker and
its structured-output call), the pin enriches that user's next prompt only, /forget removes it,
and with a real Redis it survives a restart. Real app, real SDK, loopback Anthropic server."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from bot.app import Chorus
from bot.bus.topics import INBOUND, outbound_topic
from bot.cli import _insights_worker
from bot.events import Author, ChatMessage, ConversationKey, Reply, Role, utcnow
from bot.settings import settings_from
from tests.loopback.anthropic_server import AnthropicServer

_OWN_LINE = re.compile(r'<line id="(L\d+)" from="[^"]*" own="yes">([^<]*)</line>')


def model(body: dict[str, Any]) -> Any:
    """Chat answers are plain; the insights call (structured output) proposes a pin for the
    subject's own line that states, in the first person, that they are vegan. (Provenance
    against a model that cites other people's lines is covered in tests/test_insights_*.)"""
    if "output_config" not in body:
        return "Sure."
    text = json.dumps(body["messages"])
    pins = [
        {
            "op": "add",
            "target": None,
            "text": "is vegan and lives in Lisbon",
            "source_line": label,
            "confidence": 0.9,
        }
        for label, line in _OWN_LINE.findall(text.replace('\\"', '"'))
        if line.startswith("I am vegan")
    ]
    return json.dumps({"pins": pins, "recommendations": []})


@pytest.fixture
async def server() -> AsyncIterator[AnthropicServer]:
    async with AnthropicServer() as srv:
        srv.default_reply = model
        yield srv


class Console:
    """A running app plus a console-like way to speak as any user and wait for the answer."""

    def __init__(self, app: Chorus, tag: str) -> None:
        self.app, self.tag = app, tag
        self.replies: dict[str, asyncio.Future[Reply]] = {}
        self.count = 0

    async def listen(self) -> None:
        async for delivery in self.app.bus.consume(outbound_topic("console"), Reply):
            future = self.replies.get(delivery.event.reply_to_id or "")
            if future and not future.done():
                future.set_result(delivery.event)
            await delivery.ack()

    async def say(self, user: str, text: str) -> Reply:
        self.count += 1
        msg_id = f"{self.tag}-{self.count}"
        self.replies[msg_id] = asyncio.get_running_loop().create_future()
        who = f"{user}-{self.tag}"
        await self.app.bus.publish(
            INBOUND,
            ChatMessage(
                platform="console",
                id=msg_id,
                conversation=ConversationKey(platform="console", channel=who),
                author=Author(id=who, display_name=user.title(), roles=frozenset({Role.OWNER})),
                text=text,
                is_direct=True,
            ),
        )
        return await asyncio.wait_for(self.replies[msg_id], timeout=30)


async def start(url: str, srv: AnthropicServer, tag: str) -> tuple[Console, asyncio.Task[None]]:
    settings = settings_from(
        {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": srv.base_url,
            "CHORUS_REDIS_URL": url,
            # A turn renews its claim every third of the lease while it runs: with a 10-minute
            # lease no renewal falls inside a turn counted here, however starved the CPU.
            "CHORUS_CLAIM_LEASE_MS": "600000",
        }
    )
    app = await Chorus.from_settings(settings)
    await app.start()
    console = Console(app, tag)
    return console, asyncio.create_task(console.listen())


async def stop(console: Console, listener: asyncio.Task[None]) -> None:
    await console.app.aclose()
    listener.cancel()
    await asyncio.gather(listener, return_exceptions=True)


async def run_insights(console: Console) -> None:
    worker, _ = _insights_worker(console.app.settings, console.app.redis, console.app.provider)
    later = utcnow() + timedelta(hours=1)
    while await worker.run_once(later):
        pass
    await worker.aclose()


def last_chat_prompt(srv: AnthropicServer) -> str:
    chats = [b for b in srv.bodies if "output_config" not in b]
    return json.dumps(chats[-1]["messages"][-1])


@pytest.mark.redis
async def test_a_users_fact_becomes_their_pin_and_only_theirs(
    redis_url: str, key_tag: str, server: AnthropicServer
) -> None:
    console, listener = await start(redis_url, server, key_tag)
    try:
        await console.say("ada", "I am vegan and I live in Lisbon.")
        await console.say("bob", "Ada is vegan, by the way. I like steak.")
        await run_insights(console)

        await console.say("ada", "Any dinner ideas in Lisbon tonight?")
        ada_prompt = last_chat_prompt(server)
        assert "is vegan and lives in Lisbon" in ada_prompt
        # The pin sits in the volatile tail: after the last cache point of the request.
        chats = [b for b in server.bodies if "output_config" not in b]
        blocks = chats[-1]["messages"][-1]["content"]
        assert "cache_control" not in blocks[-1] and "vegan" in blocks[-1]["text"]

        await console.say("bob", "Any dinner ideas in Lisbon tonight?")
        assert "vegan" not in last_chat_prompt(server)  # bob's own words never became his pin

        pins = await console.say("ada", "/pins")
        assert "vegan" in pins.text
    finally:
        await stop(console, listener)

    # A restart: with a real Redis (or the same named embedded store) the pin is still there.
    console, listener = await start(redis_url, server, key_tag)
    try:
        console.count = 100
        await console.say("ada", "Any dinner ideas in Lisbon tonight?")
        assert "is vegan and lives in Lisbon" in last_chat_prompt(server)

        confirm = await console.say("ada", "/forget")
        assert "forgot" in confirm.text.lower() or "deleted" in confirm.text.lower()
        await console.say("ada", "Any dinner ideas in Lisbon tonight?")
        assert "vegan" not in last_chat_prompt(server)
        assert "vegan" not in (await console.say("ada", "/pins")).text
        await run_insights(console)  # leaves no queued job behind in a shared Redis
    finally:
        await stop(console, listener)


@pytest.mark.redis
async def test_an_answered_message_costs_two_redis_round_trips(
    redis_url: str, key_tag: str, server: AnthropicServer
) -> None:
    """Budget (docs/architecture.md): <= 3 round trips per answered message, none added per tool-loop iteration.
    Chorus needs two: claim + history + memory read in one pipeline, then history + done +
    memory activity + insights job in one transaction."""
    from tests.roundtrips import counting_round_trips

    console, listener = await start(redis_url, server, key_tag)
    try:
        await console.say("ada", "warm-up")  # connections are made outside the measurement
        with counting_round_trips() as trips:
            await console.say("ada", "I am vegan and I live in Lisbon.")
        assert len(trips.turn) == 2, [w[:80] for w in trips.turn]
        server.replies.extend(
            [
                {"tool_calls": [{"id": "t1", "name": "current_time", "arguments": {}}]},
                {
                    "tool_calls": [
                        {
                            "id": "t2",
                            "name": "current_time",
                            "arguments": {"timezone": "Asia/Tokyo"},
                        }
                    ]
                },
                "It is late.",
            ]
        )
        with counting_round_trips() as trips:
            await console.say("ada", "What time is it, twice?")
        assert len(trips.turn) == 2, [w[:80] for w in trips.turn]  # three model calls, still two
    finally:
        await stop(console, listener)


@pytest.mark.redis
async def test_activity_is_recorded_at_most_once_a_minute_per_user_and_conversation(
    redis_url: str, key_tag: str, server: AnthropicServer
) -> None:
    """The five activity commands ride on the first answer and then once a minute: a user who
    keeps talking refreshes nothing more often than the TTLs (days) need."""
    from bot.state import keys

    console, listener = await start(redis_url, server, key_tag)
    seen = keys.user_conversations("console", f"ada-{key_tag}")
    try:
        await console.say("ada", "hello")
        assert await console.app.redis.exists(seen)
        await console.app.redis.delete(seen)
        await console.say("ada", "hello again")
        assert not await console.app.redis.exists(seen)  # recorded a moment ago: skipped
        later = console.app.router.stages.commit.clock() + 61
        console.app.router.stages.commit.clock = lambda: later
        await console.say("ada", "a minute later")
        assert await console.app.redis.exists(seen)
    finally:
        await stop(console, listener)
