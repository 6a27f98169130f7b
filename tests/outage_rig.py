"""What the real-process Redis outage tests share (``test_redis_outage``, ``test_outbox_e2e``):
a private ``redis-server`` that can be killed and restarted, the chorus processes of a
deployment (``Fleet``: one health port and log file each), a gateway on Slack's HTTP Events
API and events signed as Slack signs them, and the environment every process gets.

Why a module of its own: the outage tests run the same deployment under different failures
(Redis killed under load; the gateway stopped while Redis is down), and the rig is the larger
part of each.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from bot.bus.streams_ops import unacked
from bot.bus.topics import INBOUND, outbound_topic
from bot.state import keys
from bot.state.client import Redis
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.slack_server import SlackServer
from tests.redis_server import free_port

ROOT = Path(__file__).resolve().parent.parent
CHORUS = Path(sys.executable).with_name("chorus")
AOF = ("--appendonly", "yes", "--appendfsync", "always")  # as deploy/compose.yaml runs Redis
SLACK_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
SLACK_TOKEN = "xoxb-test-token"


def redis_binary() -> str:
    """The ``redis-server`` to start privately; skips without one (fails under ``CI=true``)."""
    binary = shutil.which("redis-server")
    if binary is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true requires redis-server for the outage tests", pytrace=False)
        pytest.skip("redis-server is not installed: cannot stop and restart a private Redis")
    return binary


def chorus_env(url: str, tag: str, model_url: str, spool: Path) -> dict[str, str]:
    """Every process's settings: one Redis and bus namespace, the loopback Anthropic model,
    health on loopback, insights out of process, and the gateway's spool under the test."""
    return {
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith(
                ("CHORUS_", "ANTHROPIC_", "SLACK_", "DISCORD_", "TWITCH_", "YOUTUBE_")
            )
        },
        "CHORUS_REDIS_URL": url,
        "CHORUS_BUS": "redis",
        "CHORUS_BUS_NAMESPACE": tag,
        "CHORUS_MODEL": "anthropic:claude-test",
        "ANTHROPIC_API_KEY": "test-key",
        "ANTHROPIC_BASE_URL": model_url,
        "CHORUS_HEALTH_HOST": "127.0.0.1",
        "CHORUS_INSIGHTS_IN_PROCESS": "false",
        "CHORUS_INSIGHTS_DEBOUNCE": "0.5",
        "CHORUS_INSIGHTS_POLL": "0.5",
        "CHORUS_BLOCK_REAL_LLM": "1",
        "CHORUS_LOG_LEVEL": "WARNING",
        "CHORUS_SPOOL_DIR": str(spool),
    }


def slack_gateway_env(slack: SlackServer, port: int) -> dict[str, str]:
    """A gateway's Slack settings: HTTP Events on 127.0.0.1:``port``, the Web API on ``slack``."""
    return {
        "SLACK_BOT_TOKEN": SLACK_TOKEN,
        "SLACK_SIGNING_SECRET": SLACK_SECRET,
        "SLACK_API_BASE_URL": slack.url + "/api/",
        "SLACK_HTTP_HOST": "127.0.0.1",
        "SLACK_HTTP_PORT": str(port),
    }


async def until_listening(session: aiohttp.ClientSession, port: int) -> None:
    """Until the gateway's Slack endpoint answers (its /healthz): /readyz may say ready before
    the adapter has bound its port (another process's state: polled)."""
    while True:
        try:
            url = f"http://127.0.0.1:{port}/healthz"
            async with session.get(url, timeout=aiohttp.ClientTimeout(total=3)) as response:
                if response.status == 200:
                    return
        except (aiohttp.ClientError, TimeoutError):
            pass
        await asyncio.sleep(0.1)


async def post_event(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> int:
    """POST an event as Slack does (``v0`` HMAC signature); returns the HTTP status."""
    raw = json.dumps(body)
    stamp = str(int(time.time()))
    digest = hmac.new(SLACK_SECRET.encode(), f"v0:{stamp}:{raw}".encode(), hashlib.sha256)
    headers = {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": f"v0={digest.hexdigest()}",
        "Content-Type": "application/json",
    }
    timeout = aiohttp.ClientTimeout(total=3)  # Slack's limit for the acknowledgement
    async with session.post(url, data=raw.encode(), headers=headers, timeout=timeout) as response:
        return response.status


class SlowAnthropic(AnthropicServer):
    """Answers after 50 ms, so turns are in flight when Redis dies."""

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(0.05)
        return await super()._messages(request)


class Fleet:
    """The chorus processes of the test, each with its own health port and log file."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env, self.logs = env, logs
        self.env_for: dict[str, dict[str, str]] = {}  # extra settings of one process
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.ports: dict[str, int] = {}

    def start(self, name: str, *args: str) -> None:
        port = free_port()
        log = (self.logs / f"{name}.log").open("wb")
        self.procs[name] = subprocess.Popen(
            [str(CHORUS), *args],
            cwd=ROOT,
            env={**self.env, **self.env_for.get(name, {}), "CHORUS_HEALTH_PORT": str(port)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.ports[name] = port

    def exited(self) -> dict[str, int]:
        return {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def tails(self) -> str:
        return "\n".join(f"--- {n} ---\n{self.log(n)[-3000:]}" for n in self.procs)

    async def status(self, session: aiohttp.ClientSession, name: str, path: str) -> int | None:
        try:
            url = f"http://127.0.0.1:{self.ports[name]}{path}"
            async with session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as response:
                await response.read()
                return response.status
        except (aiohttp.ClientError, TimeoutError):
            return None

    async def metrics(self, session: aiohttp.ClientSession, name: str) -> str:
        """The process's /metrics exposition."""
        async with session.get(f"http://127.0.0.1:{self.ports[name]}/metrics") as response:
            return await response.text()

    async def until_ready(
        self, session: aiohttp.ClientSession, ready: bool, names: tuple[str, ...] = ()
    ) -> None:
        """Every process's (or those of ``names``) /readyz says ``ready`` (200) or not (503)."""
        want = 200 if ready else 503
        while True:
            live = {n: p for n, p in self.procs.items() if n in names or not names}
            gone = {n: p.returncode for n, p in live.items() if p.poll() is not None}
            assert not gone, f"a process exited: {gone}\n{self.tails()}"
            codes = [await self.status(session, n, "/readyz") for n in live]
            if all(code == want for code in codes):
                return
            await asyncio.sleep(0.1)  # another process's state

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def sample(text: str, name: str, labels: str = "") -> float:
    """The sum of ``name``'s samples in a /metrics exposition whose labels contain ``labels``."""
    total = 0.0
    for line in text.splitlines():
        series, _, value = line.rpartition(" ")
        if (series == name or series.startswith(f"{name}{{")) and labels in series:
            total += float(value)
    return total


async def until_drained(redis: Redis, namespace: str, platform: str, partitions: int = 16) -> None:
    """Until every inbound entry is acked by the workers and every reply to ``platform`` by a
    gateway (so no late second answer or post is on its way); ``partitions`` per topic, the
    Redis Streams bus's default."""
    streams = {
        keys.bus_stream(topic, p, namespace): topic
        for topic in (INBOUND, outbound_topic(platform))
        for p in range(partitions)
    }
    while True:
        if not await unacked(redis, streams):
            return
        await asyncio.sleep(0.2)  # other processes' acks
