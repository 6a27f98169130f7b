"""A pause survives a restart: ``chorus run`` as a real process with Twitch and a real Redis.

The streamer says ``!chorus pause``; the process is stopped (SIGTERM) and started again, as a
deploy or a crash-and-restart would. The new process has nothing in memory, yet it answers
neither a mention nor ambient chat until the streamer says ``!chorus resume``; then it speaks
again. Real twitchio 3 against the loopback Twitch, the router and policy wired by the
composition root, the Anthropic SDK against its loopback server, state in a real Redis.

Ordering makes "not answered" observable without waiting for nothing: a channel's messages are
decided in arrival order, so once the acknowledgement of ``!chorus resume`` is sent, every line
sent before it has been decided; ``/metrics`` then shows how each was decided.
"""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

import prompts
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.twitch_server import TwitchServer
from tests.redis_server import free_port
from tests.test_chat_e2e import base_env, spawn_chorus
from tests.test_twitch_e2e import BOT_ID, BOT_LOGIN, CHAT, chat_event
from tests.test_twitch_reconnect_e2e import answered, twitch_env

LIMIT = 90.0  # generous: a loaded 2-core machine; each wait ends as soon as its event happens
VIEWERS = ("7100001", "7100002", "7100003")


@pytest.fixture
def channel(real_redis_url: str) -> Iterator[tuple[str, str]]:
    """A broadcaster of this test alone (id, login); its keys are removed afterwards."""
    suffix = uuid.uuid4().int % 10**9
    channel_id, login = str(8_000_000_000 + suffix), f"streamer{suffix}"
    yield channel_id, login
    client = redis.Redis.from_url(real_redis_url)
    try:
        doomed = [k for p in (channel_id, login) for k in client.scan_iter(match=f"*{p}*")]
        if doomed:
            client.delete(*doomed)
    finally:
        client.close()


def line(
    channel: tuple[str, str], msg_id: str, text: str, user: str, *, mention: bool = False
) -> dict[str, Any]:
    """One chat message in the test's channel from ``user`` (the broadcaster, or a viewer)."""
    channel_id, login = channel
    event = chat_event(
        msg_id,
        f"@{BOT_LOGIN} {text}" if mention else text,
        broadcaster_user_id=channel_id,
        broadcaster_user_login=login,
        broadcaster_user_name=login,
        chatter_user_id=user,
        chatter_user_login=login if user == channel_id else f"fan{user}",
        chatter_user_name=login if user == channel_id else f"fan{user}",
    )
    if mention:
        event["message"]["fragments"] = [
            {
                "type": "mention",
                "text": f"@{BOT_LOGIN}",
                "cheermote": None,
                "emote": None,
                "mention": {"user_id": BOT_ID, "user_name": "MyBot", "user_login": BOT_LOGIN},
            },
            {"type": "text", "text": f" {text}", "cheermote": None, "emote": None, "mention": None},
        ]
    return event


def subscribed(twitch: TwitchServer) -> int:
    live = set(twitch.live_sessions())
    return sum(1 for s in twitch.subscriptions.values() if s.session_id in live)


def replies_to(twitch: TwitchServer, msg_id: str) -> list[str]:
    return [str(s["message"]) for s in twitch.sent if s.get("reply_parent_message_id") == msg_id]


async def decisions(port: int) -> dict[str, float]:
    """How the policy decided Twitch lines so far (``chorus_engagement_decisions_total``)."""
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        body = await response.text()
    return {
        sample.labels["decision"]: sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
        if sample.name == "chorus_engagement_decisions_total"
        and sample.labels["platform"] == "twitch"
    }


async def test_a_pause_survives_a_restart_until_the_streamer_resumes(
    tmp_path: Path, real_redis_url: str, channel: tuple[str, str]
) -> None:
    channel_id, login = channel
    port = free_port()
    async with AnthropicServer() as model, TwitchServer() as twitch:
        twitch.add_user(BOT_ID, BOT_LOGIN)
        twitch.add_user(channel_id, login)
        twitch.grant(BOT_ID, "access-0", "refresh-0")
        env = base_env(tmp_path) | twitch_env(twitch)
        env |= {
            "TWITCH_CHANNELS": login,
            "CHORUS_REDIS_URL": real_redis_url,
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "CHORUS_HEALTH_HOST": "127.0.0.1",
            "CHORUS_HEALTH_PORT": str(port),
            # ambient chat is answered in a batch as soon as two lines wait (unless paused)
            "CHORUS_ENGAGE_MIN_PENDING": "2",
            "CHORUS_ENGAGE_MIN_GAP_SECONDS": "0",
            "CHORUS_ENGAGE_CHANNEL_COOLDOWN_SECONDS": "0",
        }
        tag = uuid.uuid4().hex[:8]

        async def say(msg: str, text: str, user: str, *, mention: bool = False) -> str:
            msg_id = f"{tag}-{msg}"
            assert await twitch.notify(CHAT, line(channel, msg_id, text, user, mention=mention))
            return msg_id

        async def run_until_stopped(steps: Any) -> None:
            proc = await spawn_chorus(["run"], env, tmp_path)
            try:
                await twitch.wait_until(lambda: subscribed(twitch) == 4, LIMIT)
                await steps()
            finally:
                proc.send_signal(signal.SIGTERM)
                _, err = await asyncio.wait_for(proc.communicate(), 60)
            assert proc.returncode == 0, err.decode()[-3000:]

        async def first_run() -> None:
            pause = await say("pause", "!chorus pause", channel_id)
            await twitch.wait_until(lambda: bool(replies_to(twitch, pause)), LIMIT)
            assert replies_to(twitch, pause) == [prompts.render("live/pause_ack")]

        paused_lines: list[str] = []

        async def after_restart() -> None:
            for i, viewer in enumerate(VIEWERS):
                paused_lines.append(await say(f"chat{i}", f"what a play {i}", viewer))
            paused_lines.append(await say("ask", "are you there?", VIEWERS[0], mention=True))
            resume = await say("resume", "!chorus resume", channel_id)
            await twitch.wait_until(lambda: bool(replies_to(twitch, resume)), LIMIT)
            # every line before the resume was decided, in order: ignored, none queued
            assert not any(replies_to(twitch, m) for m in paused_lines)
            seen = await decisions(port)
            assert seen.get("ignore") == len(paused_lines) and "queue" not in seen, seen
            assert "answer_now" not in seen, seen

            asked = await say("ask2", "and now?", VIEWERS[1], mention=True)
            await twitch.wait_until(lambda: bool(replies_to(twitch, asked)), LIMIT)
            # two chatters outside any cooldown (the one just answered waits 10 s): one batch
            chatter = [await say(f"more{i}", f"gg {i}", v) for i, v in enumerate(VIEWERS[::2])]
            await twitch.wait_until(lambda: bool(replies_to(twitch, chatter[-1])), LIMIT)

        await run_until_stopped(first_run)
        await run_until_stopped(after_restart)
        counts = answered(twitch)
        assert all(counts[m] == 0 for m in paused_lines)
        assert sum(counts.values()) == 4  # pause ack, resume ack, the mention, one batch
