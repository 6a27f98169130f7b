"""A timer announcement on a real deployment: a ``chorus run --role gateway`` with the Twitch
adapter (real twitchio 3 against the loopback Twitch, ``TWITCH_STREAM_STATE=true``) and three
``chorus run --role worker`` on Redis Streams over a real Redis, the ``timers`` built-in enabled
by ``[plugins.timers]`` in the shared ``chorus.toml``: every 30 seconds (six of the plugin's
5-second ticks), if 3 lines were seen.

The stream goes live (EventSub ``stream.online``); two chat lines, then a real wait past the
period and three ticks more: nothing is posted. A third line: the announcement is posted
(through Helix), no sooner than the period after the stream went live, by one worker of the
three, once."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from pathlib import Path

import pytest

from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.twitch_server import TwitchServer
from tests.test_chat_e2e import spawn_chorus
from tests.test_live_pause_e2e import LIMIT, channel, line, subscribed
from tests.test_twitch_e2e import BOT_ID, BOT_LOGIN, CHAT
from tests.test_twitch_reconnect_e2e import twitch_env
from tests.test_worker_takeover_e2e import worker_env

pytestmark = pytest.mark.e2e
__all__ = ["channel"]  # the fixture: a Twitch channel of this test alone, cleaned up after

PERIOD = 30.0
ANNOUNCEMENT = "Follow the socials, and drink water!"
CONFIG = f"""
[plugins.timers]

[[plugins.timers.announcements]]
name = "socials"
every = "30s"
min_lines = 3
messages = ["{ANNOUNCEMENT}"]
"""


async def test_an_announcement_waits_for_its_lines_and_its_period_and_posts_once(
    tmp_path: Path, real_redis_url: str, key_tag: str, channel: tuple[str, str]
) -> None:
    channel_id, login = channel
    (tmp_path / "chorus.toml").write_text(CONFIG, encoding="utf-8")
    async with AnthropicServer() as model, TwitchServer() as twitch:
        twitch.add_user(BOT_ID, BOT_LOGIN)
        twitch.add_user(channel_id, login)
        twitch.grant(BOT_ID, "access-0", "refresh-0")
        common = worker_env(tmp_path, real_redis_url, key_tag, model.base_url)
        gateway_env = (
            common
            | twitch_env(twitch)
            | {
                "TWITCH_CHANNELS": login,
                "TWITCH_STREAM_STATE": "true",
            }
        )
        tag = uuid.uuid4().hex[:8]

        def posted() -> list[str]:
            return [str(s["message"]) for s in twitch.sent if s["message"] == ANNOUNCEMENT]

        async def chat(n: int) -> None:
            assert await twitch.notify(CHAT, line(channel, f"{tag}-{n}", f"gg {n}", f"73{n}"))

        gateway = await spawn_chorus(["run", "--role", "gateway"], gateway_env, tmp_path)
        workers = [await spawn_chorus(["run", "--role", "worker"], common, tmp_path) for _ in "abc"]
        try:
            await twitch.wait_until(lambda: subscribed(twitch) == 6, LIMIT)
            who = {"broadcaster_user_id": channel_id, "broadcaster_user_login": login}
            who |= {"broadcaster_user_name": login}
            live = who | {"id": f"9{tag}", "type": "live", "started_at": "2026-03-04T12:00:00Z"}
            went_live = time.monotonic()
            assert await twitch.notify("stream.online", live) == 1
            await chat(1)
            await chat(2)
            while time.monotonic() - went_live < PERIOD + 15:  # past the period: 2 lines only
                assert posted() == []
                await asyncio.sleep(1)
            await chat(3)
            await twitch.wait_until(lambda: bool(posted()), LIMIT)
            assert time.monotonic() - went_live >= PERIOD
            settle = time.monotonic()
            while time.monotonic() - settle < 15:  # three more ticks: nothing more
                assert posted() == [ANNOUNCEMENT]
                await asyncio.sleep(1)
        finally:
            for proc in (gateway, *workers):
                proc.send_signal(signal.SIGTERM)
            outcomes = [await asyncio.wait_for(p.communicate(), 60) for p in (gateway, *workers)]
        for proc, (_, err) in zip((gateway, *workers), outcomes, strict=True):
            assert proc.returncode == 0, err.decode()[-3000:]
        assert posted() == [ANNOUNCEMENT]  # once
        senders = [err.decode().count("plugin sent a message") for _, err in outcomes[1:]]
        assert sorted(senders) == [0, 0, 1], senders  # by one worker of the three
        assert model.requests == []
