"""``chorus run`` as a real process with Discord and Slack (HTTP Events API), each against its
loopback: one platform down, or feeding junk, never stops the other, and ``/readyz`` says which.

- Discord's gateway goes down for a while (the live connection dropped, new ones refused):
  ``/readyz`` answers 503 naming ``adapter:discord`` (Slack stays ok) while a Slack mention is
  still answered; once the gateway is back discord.py resumes by itself and ``/readyz`` is 200.
  Before adapters had ``ready()``, ``/readyz`` answered 200 all along.
- Mutated payloads (fields removed, nulled, retyped) pushed over the Discord gateway websocket
  and signed to the Slack endpoint: each is skipped with a log line (Slack: a 4xx or an ignored
  event, never a 500), the process stays up and the next valid message on each is answered.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.discord_rig import discord_env
from tests.discord_rig import mention as discord_mention
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.discord_server import CHANNEL_ID, DiscordServer, guild_create
from tests.loopback.slack_server import SlackServer
from tests.payload_fuzz import mutate
from tests.redis_server import free_port
from tests.slack_rig import BOT_TOKEN, SECRET, fixture, post_signed
from tests.slack_rig import mention as slack_mention
from tests.test_chat_e2e import ROOT, base_env, spawn_chorus

LIMIT = 90.0  # generous: a loaded 2-core machine, discord.py's random reconnect backoff


@dataclass
class Stack:
    proc: asyncio.subprocess.Process
    model: AnthropicServer
    discord: DiscordServer
    slack: SlackServer
    health: str
    events: str

    async def readyz(self) -> tuple[int, dict[str, Any]]:
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"{self.health}/readyz") as response,
        ):
            return response.status, await response.json()

    async def until_readyz(self, status: int) -> dict[str, Any]:
        async with asyncio.timeout(LIMIT):
            while True:
                got, body = await self.readyz()
                if got == status:
                    return body
                await asyncio.sleep(0.2)

    async def slack_answers(self, event_id: str, text: str) -> dict[str, Any]:
        """A signed mention to the Events endpoint; the post Slack receives in answer."""
        before = len(self.slack.posts)
        raw = json.dumps(slack_mention(event_id, text)).encode()
        status, _ = await post_signed(self.events, raw)
        assert status == 200
        await self.slack.wait_for(lambda: len(self.slack.posts) > before, limit=LIMIT)
        return self.slack.posts[before]

    async def discord_answers(self, message_id: int, text: str) -> dict[str, Any]:
        path = f"/channels/{CHANNEL_ID}/messages"
        before = len(self.discord.requests_to("POST", path))
        await self.discord.dispatch("MESSAGE_CREATE", discord_mention(message_id, text))
        await self.discord.wait_for(
            lambda: len(self.discord.requests_to("POST", path)) > before, limit=LIMIT
        )
        body: dict[str, Any] = self.discord.requests_to("POST", path)[before].body
        return body


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    health, slack_port = free_port(), free_port()
    async with (
        AnthropicServer() as model,
        DiscordServer() as discord,
        SlackServer(bot_token=BOT_TOKEN) as slack,
    ):
        discord.guilds = [guild_create()]
        model.default_reply = lambda body: "an answer"
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            **discord_env(discord),
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_API_BASE_URL": slack.api_url,
            "SLACK_HTTP_HOST": "127.0.0.1",
            "SLACK_HTTP_PORT": str(slack_port),
            "PYTHONPATH": str(ROOT),
            "CHORUS_HEALTH_PORT": str(health),
            "CHORUS_HEALTH_HOST": "127.0.0.1",
        }
        proc = await spawn_chorus(["run"], env, tmp_path)
        stack = Stack(
            proc,
            model,
            discord,
            slack,
            f"http://127.0.0.1:{health}",
            f"http://127.0.0.1:{slack_port}/slack/events",
        )
        err = b""
        try:
            await _until_listening(stack)
            yield stack
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()[-3000:]


async def _until_listening(stack: Stack) -> None:
    """Until the health server answers and both adapters are connected (``/readyz`` 200)."""
    async with asyncio.timeout(LIMIT):
        while True:
            assert stack.proc.returncode is None, "chorus run exited at start"
            try:
                await stack.until_readyz(200)
                return
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.2)


async def test_readyz_names_discord_while_its_gateway_is_down_and_slack_still_answers(
    stack: Stack,
) -> None:
    discord = stack.discord
    await discord.go_down()  # Discord's API down: the session dropped, reconnects refused
    body = await stack.until_readyz(503)
    assert body["failing"] == ["adapter:discord"], body
    assert body["checks"]["adapter:slack"] == "ok"
    post = await stack.slack_answers("EvDown1", "are you there while Discord is down?")
    assert post["text"] == "an answer"
    await discord.wait_for(lambda: discord.refused >= 1, limit=LIMIT)
    _, during = await stack.readyz()
    assert during["failing"] == ["adapter:discord"], during  # still down: refused and retrying
    discord.come_back()
    await stack.until_readyz(200)  # discord.py reconnected the shard by itself
    # a new session: resumed, or (discord.py's sharded client, once a resume was refused)
    # identified again; either way on a new connection, and the process never restarted
    assert discord.ops(6) or len(discord.ops(2)) >= 2, "no new session"
    assert (await stack.discord_answers(7301, "back?"))["content"] == "an answer"
    assert stack.proc.returncode is None


def _discord_junk() -> list[dict[str, Any]]:
    """Gateway payloads of the kinds that ended discord.py's read loop, and retyped ones."""
    message = discord_mention(7401, "junk")
    return [
        mutate(message, ("author",), "null"),
        mutate(message, ("author", "id"), "remove"),
        mutate(message, ("mentions",), "dict"),
        mutate(message, ("content",), "list"),
        mutate(message, ("id",), "null"),
        mutate(message, ("channel_id",), "dict"),
    ]


def _slack_junk() -> list[dict[str, Any]]:
    body = fixture("slack_app_mention")
    return [
        mutate(body, ("event",), "null"),
        mutate(body, ("event",), "list"),
        mutate(body, ("event", "text"), "dict"),
        mutate(body, ("event", "user"), "int"),
        mutate(body, ("event", "channel"), "remove"),
        mutate(body, ("type",), "int"),
        mutate(body, ("event_id",), "list"),
    ]


async def test_mutated_payloads_on_both_platforms_are_skipped_and_the_next_is_answered(
    stack: Stack,
) -> None:
    for junk in _discord_junk():
        await stack.discord.dispatch("MESSAGE_CREATE", junk)
        await stack.discord.dispatch("MESSAGE_DELETE", mutate(junk, ("id",), "null"))
    for body in _slack_junk():
        status, _ = await post_signed(stack.events, json.dumps(body).encode())
        assert status < 500, body
    assert (await stack.discord_answers(7402, "still up?"))["content"] == "an answer"
    assert (await stack.slack_answers("EvAfterJunk", "still up?"))["text"] == "an answer"
    assert stack.discord.connections == 1, "the gateway connection stayed up"
    status, body = await stack.readyz()
    assert status == 200, body
    assert stack.proc.returncode is None
