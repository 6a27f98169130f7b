"""Live-chat benchmark: the shipped busy-chat trace replayed through the engagement policy
(`chorus replay bench/traces/busy_chat.jsonl`); a four-hour busy YouTube stream (generated from
the seed, ``make_trace.generate_youtube_busy``, and the busier ``generate_youtube_busier``) on the
default quota, read by the stream and by
polling; and raw ingest throughput: normalising a platform payload, deduplicating it and running
the policy, on one process. The policy runs as the router runs it, through ``LiveChat``
(``prepare`` awaited, then ``observe``) with its durable-state bookkeeping on the in-memory twin
store, so no Redis is involved."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from twitchio.models.eventsub_ import create_event_instance

from adapters.twitch.convert import BotIdentity, chat_message
from adapters.twitch.eventsub import RecentIds
from bench.traces.make_trace import generate_youtube_busier, generate_youtube_busy
from bot.engagement.policy import Engagement
from bot.engagement.replay import format_report, replay, replay_lines
from bot.engagement.turns import LiveChat, replay_options
from bot.settings import Settings
from bot.state.engagement import MemoryLiveStore

TRACE = Path(__file__).parent / "traces" / "busy_chat.jsonl"
FIXTURE = Path(__file__).parent.parent / "tests" / "fixtures" / "twitch"


def ingest_throughput(n: int = 100_000) -> float:
    """Messages per second through normalise (the EventSub notification parsed by twitchio,
    then ``convert.chat_message``) + dedupe (the adapter's bounded id cache, ``RecentIds``) +
    policy, one process."""
    return asyncio.run(_ingest(n))


async def _ingest(n: int) -> float:
    payload = json.loads((FIXTURE / "twitch_channel_chat_message.json").read_text())
    event = payload["payload"]["event"]
    bot = BotIdentity(id="999", login="chorus")
    recent = RecentIds(50_000)
    started = time.perf_counter()
    now = [started]
    live = LiveChat(Engagement(), clock=lambda: now[0], store=MemoryLiveStore())
    for i in range(n):
        event["message_id"] = f"m{i}"
        event["chatter_user_id"] = str(i % 500)
        event["message"]["text"] = f"chatting about the game {i % 37}"
        event["message"]["fragments"] = [
            {
                "type": "text",
                "text": event["message"]["text"],
                "cheermote": None,
                "emote": None,
                "mention": None,
            }
        ]
        parsed = create_event_instance("channel.chat.message", payload, http=None)
        message = chat_message(parsed, bot=bot)
        if message is None or not recent.first_time(message.id):
            continue
        now[0] = started + i / 1000
        await live.prepare(message)
        live.observe(message)
    return n / (time.perf_counter() - started)


def youtube_busy() -> list[str]:
    """The four-hour busy YouTube streams at default settings, streamed and polled."""
    lines: list[str] = []
    traces = [
        ("youtube_busy", "--youtube-busy", generate_youtube_busy),
        ("youtube_busier", "--youtube-busier", generate_youtube_busier),
    ]
    for name, flag, make in traces:
        rows = [json.dumps(row) for row in make()]
        lines += [
            f"## Live chat: a four-hour busy YouTube stream on the default quota (`{name}`)",
            "",
            f"Command: `python bench/traces/make_trace.py {flag} --out /tmp/{name}.jsonl"
            f" && chorus replay /tmp/{name}.jsonl` (and `--youtube-read poll`)",
            "",
        ]
        for reading in ("stream", "poll"):
            how = "the stream" if reading == "stream" else "polling"
            options = replay_options(Settings(), reading)  # the defaults, as `chorus replay` runs
            report = replay_lines(rows, name=f"{name}.jsonl, read by {how}", **options)
            lines += [format_report(report), ""]
    return lines


def main() -> list[str]:
    report = replay(TRACE, **replay_options(Settings()))
    lines = [
        "## Live chat: engagement policy on the shipped busy trace",
        "",
        "Command: `chorus replay bench/traces/busy_chat.jsonl`",
        "",
        format_report(report),
        "",
    ]
    lines += youtube_busy()
    rate = ingest_throughput()
    lines += [
        "## Live-chat ingest throughput (normalise + dedupe + policy, one process)",
        "",
        f"{rate:,.0f} messages/s (Twitch EventSub payloads, 500 chatters, one core)",
    ]
    return lines
