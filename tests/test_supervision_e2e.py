"""``chorus run`` as a real process with two platforms, one of which ends: the YouTube video's
live chat ends (``liveChatEnded``), and Discord must go on answering, the process must stay
up, and the YouTube adapter must come back by itself. Before supervision the process exited
with code 0 the moment the chat ended, taking Discord with it."""

from __future__ import annotations

import signal
from pathlib import Path

import aiohttp

from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.discord_server import (
    BOT_ID,
    CHANNEL_ID,
    DiscordServer,
    bot_mention,
    plain_message,
)
from tests.loopback.youtube_server import VIDEO_ID, YouTubeServer
from tests.redis_server import free_port
from tests.test_chat_e2e import ROOT, base_env, spawn_chorus, stopped


async def test_an_ended_youtube_chat_does_not_stop_discord(tmp_path: Path) -> None:
    port = free_port()
    async with AnthropicServer() as model, DiscordServer() as discord, YouTubeServer() as youtube:
        youtube.fail("list", 403, "liveChatEnded")  # the first read of the chat: it is over
        model.replies.append("Still here on Discord.")
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "DISCORD_TOKEN": "loopback-token-not-secret",
            "DISCORD_API_BASE_URL": discord.api_url,
            "DISCORD_GATEWAY_URL": discord.ws_url,
            "YOUTUBE_CLIENT_ID": youtube.client_id,
            "YOUTUBE_CLIENT_SECRET": youtube.client_secret,
            "YOUTUBE_REFRESH_TOKEN": youtube.refresh_token,
            "YOUTUBE_VIDEO_ID": VIDEO_ID,
            "YOUTUBE_API_BASE_URL": youtube.api_base,
            "GOOGLE_OAUTH_TOKEN_URL": youtube.token_url,
            "YOUTUBE_READ_MODE": "poll",  # no gRPC stand-in here: only the REST one
            "PYTHONPATH": str(ROOT),
            "CHORUS_HEALTH_PORT": str(port),
            "CHORUS_HEALTH_HOST": "127.0.0.1",
        }
        proc = await spawn_chorus(["run"], env, tmp_path)
        try:
            await discord.wait_for(lambda: bool(discord.ops(2)), limit=90)  # IDENTIFY
            # the chat ended, and a new adapter looked the video up again
            await youtube.wait_for(
                lambda: sum(r.path.endswith("/videos") for r in youtube.requests) >= 2, limit=90
            )
            assert proc.returncode is None, "the process ended with the YouTube chat"
            await discord.dispatch(
                "MESSAGE_CREATE",
                plain_message(4243, f"<@{BOT_ID}> are you there?", mentions=[bot_mention()]),
            )
            path = f"/channels/{CHANNEL_ID}/messages"
            await discord.wait_for(lambda: bool(discord.requests_to("POST", path)), limit=90)
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"http://127.0.0.1:{port}/metrics") as response,
            ):
                metrics = await response.text()
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = await stopped(proc)
        assert proc.returncode == 0, err.decode()[-3000:]
        (post,) = discord.requests_to("POST", path)
        assert post.body["content"] == "Still here on Discord."
        restarts = [
            line
            for line in metrics.splitlines()
            if line.startswith('chorus_adapter_restarts_total{platform="youtube"}')
        ]
        assert restarts and float(restarts[0].split()[-1]) >= 1.0, metrics[-2000:]
        assert 'chorus_adapter_up{platform="discord"} 1.0' in metrics
        assert b"adapter stopped; restarting" in err and b"liveChatEnded" in err
