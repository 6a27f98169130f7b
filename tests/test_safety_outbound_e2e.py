"""A blocked word in a model answer never reaches any platform: ``chorus run`` as a real process
with Discord, Slack, Twitch and YouTube configured at once (each platform's real SDK or client
against its loopback server), and ``chorus chat`` on the console, the model (the Anthropic SDK
against its loopback) answering with a word of ``CHORUS_MODERATION_WORDS``. Every platform
receives the safe line instead, through its own outbound path.

The streamer preset is on (``CHORUS_SAFETY_PRESET=streamer``): an answer with a link goes out on
Discord and Slack and is withheld on Twitch and YouTube, the preset's platforms, which shows that
each conversation's rules come from ``safety_for``."""

from __future__ import annotations

import asyncio
import copy
import json
import signal
from collections.abc import Callable, Sized
from functools import partial
from pathlib import Path
from typing import Any

import prompts
from tests.discord_rig import discord_env
from tests.discord_rig import mention as discord_mention
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.discord_server import CHANNEL_ID, DiscordServer, guild_create
from tests.loopback.slack_server import SlackServer
from tests.loopback.twitch_server import TwitchServer
from tests.loopback.youtube_grpc import YouTubeStreamServer
from tests.loopback.youtube_server import VIDEO_ID, YouTubeServer, text_item
from tests.redis_server import free_port
from tests.slack_rig import BOT_TOKEN, SECRET, post_signed
from tests.slack_rig import mention as slack_mention
from tests.test_chat_e2e import ROOT, base_env, run_chorus, spawn_chorus
from tests.test_twitch_e2e import BOT_ID, BOT_LOGIN, CHANNEL, CHANNEL_LOGIN
from tests.test_twitch_reconnect_e2e import mention as twitch_mention
from tests.test_twitch_reconnect_e2e import twitch_env

LIMIT = 90.0  # generous: a loaded 2-core machine; each wait ends as soon as its event happens
WORD = "zorblax"
ANSWERS = {
    "word": f"Sure thing: {WORD}!",
    "link": "Read it at example.com/guide, it helps.",
}
SAFE = prompts.render("safety/withheld")


def model_env(model: AnthropicServer) -> dict[str, str]:
    return {
        "CHORUS_MODEL": "anthropic:claude-test",
        "ANTHROPIC_API_KEY": "k",
        "ANTHROPIC_BASE_URL": model.base_url,
        "CHORUS_MODERATION_WORDS": WORD,
    }


def slack_event(n: int, text: str) -> bytes:
    body = slack_mention(f"EvSafety{n}", text)
    event = body["event"]
    event["ts"] = event["event_ts"] = f"1595926230.00{n:04d}"
    event["client_msg_id"] = f"safety-{n}"
    return json.dumps(body).encode()


async def test_a_blocked_word_in_an_answer_reaches_no_platform(tmp_path: Path) -> None:
    slack_port = free_port()
    phase = ["word"]
    async with (
        AnthropicServer() as model,
        DiscordServer() as discord,
        SlackServer(bot_token=BOT_TOKEN) as slack,
        TwitchServer() as twitch,
        YouTubeServer() as youtube,
    ):
        stream = await YouTubeStreamServer(youtube).start()
        model.default_reply = lambda body: ANSWERS[phase[0]]
        discord.guilds = [guild_create()]
        twitch.add_user(BOT_ID, BOT_LOGIN)
        twitch.add_user(CHANNEL, CHANNEL_LOGIN)
        twitch.grant(BOT_ID, "access-0", "refresh-0")
        env = base_env(tmp_path) | model_env(model) | discord_env(discord) | twitch_env(twitch)
        env |= {
            "CHORUS_SAFETY_PRESET": "streamer",
            "CHORUS_ENGAGE_CHANNEL_COOLDOWN_SECONDS": "0",
            "CHORUS_ENGAGE_USER_COOLDOWN_SECONDS": "0",
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_API_BASE_URL": slack.api_url,
            "SLACK_HTTP_HOST": "127.0.0.1",
            "SLACK_HTTP_PORT": str(slack_port),
            "YOUTUBE_CLIENT_ID": youtube.client_id,
            "YOUTUBE_CLIENT_SECRET": youtube.client_secret,
            "YOUTUBE_REFRESH_TOKEN": youtube.refresh_token,
            "YOUTUBE_VIDEO_ID": VIDEO_ID,
            "YOUTUBE_API_BASE_URL": youtube.api_base,
            "GOOGLE_OAUTH_TOKEN_URL": youtube.token_url,
            "YOUTUBE_GRPC_TARGET": stream.target,
            "YOUTUBE_GRPC_INSECURE": "true",
            "PYTHONPATH": str(ROOT),
        }
        proc = await spawn_chorus(["run"], env, tmp_path)
        events = f"http://127.0.0.1:{slack_port}/slack/events"
        discord_posts = f"/channels/{CHANNEL_ID}/messages"
        try:
            await discord.wait_for(lambda: bool(discord.ops(2)), limit=LIMIT)  # IDENTIFY
            await twitch.wait_until(lambda: len(twitch.subscriptions) == 3, LIMIT)
            await stream.wait_for(lambda: bool(stream.calls) and stream.calls[0].responses >= 1, 90)
            await _until_slack_listens(events)
            for n, name in enumerate(("word", "link"), start=1):
                phase[0] = name
                await discord.dispatch("MESSAGE_CREATE", discord_mention(9100 + n, "say it"))
                assert (await post_signed(events, slack_event(n, "say it")))[0] == 200
                assert await twitch.notify(*twitch_mention(f"tw-safety-{n}", n)) == 1
                stream.push(text_item(f"LCC.safety-{n}", "@Chorus say it?", name="Alice"))
                posts = partial(discord.requests_to, "POST", discord_posts)
                await discord.wait_for(at_least(n, posts), limit=LIMIT)
                await slack.wait_for(at_least(n, lambda: slack.posts), limit=LIMIT)
                await twitch.wait_until(at_least(n, lambda: twitch.sent), LIMIT)
                await youtube.wait_for(at_least(n, lambda: youtube.inserted), limit=LIMIT)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 60)
            await stream.close()
        assert proc.returncode == 0, err.decode()[-3000:]

    sent = {
        "discord": [r.body["content"] for r in discord.requests_to("POST", discord_posts)],
        "slack": [_slack_text(p) for p in slack.posts],
        "twitch": [str(s["message"]) for s in twitch.sent],
        "youtube": [b["snippet"]["textMessageDetails"]["messageText"] for b in youtube.inserted],
    }
    everything = json.dumps(
        [r.body for r in discord.requests + slack.requests + twitch.requests + youtube.requests]
    )
    assert WORD not in everything, "the blocked word reached a platform"
    for platform, texts in sent.items():
        assert len(texts) == 2 and SAFE in texts[0], (platform, texts)
    for platform in ("discord", "slack"):  # the standard preset: links are fine here
        assert "example.com/guide" in sent[platform][1], sent[platform]
    for platform in ("twitch", "youtube"):  # the streamer preset's platforms: no links
        assert SAFE in sent[platform][1] and "example.com" not in sent[platform][1]
    assert len(model.requests) == 8  # every message was answered by the model, then checked


async def test_the_console_prints_the_safe_line_instead(tmp_path: Path) -> None:
    async with AnthropicServer() as model:
        model.replies.extend([ANSWERS["word"], "you are a n1gger", "All good here."])
        env = base_env(tmp_path) | model_env(model)
        code, out, err = await run_chorus(["chat"], env, tmp_path, b"one\ntwo\nthree\n")
    assert code == 0, err
    assert out.splitlines() == [SAFE, SAFE, "All good here."]
    assert WORD not in out


def at_least(count: int, found: Callable[[], Sized]) -> Callable[[], bool]:
    return lambda: len(found()) >= count


def _slack_text(post: dict[str, Any]) -> str:
    found = copy.deepcopy(post)
    return str(found.get("text", "")) + json.dumps(found.get("blocks", []))


async def _until_slack_listens(url: str) -> None:
    """Until the Slack events endpoint answers (a signed, empty-event ping is refused, not lost)."""
    async with asyncio.timeout(LIMIT):
        while True:
            try:
                await post_signed(url, b"{}")
                return
            except OSError:
                await asyncio.sleep(0.2)


async def test_an_invalid_pattern_stops_the_start_naming_its_variable_and_pattern(
    tmp_path: Path,
) -> None:
    async with AnthropicServer() as model:
        env = base_env(tmp_path) | model_env(model)
        (tmp_path / "list.txt").write_text("spoiler\nre:(unclosed\n", encoding="utf-8")
        env["CHORUS_MODERATION_LIST_FILE"] = str(tmp_path / "list.txt")
        code, _, err = await run_chorus(["chat"], env, tmp_path, b"hi\n")
        assert code != 0 and "list.txt:2" in err and "'(unclosed'" in err, err
        env.pop("CHORUS_MODERATION_LIST_FILE")
        env["CHORUS_MODERATION_PATTERNS"] = "free[vbucks"
        code, _, err = await run_chorus(["chat"], env, tmp_path, b"hi\n")
        assert code != 0 and "CHORUS_MODERATION_PATTERNS" in err and "free[vbucks" in err, err
        assert model.requests == []
