"""SIGTERM to ``chorus chat`` or ``chorus run`` while it answers: the answer in progress still
reaches the user, then the process exits 0; a second SIGTERM ends the grace at once (docs/operations.md,
"Stopping and backpressure").

Real parts: ``chorus chat`` and ``chorus run`` as processes (the in-process bus and store; the
console adapter, or real discord.py against the loopback Discord gateway and REST), the
official Anthropic SDK against a loopback server here that holds each answer until the test
lets it go, so the answer is provably in progress when the signal arrives. Waiting is on
the server's events and the process's own log lines; the one bound (the second test's 60 s
against a 120 s grace) measures that the second signal, not the grace, ended the wait.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.discord_server import (
    BOT_ID,
    CHANNEL_ID,
    DiscordServer,
    bot_mention,
    plain_message,
    rate_limited,
)
from tests.test_chat_e2e import ROOT, base_env, spawn_chorus


class HeldAnthropic(AnthropicServer):
    """Holds every answer until ``release`` is set; ``asked`` is set when one is waiting."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = asyncio.Event()
        self.release = asyncio.Event()

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        self.asked.set()
        await self.release.wait()
        return await super()._messages(request)


@pytest.fixture
async def model() -> AsyncIterator[HeldAnthropic]:
    async with HeldAnthropic() as server:
        server.default_reply = lambda body: "the answer"
        try:
            yield server
        finally:
            server.release.set()  # nothing hangs on a held request at teardown


async def _chat_asked(
    model: HeldAnthropic, tmp_path: Path, **settings: str
) -> asyncio.subprocess.Process:
    """``chorus chat`` with one line sent and its model call under way."""
    env = base_env(tmp_path)
    env.update(
        CHORUS_MODEL="anthropic:claude-test",
        ANTHROPIC_API_KEY="test-key-0123456789",
        ANTHROPIC_BASE_URL=model.base_url,
        CHORUS_INSIGHTS_ENABLED="false",
        CHORUS_LOG_LEVEL="INFO",
        **settings,
    )
    proc = await spawn_chorus(["chat"], env, ROOT, stdin=asyncio.subprocess.PIPE)
    assert proc.stdin is not None
    proc.stdin.write(b"hello\n")  # stdin stays open: the console would wait for more
    await proc.stdin.drain()
    await asyncio.wait_for(model.asked.wait(), 60)
    return proc


async def _stderr_until(proc: asyncio.subprocess.Process, text: str) -> str:
    """stderr read line by line up to the first line containing ``text``."""
    assert proc.stderr is not None
    seen = ""
    while text not in seen:
        line = await proc.stderr.readline()
        assert line, f"stderr ended before {text!r}:\n{seen}"
        seen += line.decode(errors="replace")
    return seen


async def test_sigterm_lets_the_answer_in_progress_arrive_then_exits_0(
    model: HeldAnthropic, tmp_path: Path
) -> None:
    proc = await _chat_asked(model, tmp_path)
    proc.send_signal(signal.SIGTERM)
    before = await asyncio.wait_for(_stderr_until(proc, "shutting down"), 30)
    model.release.set()  # the answer comes only now, after the signal
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    logs = before + err.decode(errors="replace")
    assert proc.returncode == 0, logs
    assert out.decode().splitlines() == ["the answer"]
    assert "finished=1 abandoned=0" in logs, logs


async def test_a_second_sigterm_ends_the_grace_at_once(
    model: HeldAnthropic, tmp_path: Path
) -> None:
    proc = await _chat_asked(model, tmp_path, CHORUS_SHUTDOWN_GRACE="120")
    proc.send_signal(signal.SIGTERM)
    before = await asyncio.wait_for(_stderr_until(proc, "shutting down"), 30)
    proc.send_signal(signal.SIGTERM)
    out, err = await asyncio.wait_for(proc.communicate(), 60)  # not the 120 s grace
    logs = before + err.decode(errors="replace")
    assert proc.returncode == 0, logs
    assert out.decode() == ""  # the answer never came
    assert "second signal" in logs
    assert "finished=0 abandoned=1" in logs, logs


async def test_chorus_run_posts_the_answer_in_progress_to_discord_before_it_exits(
    model: HeldAnthropic, tmp_path: Path
) -> None:
    """One process, the in-process bus: the turn finishes within the grace, and the Discord
    adapter, though its first POST is rate limited for a second, sends the reply before it is
    closed (the stop waits for the replies the drain produced)."""
    async with DiscordServer() as discord:
        discord.failures.append(rate_limited(1.0))
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "DISCORD_TOKEN": "loopback-token-not-secret",
            "DISCORD_API_BASE_URL": discord.api_url,
            "DISCORD_GATEWAY_URL": discord.ws_url,
            "CHORUS_INSIGHTS_ENABLED": "false",
            "CHORUS_LOG_LEVEL": "INFO",
        }
        proc = await spawn_chorus(["run"], env, tmp_path)
        try:
            await discord.wait_for(lambda: bool(discord.ops(2)), limit=90)  # IDENTIFY
            await discord.dispatch(
                "MESSAGE_CREATE",
                plain_message(4243, f"<@{BOT_ID}> still there?", mentions=[bot_mention()]),
            )
            await asyncio.wait_for(model.asked.wait(), 60)
            proc.send_signal(signal.SIGTERM)
            before = await asyncio.wait_for(_stderr_until(proc, "shutting down"), 30)
            model.release.set()
            _, err = await asyncio.wait_for(proc.communicate(), 60)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        logs = before + err.decode(errors="replace")
        assert proc.returncode == 0, logs[-3000:]
        limited, post = discord.requests_to("POST", f"/channels/{CHANNEL_ID}/messages")
        assert limited.body == post.body and post.body["content"].startswith("the answer")
        assert "finished=1 abandoned=0" in logs
