"""``chorus run`` as a real process, with a platform configured: the Discord adapter (real
discord.py against the loopback gateway and REST), the router, the agent and the Anthropic SDK
(against its loopback server), all wired by the composition root."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import aiohttp
import pytest

from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.discord_server import (
    BOT_ID,
    CHANNEL_ID,
    DiscordServer,
    bot_mention,
    plain_message,
)
from tests.redis_server import free_port
from tests.test_chat_e2e import ROOT, base_env, spawn_chorus

pytestmark = pytest.mark.e2e  # every test here starts processes


async def test_chorus_run_answers_a_discord_mention_end_to_end(tmp_path: Path) -> None:
    port = free_port()
    async with AnthropicServer() as model, DiscordServer() as discord:
        model.replies.append("Hello from the model, @everyone!")
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "DISCORD_TOKEN": "loopback-token-not-secret",
            "DISCORD_API_BASE_URL": discord.api_url,
            "DISCORD_GATEWAY_URL": discord.ws_url,
            "PYTHONPATH": str(ROOT),
            "CHORUS_HEALTH_PORT": str(port),
            "CHORUS_HEALTH_HOST": "127.0.0.1",
        }
        proc = await spawn_chorus(["run"], env, tmp_path)
        try:
            await discord.wait_for(
                lambda: bool(discord.ops(2)), limit=90
            )  # IDENTIFY: the gateway is up
            await discord.dispatch(
                "MESSAGE_CREATE",
                plain_message(4242, f"<@{BOT_ID}> what is up?", mentions=[bot_mention()]),
            )
            path = f"/channels/{CHANNEL_ID}/messages"
            await discord.wait_for(lambda: bool(discord.requests_to("POST", path)), limit=90)
            (post,) = discord.requests_to("POST", path)
            async with aiohttp.ClientSession() as http:
                base = f"http://127.0.0.1:{port}"
                async with http.get(f"{base}/metrics") as response:
                    metrics = await response.text()
                async with http.get(f"{base}/readyz") as response:
                    ready = (response.status, await response.json())
                async with http.get(f"{base}/healthz") as response:
                    alive = response.status
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()[-3000:]
        body = post.body
        assert body["content"].startswith("Hello from the model, @\u200beveryone")
        assert body["allowed_mentions"]["parse"] == []
        assert "what is up?" in json.dumps(model.bodies[-1]["messages"])
        assert b"loopback-token-not-secret" not in err
        assert alive == 200 and ready[0] == 200, ready
        assert 'chorus_messages_in_total{platform="discord"} 1.0' in metrics
        assert 'chorus_messages_out_total{platform="discord"} 1.0' in metrics
        assert 'chorus_llm_tokens_total{kind="output",model="claude-test"}' in metrics


@pytest.mark.parametrize("front", ["gateway", "all"])
async def test_gateway_and_worker_processes_over_redis_streams(
    tmp_path: Path, real_redis_url: str, key_tag: str, front: str
) -> None:
    """Scale-out: ``--role gateway`` holds the Discord connection, ``--role worker`` runs the
    agent; the Redis Streams bus on a real Redis carries the message and the reply between.
    ``all`` in front is deploy/compose.yaml's ``--profile scale``: the one ``chorus run`` that
    holds the platforms answers too, beside the workers, and each message is answered once."""
    async with AnthropicServer() as model, DiscordServer() as discord:
        model.replies.append("Answered by the worker.")
        common = base_env(tmp_path) | {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "CHORUS_REDIS_URL": real_redis_url,
            "CHORUS_BUS": "redis",
            "CHORUS_BUS_NAMESPACE": key_tag,
            "CHORUS_INSIGHTS_ENABLED": "false",
            "PYTHONPATH": str(ROOT),
        }
        gateway_env = common | {
            "DISCORD_TOKEN": "loopback-token-not-secret",
            "DISCORD_API_BASE_URL": discord.api_url,
            "DISCORD_GATEWAY_URL": discord.ws_url,
        }
        procs = [
            await spawn_chorus(["run", "--role", role], env, tmp_path)
            for role, env in ((front, gateway_env), ("worker", common))
        ]
        message_id = int(key_tag[1:], 16)  # unique per run: the real Redis remembers ids
        try:
            await discord.wait_for(lambda: bool(discord.ops(2)), limit=90)
            await discord.dispatch(
                "MESSAGE_CREATE",
                plain_message(message_id, f"<@{BOT_ID}> who answers?", mentions=[bot_mention()]),
            )
            path = f"/channels/{CHANNEL_ID}/messages"
            await discord.wait_for(lambda: bool(discord.requests_to("POST", path)), limit=90)
            (post,) = discord.requests_to("POST", path)
        finally:
            outputs = []
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
                outputs.append(await asyncio.wait_for(proc.communicate(), 60))
            await _forget(real_redis_url, key_tag, message_id)
        for proc, (_, err) in zip(procs, outputs, strict=True):
            assert proc.returncode == 0, err.decode()[-3000:]
        assert post.body["content"] == "Answered by the worker."
        assert len(model.requests) == 1


async def _forget(url: str, tag: str, message_id: int) -> None:
    """Remove what the run left in the shared test database."""
    from bot.events import ConversationKey
    from bot.state import connect, keys

    redis = await connect.open_redis(url)
    try:
        doomed = [k async for k in redis.scan_iter(match=f"*{tag}*")]
        doomed += [
            keys.dedupe("discord", str(message_id)),
            keys.history(ConversationKey(platform="discord", channel=str(CHANNEL_ID))),
        ]
        await redis.delete(*doomed)
    finally:
        await redis.aclose()


async def test_a_role_needs_the_redis_bus(tmp_path: Path) -> None:
    from tests.test_chat_e2e import run_chorus

    env = base_env(tmp_path) | {"CHORUS_MODEL": "openai:m", "OPENAI_API_KEY": "k"}
    code, _, err = await run_chorus(["run", "--role", "worker"], env, tmp_path)
    assert code == 2 and "CHORUS_BUS=redis" in err


async def test_chorus_run_on_the_console_serves_health_too(tmp_path: Path) -> None:
    """With no platform configured ``chorus run`` falls back to the console; a deployment
    probing it (a container's health check) must still find /healthz and /readyz."""
    port = free_port()
    async with AnthropicServer() as model:
        model.replies.append("console answer")
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "CHORUS_HEALTH_PORT": str(port),
            "CHORUS_HEALTH_HOST": "127.0.0.1",
        }
        proc = await spawn_chorus(["run"], env, tmp_path, stdin=asyncio.subprocess.PIPE)
        assert proc.stdin is not None
        try:
            status = await _first_answer(f"http://127.0.0.1:{port}/readyz", limit=90)
            proc.stdin.write(b"hello\n")
            proc.stdin.close()
            out, err = await asyncio.wait_for(proc.communicate(), 60)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert status == 200, err.decode()[-2000:]
    assert out.decode().splitlines() == ["console answer"]
    assert proc.returncode == 0


async def _first_answer(url: str, *, limit: float) -> int:
    """The status of the first answer ``url`` gives (it is not listening yet at first)."""
    async with asyncio.timeout(limit), aiohttp.ClientSession() as http:
        while True:
            try:
                async with http.get(url) as response:
                    return response.status
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.2)
