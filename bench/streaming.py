"""Time to first visible text, streamed and not, on the console, Discord and Slack.

The model is the loopback Anthropic server writing a 40-word answer in 40 chunks 100 ms apart
(4 s in all; unstreamed, it answers whole after the same 4 s). Each run is the real app (router,
agent, the Anthropic SDK) with the platform's real adapter against its loopback stand-in
(discord.py for Discord, bolt and slack-sdk over the HTTP Events API for Slack, the console
adapter rendering to a terminal stand-in). "First visible" is when the platform received the
first call that shows text (Discord: the message create; Slack: ``chat.startStream``; console:
the first draft rendered), measured from the model's first chunk (or, unstreamed, from when that
chunk would have come). The calls per answer and the busiest window are counted at the
stand-ins: Discord at most 5 message calls per 5 s per channel, Slack each method within its
tier per minute and one post a second per channel.
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from adapters.console import ConsoleAdapter
from adapters.console_tty import Terminal
from adapters.discord.adapter import DiscordAdapter
from adapters.slack.adapter import SlackAdapter
from bot.app import Chorus
from bot.events import ReplyDraft
from bot.settings import settings_from
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.discord_server import (
    BOT_ID,
    CHANNEL_ID,
    DiscordServer,
    bot_mention,
    guild_create,
    plain_message,
)
from tests.loopback.slack_server import SlackServer
from tests.redis_server import free_port
from tests.slack_rig import BOT_TOKEN, SECRET, mention, post_signed

WORDS, DELAY = 40, 0.1
ANSWER = " ".join(f"word{i}" for i in range(WORDS))


@dataclass
class Run:
    platform: str
    streamed: bool
    first_visible_s: float  # after the model's first chunk
    calls: int
    busiest: str


def _settings(model: AnthropicServer, streamed: bool, **extra: str) -> dict[str, str]:
    return {
        "CHORUS_MODEL": "anthropic:claude-test",
        "ANTHROPIC_API_KEY": "bench",
        "ANTHROPIC_BASE_URL": model.base_url,
        "CHORUS_REDIS_URL": "memory://",
        "CHORUS_INSIGHTS_ENABLED": "false",
        "CHORUS_STREAM_REPLIES": "on" if streamed else "off",
        **extra,
    }


def _first_chunk(model: AnthropicServer, streamed: bool) -> float:
    return model.chunk_times[0] if streamed else model.arrivals[0] + DELAY


async def _until(predicate: Callable[[], bool], limit: float = 30.0) -> None:
    async with asyncio.timeout(limit):
        while True:
            if predicate():
                return
            await asyncio.sleep(0.01)  # a sampling interval of the stand-ins' records


async def _discord(streamed: bool) -> Run:
    async with AnthropicServer() as model, DiscordServer() as server:
        server.guilds = [guild_create()]
        model.replies.append({"text": ANSWER, "chunk_delay": DELAY})
        env = _settings(model, streamed)
        env |= {"DISCORD_TOKEN": "bench", "DISCORD_API_BASE_URL": server.api_url}
        env |= {"DISCORD_GATEWAY_URL": server.ws_url}
        settings = settings_from(env)
        async with await Chorus.from_settings(settings) as app:
            adapter = DiscordAdapter(app.ingress_bus, settings.discord)
            task = asyncio.create_task(adapter.run())
            try:
                await server.wait_op(2)
                text = f"<@{BOT_ID}> go"
                await server.dispatch(
                    "MESSAGE_CREATE",
                    plain_message(7001 + streamed, text, mentions=[bot_mention()]),
                )
                await _until(lambda: bool(server.channel_messages(CHANNEL_ID)))
                await _until(
                    lambda: [m["content"] for m in server.channel_messages(CHANNEL_ID)] == [ANSWER]
                )
            finally:
                await adapter.aclose()
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
    times = sorted(t for t, _, channel in server.message_calls if channel == str(CHANNEL_ID))
    busiest = max(sum(1 for u in times if t <= u < t + 5) for t in times)
    first = times[0] - _first_chunk(model, streamed)
    return Run("discord", streamed, first, len(times), f"{busiest} in 5 s (limit 5)")


async def _slack(streamed: bool) -> Run:
    port = free_port()
    async with AnthropicServer() as model, SlackServer(bot_token=BOT_TOKEN) as server:
        model.replies.append({"text": ANSWER, "chunk_delay": DELAY})
        env = _settings(model, streamed, SLACK_BOT_TOKEN=BOT_TOKEN, SLACK_SIGNING_SECRET=SECRET)
        env |= {"SLACK_API_BASE_URL": server.api_url, "SLACK_HTTP_HOST": "127.0.0.1"}
        env |= {"SLACK_HTTP_PORT": str(port)}
        settings = settings_from(env)
        async with await Chorus.from_settings(settings) as app:
            adapter = SlackAdapter(app.ingress_bus, settings.slack)
            await adapter.start()
            try:
                event = mention(f"EvBench{int(streamed)}", "go")  # (one process: new ids each)
                event["event"]["ts"] = f"1595926230.00960{int(streamed)}"
                raw = json.dumps(event).encode()
                await post_signed(f"http://127.0.0.1:{port}/slack/events", raw)
                await _until(lambda: any(server.thread_texts("C111")))
                await _until(lambda: server.thread_texts("C111") == [ANSWER])
            finally:
                await adapter.aclose()
    calls = [(t, m) for t, m in server.method_calls if m != "auth.test"]
    shows = [t for t, m in calls if m in ("chat.startStream", "chat.postMessage")]
    per_method: dict[str, int] = {}
    for _, method in calls:
        per_method[method] = per_method.get(method, 0) + 1
    busiest = ", ".join(f"{m} {n}" for m, n in sorted(per_method.items())) + " (whole answer)"
    first = shows[0] - _first_chunk(model, streamed)
    return Run("slack", streamed, first, len(calls), busiest)


class _Stopwatch(Terminal):
    """The terminal UI rendering to memory, noting when text first shows."""

    first: float | None = None

    def draft(self, draft: ReplyDraft) -> None:
        if self.first is None and draft.text.strip():
            self.first = time.monotonic()
        super().draft(draft)

    def answer(self, text: str, *, error: bool = False) -> None:
        if self.first is None:
            self.first = time.monotonic()
        super().answer(text, error=error)


async def _console(streamed: bool) -> Run:
    async with AnthropicServer() as model:
        model.replies.append({"text": ANSWER, "chunk_delay": DELAY})
        settings = settings_from(_settings(model, streamed))
        screen = _Stopwatch(bot_name="Chorus", model="bench", user="ada", output=io.StringIO())
        async with await Chorus.from_settings(settings) as app:
            console = ConsoleAdapter(
                app.bus, stdin=io.BytesIO(), stdout=io.StringIO(), terminal=screen
            )
            try:
                await console.ask("go")
            finally:
                await console.aclose()
    assert screen.first is not None
    first = screen.first - _first_chunk(model, streamed)
    return Run("console", streamed, first, 0, "(no API)")


async def main() -> list[str]:
    runs = []
    for measure in (_console, _discord, _slack):
        for streamed in (True, False):
            runs.append(await measure(streamed))
    lines = [
        "## Streaming: time to first visible text",
        "",
        f"A loopback model writing {WORDS} chunks {DELAY * 1000:.0f} ms apart "
        f"({WORDS * DELAY:.0f} s in all); first visible text after its first chunk.",
        "",
        "| platform | streamed | first text after the first chunk | API calls | busiest window |",
        "|---|---|---|---|---|",
    ]
    for run in runs:
        lines.append(
            f"| {run.platform} | {'yes' if run.streamed else 'no'} | "
            f"{run.first_visible_s:.2f} s | {run.calls or '-'} | {run.busiest} |"
        )
    return lines


if __name__ == "__main__":
    print("\n".join(asyncio.run(main())))
