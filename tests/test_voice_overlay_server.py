"""The overlay's server (``bot.admin.overlay``) on a real Redis, read as the page reads it (SSE):
the page's queue holds at most ``CHORUS_TTS_QUEUE_MAX`` waiting items (the rest are dropped
before any provider is paid), and speech is paid for like model tokens: each item's estimated
cost lands in the day's spend the cost cap reads and in a ``spoken`` turn-log record, and once
the day's cap is reached only espeak-ng (free) speaks; a page that opens reads only what comes
next, and one that reconnects (``Last-Event-ID``) resumes after the last event it got, replaying
nothing. espeak-ng is a process: marked e2e."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from bot.admin.overlay import Overlay
from bot.events import ConversationKey
from bot.settings import Settings, settings_from
from bot.state import turnlog
from bot.state.cost import CostLedger, cost_day, micro
from bot.state.voice import OverlayKeys, VoiceQueue
from bot.voice.chain import SpeechChain, build_chain
from bot.voice.providers import TwinVoice, silence
from tests.loopback.speech_server import SpeechServer

pytestmark = pytest.mark.e2e

MARK = 42  # a volume event pushed last: everything before it was handled


@asynccontextmanager
async def client_for(
    redis: Redis, settings: Settings, chain: SpeechChain
) -> AsyncIterator[TestClient[web.Request, web.Application]]:
    app = web.Application()
    app.add_routes(Overlay(redis, lambda: settings, chain).routes())
    async with TestClient(TestServer(app)) as client:
        yield client


async def read_until_mark(
    http: TestClient[web.Request, web.Application], conv: ConversationKey, key: str, push: Any
) -> list[dict[str, Any]]:
    """Connect as the page, run ``push`` once connected, return the say events up to the mark."""
    said: list[dict[str, Any]] = []
    async with http.get(f"/overlay/{conv}/events?key={key}") as events:
        event, entry_id = "", ""
        async for raw in events.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("id: "):
                entry_id = line[4:]
            elif line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                if event == "volume" and data["volume"] == 100:
                    await push()
                elif event == "volume" and data["volume"] == MARK:
                    return said
                elif event == "say":
                    said.append(data | {"id": entry_id})
    raise AssertionError("the events ended")


def conv_of() -> ConversationKey:
    return ConversationKey(platform="twitch", channel=f"o{uuid.uuid4().hex[:10]}")


async def test_the_pages_queue_is_bounded_before_anything_is_paid(real_redis: Redis) -> None:
    conv = conv_of()
    key = await OverlayKeys(real_redis).get(conv)
    twin = TwinVoice(make=lambda text, voice: silence(5.0))
    chain = SpeechChain({"twin": twin}, [("twin", "v")])
    settings = settings_from({"CHORUS_VOICE": "true", "CHORUS_TTS_QUEUE_MAX": "2"})
    queue = VoiceQueue(real_redis)

    async def push() -> None:
        for n in range(6):
            item = {"kind": "cheer", "text": f"item {n}", "name": "Ada", "tts": ["twin:v"]}
            await queue.push(conv, item)
        await queue.push(conv, {"kind": "volume", "volume": MARK})

    async with client_for(real_redis, settings, chain) as http:
        said = await read_until_mark(http, conv, key, push)
    assert [s["text"] for s in said] == ["item 0", "item 1", "item 2"]  # one plays, two wait
    assert [text for text, _ in twin.calls] == ["item 0", "item 1", "item 2"]


async def test_speech_is_paid_into_the_cost_cap_and_a_reached_cap_speaks_locally(
    real_redis: Redis,
) -> None:
    conv = conv_of()
    key = await OverlayKeys(real_redis).get(conv)
    namespace = f"v{uuid.uuid4().hex[:8]}"
    queue = VoiceQueue(real_redis)
    async with SpeechServer() as speech:
        settings = settings_from(
            {
                "CHORUS_VOICE": "true",
                "CHORUS_TTS": "openai:alloy",
                "OPENAI_API_KEY": "k",
                "OPENAI_BASE_URL": f"{speech.url}/v1",
                "CHORUS_QUOTA_COST_USD_DAY": "0.5",
                "CHORUS_BUS_NAMESPACE": namespace,
            }
        )
        chain = build_chain(settings.voice, settings.llm)
        ledger = CostLedger(real_redis, namespace)
        text = "Ada cheered 500 bits: what a stream this is"

        async def first() -> None:
            await queue.push(conv, {"kind": "cheer", "text": text, "name": "Ada", "user_id": "a"})
            await queue.push(conv, {"kind": "volume", "volume": MARK})

        async def second() -> None:
            await queue.push(conv, {"kind": "cheer", "text": f"{text}!", "name": "Ada"})
            await queue.push(conv, {"kind": "volume", "volume": MARK})

        try:
            async with client_for(real_redis, settings, chain) as http:
                paid = await read_until_mark(http, conv, key, first)
                spent = (await ledger.today(datetime.now(UTC))).spent
                await ledger.settle(ledger.reservation("test", 0, datetime.now(UTC)), micro(1.0))
                free = await read_until_mark(http, conv, key, second)
        finally:
            await chain.aclose()
            day = ledger.keys(cost_day(datetime.now(UTC))[0])
            await real_redis.delete(*day)
    assert [s["provider"] for s in paid] == ["openai"]
    assert [s["provider"] for s in free] == ["espeak"]
    assert speech.texts == [("openai", text)]  # the provider was not asked past the cap
    records = [r for r in await turnlog.read_log(real_redis, conv) if r.decision == "spoken"]
    by_model = {r.model: r for r in records}
    openai = by_model["openai:gpt-4o-mini-tts"]
    assert openai.cost_usd == pytest.approx(15.0 * len(text) / 1_000_000)
    assert spent == micro(openai.cost_usd)
    assert openai.speech_chars == len(text) and openai.speech_ms > 0
    assert by_model["espeak"].cost_usd == 0


async def test_a_page_that_reconnects_resumes_after_its_last_event(real_redis: Redis) -> None:
    conv = conv_of()
    key = await OverlayKeys(real_redis).get(conv)
    twin = TwinVoice()
    chain = SpeechChain({"twin": twin}, [("twin", "v")])
    settings = settings_from({"CHORUS_VOICE": "true"})
    queue = VoiceQueue(real_redis)
    await queue.push(conv, {"kind": "cheer", "text": "before the page", "tts": ["twin:v"]})

    async def items(*texts: str) -> None:
        for text in texts:
            await queue.push(conv, {"kind": "cheer", "text": text, "tts": ["twin:v"]})
        await queue.push(conv, {"kind": "volume", "volume": MARK})

    async with client_for(real_redis, settings, chain) as http:
        first = await read_until_mark(http, conv, key, lambda: items("one", "two"))
        seen: list[tuple[str, str]] = []
        # The page's last event id: the mark's (every event the page got carries one).
        headers = {"Last-Event-ID": await queue.last_id(conv)}
        async with http.get(f"/overlay/{conv}/events?key={key}", headers=headers) as events:
            await items("three")
            event, last = "", ""
            async for raw in events.content:
                line = raw.decode().rstrip("\n")
                if line.startswith("id: "):
                    last = line[4:]
                elif line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: ") and event == "say":
                    seen.append((last, json.loads(line[6:])["text"]))
                elif line.startswith("data: ") and json.loads(line[6:]).get("volume") == MARK:
                    break
    assert [s["text"] for s in first] == ["one", "two"]  # a new page: only what comes next
    assert [text for _, text in seen] == ["three"]  # resumed after "two": nothing replayed
    assert seen[0][0] > first[-1]["id"]
