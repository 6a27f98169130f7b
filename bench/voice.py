"""The stream overlay's voice: from the model's first complete sentence to the overlay's audio,
and what speech costs per message when no overlay is connected.

Latency: the real worker side (``Speaker`` and its ``SpeechSink``, fed an answer as a model
streams it), the real dashboard server with the overlay's routes (``AdminServer``) on a real
Redis, OpenAI's SDK against the loopback speech server answering after a fixed
``PROVIDER_DELAY``, and an SSE client standing in for the page: it reads the overlay's events
and fetches each item's audio, as the page's ``<audio>`` does before it plays. Measured per
answer: from the moment the delta completing the first sentence reaches the sink to the moment
the client holds that sentence's whole audio (the page can start playing), minus the provider's
own delay. Each answer's text is new, so no audio comes from the cache.

Idle: with speech on but no overlay connected, ``IDLE_MESSAGES`` answers (three sentences each,
streamed) and as many cheers go through the speaker: Redis round trips (counted at the
connection) and speech provider calls per message.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import uuid

import aiohttp

from bench.memory import REAL
from bot.admin.server import AdminServer
from bot.admin.views import Sources
from bot.events import Author, ChatMessage, ConversationKey, StreamEvent, StreamEventKind
from bot.memory.buffers import MemoryStore
from bot.safety.audit import Audit
from bot.settings import settings_from
from bot.state import connect
from bot.state.history import HistoryStore
from bot.state.voice import OverlayKeys, VoiceQueue
from bot.voice.speaker import Speaker
from tests.loopback.speech_server import SpeechServer
from tests.roundtrips import counting_round_trips

PROVIDER_DELAY = 0.3
ANSWERS = 15
IDLE_MESSAGES = 500
TOKEN = "bench-admin-token-0123456789"


def _message(
    conv: ConversationKey, n: int, text: str = "@bot hi", event: StreamEvent | None = None
) -> ChatMessage:
    return ChatMessage(
        platform=conv.platform,
        id=f"bench-{n}",
        conversation=conv,
        author=Author(id=f"u{n % 7}", display_name=f"Viewer{n % 7}"),
        text=text,
        stream_event=event,
    )


async def _first_audio(base: str, path: str, key: str, ready: asyncio.Event) -> float:
    """Read the overlay's events until the first item, fetch its audio; when that was done."""
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{base}{path}/events?key={key}") as events,
    ):
        event = ""
        async for raw in events.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event == "volume":
                ready.set()  # connected: the channel is watched
            elif line.startswith("data: ") and event == "say":
                audio = json.loads(line[6:])["audio"]
                async with http.get(f"{base}{audio}") as got:
                    await got.read()
                return time.perf_counter()
    raise RuntimeError("the events ended")


async def latency(redis: connect.Client, speech: SpeechServer) -> list[float]:
    settings = settings_from(
        {
            "CHORUS_VOICE": "true",
            "CHORUS_TTS": "openai:alloy",
            "OPENAI_API_KEY": "bench",
            "OPENAI_BASE_URL": f"{speech.url}/v1",
        }
    )
    sources = Sources(
        settings=settings,
        redis=redis,
        memory=MemoryStore(redis),
        history=HistoryStore(redis, max_messages=20, ttl_seconds=3600),
        audit=Audit(redis),
    )
    server = AdminServer(sources, TOKEN, "127.0.0.1", 0)
    await server.start()
    speaker = Speaker(VoiceQueue(redis), lambda: settings, check=lambda m, t: t)
    overheads = []
    try:
        for n in range(ANSWERS + 1):  # the first warms the connections up, not counted
            conv = ConversationKey(platform="twitch", channel=f"bench-voice-{uuid.uuid4().hex}")
            key = await OverlayKeys(redis).get(conv)
            ready = asyncio.Event()
            client = asyncio.create_task(_first_audio(server.url, f"/overlay/{conv}", key, ready))
            await ready.wait()
            sink = speaker.open(_message(conv, n))
            assert sink is not None
            await sink.text(f"Answer number {n} starts")
            started = time.perf_counter()
            await sink.text(" here. And then")  # the first sentence is complete
            done = await client
            await sink.text(" it goes on.")
            await sink.finish(f"Answer number {n} starts here. And then it goes on.")
            if n:
                overheads.append(done - started - PROVIDER_DELAY)
            doomed = [k async for k in redis.scan_iter(match=f"*{conv.channel}*")]
            await redis.delete(*doomed)
    finally:
        await server.aclose()
    return overheads


async def idle(redis: connect.Client) -> tuple[float, int]:
    settings = settings_from({"CHORUS_VOICE": "true", "CHORUS_TTS": "openai:alloy"})
    speaker = Speaker(VoiceQueue(redis), lambda: settings, check=lambda m, t: t)
    conv = ConversationKey(platform="twitch", channel=f"bench-idle-{uuid.uuid4().hex}")
    with counting_round_trips() as trips:
        for n in range(IDLE_MESSAGES):
            sink = speaker.open(_message(conv, n))
            assert sink is not None
            for delta in ("First one. ", "Second one. ", "Third"):
                await sink.text(delta)
            await sink.finish("First one. Second one. Third")
            cheer = StreamEvent(kind=StreamEventKind.CHEER, user_name="Ada", bits=500)
            await speaker.event(_message(conv, n, "Cheer500 hi", cheer))
    return trips.count / (2 * IDLE_MESSAGES), speaker.queued


async def main() -> list[str]:
    redis = await connect.open_redis(REAL)
    try:
        async with SpeechServer(delay=PROVIDER_DELAY) as speech:
            overheads = await latency(redis, speech)
            calls = len(speech.texts)
            per_message, queued = await idle(redis)
            idle_calls = len(speech.texts) - calls
    finally:
        await redis.aclose()
    ms = sorted(o * 1000 for o in overheads)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return [
        "## Voice: the stream overlay",
        "",
        f"{ANSWERS} answers streamed into the real speaker, the dashboard's overlay server on "
        f"Redis 127.0.0.1, OpenAI's SDK against the loopback speech server answering after "
        f"{PROVIDER_DELAY * 1000:.0f} ms, an SSE client fetching each item's audio as the page "
        "does. From the first complete sentence to its audio in the client, minus the provider's "
        "delay:",
        "",
        "| median | p95 | max | target |",
        "|---|---|---|---|",
        f"| {statistics.median(ms):.0f} ms | {p95:.0f} ms | {ms[-1]:.0f} ms | <= 1000 ms |",
        "",
        f"No overlay connected: {IDLE_MESSAGES} streamed answers and {IDLE_MESSAGES} cheers with "
        f"speech on: {per_message:.4f} Redis round trips per message (the channel's controls, "
        f"read once a second), {queued} items queued, {idle_calls} speech provider calls.",
    ]


if __name__ == "__main__":
    from bot.ops import aio

    for line in aio.run(main()):
        print(line)
