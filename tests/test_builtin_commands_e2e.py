"""Custom commands on a real ``chorus run`` against the loopback Twitch (real twitchio 3, the
EventSub websocket and Helix), the Anthropic SDK against its loopback, state in a real Redis,
the ``commands`` built-in enabled by ``[plugins.commands]`` in ``chorus.toml``.

A moderator's ``!addcom !socials follow me at {channel}``, then a viewer's ``!socials`` is
answered with the text (through Helix's send-message endpoint) and the model server sees no
request at all; another viewer's ``!socials`` inside the cooldown gets nothing; a viewer's
``!addcom`` is refused. Lines are handled in the order Twitch delivers them only loosely (each
in the background), so "gets nothing" is read once a later line's answer arrived."""

from __future__ import annotations

import asyncio
import signal
import uuid
from pathlib import Path

import pytest

import prompts
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.twitch_server import TwitchServer
from tests.test_chat_e2e import base_env, spawn_chorus
from tests.test_live_pause_e2e import LIMIT, channel, line, replies_to, subscribed
from tests.test_twitch_e2e import BOT_ID, BOT_LOGIN, CHAT
from tests.test_twitch_reconnect_e2e import twitch_env

pytestmark = pytest.mark.e2e
__all__ = ["channel"]  # the fixture: a Twitch channel of this test alone, cleaned up after

MODERATOR, VIEWER, OTHER = "7200001", "7200002", "7200003"
MOD_BADGE = [{"set_id": "moderator", "id": "1", "info": ""}]


async def test_a_moderator_adds_a_command_a_viewer_runs_it_without_the_model(
    tmp_path: Path, real_redis_url: str, channel: tuple[str, str]
) -> None:
    channel_id, login = channel
    (tmp_path / "chorus.toml").write_text("[plugins.commands]\n", encoding="utf-8")
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
            "CHORUS_INSIGHTS_ENABLED": "false",
        }
        tag = uuid.uuid4().hex[:8]

        async def say(n: str, text: str, user: str, *, moderator: bool = False) -> str:
            msg_id = f"{tag}-{n}"
            event = line(channel, msg_id, text, user)
            event["badges"] = MOD_BADGE if moderator else []
            assert await twitch.notify(CHAT, event)
            return msg_id

        async def answer(msg_id: str) -> list[str]:
            await twitch.wait_until(lambda: bool(replies_to(twitch, msg_id)), LIMIT)
            return replies_to(twitch, msg_id)

        proc = await spawn_chorus(["run"], env, tmp_path)
        try:
            await twitch.wait_until(lambda: subscribed(twitch) == 4, LIMIT)
            add = await say(
                "add", "!addcom !socials follow me at {channel}", MODERATOR, moderator=True
            )
            assert await answer(add) == [
                prompts.render("plugins/commands/added", prefix="!", name="socials")
            ]
            first = await say("first", "!socials", VIEWER)
            assert await answer(first) == [f"follow me at {login}"]
            again = await say("again", "!socials", OTHER)  # inside the 30 s cooldown
            refused = await say("refused", "!addcom !free stuff", VIEWER)
            assert await answer(refused) == [prompts.render("plugins/commands/not_allowed")]
            listed = await say("list", "!commands", OTHER)
            assert await answer(listed) == [
                prompts.render("plugins/commands/list", commands="!socials")
            ]
            assert replies_to(twitch, again) == []
            free = await say("free", "!free", VIEWER)  # the refused command does not exist
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()[-3000:]
        assert replies_to(twitch, again) == [] and replies_to(twitch, free) == []
        assert model.requests == [], "no model call for a custom command"
        texts = [str(s["message"]) for s in twitch.sent]
        assert len(texts) == 4, texts
