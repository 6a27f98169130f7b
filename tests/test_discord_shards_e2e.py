"""A sharded Discord gateway as it runs in production: real ``chorus run`` processes.

The loopback gateway recommends 4 shards with ``max_concurrency`` 1 and routes each guild to
its shard (``(guild_id >> 22) % 4``). Two ``chorus run --role gateway`` processes take shards
0-1 and 2-3 (``DISCORD_SHARD_IDS``, the count from ``GET /gateway/bot``), two ``--role worker``
processes answer over Redis Streams on the real Redis. The identify window is shortened to
``WINDOW`` seconds (a setting of both the loopback server and the adapter) and really waited:

- every shard IDENTIFYs exactly once, each from the process whose range holds it, and no two
  IDENTIFYs arrive within one window, across the two processes (the loopback server records
  each IDENTIFY's time and every pair closer than the window);
- a message in a guild of shard 3 is answered exactly once;
- after SIGKILL of the gateway of shards 2-3, the guilds of shards 0-1 are still answered.
"""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.discord_server import (
    BOT_ID,
    GUILD_ID,
    DiscordServer,
    bot_mention,
    guild_create,
    plain_message,
)
from tests.test_chat_e2e import ROOT, base_env

pytestmark = pytest.mark.e2e

SHARDS = 4
WINDOW = 1.5  # seconds between two IDENTIFYs of one bucket (Discord: 5)
RANGES = {"a": "0-1", "b": "2-3"}


def guild_of_shard(shard: int) -> int:
    """A guild id Discord routes to ``shard`` of ``SHARDS``."""
    base = GUILD_ID - (((GUILD_ID >> 22) % SHARDS) << 22)
    return base + (shard << 22)


def channel_of_shard(shard: int) -> int:
    return guild_of_shard(shard) + 1


async def spawn(args: list[str], env: dict[str, str], log: Path) -> asyncio.subprocess.Process:
    """``chorus <args>``, its log written to ``log`` (a pipe nobody reads would fill up)."""
    with log.open("wb") as out:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot.cli",
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            env=env,
            cwd=log.parent,
        )


async def stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 60)
        except TimeoutError:
            proc.kill()
            await proc.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def probe(port: int) -> tuple[dict[str, Any], str]:
    """``/readyz`` (once ready: polled) and ``/metrics`` of a gateway process."""
    url = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as session, asyncio.timeout(60):
        while True:
            try:
                async with session.get(f"{url}/readyz") as response:
                    readiness: dict[str, Any] = await response.json()
                    if response.status == 200:
                        break
            except aiohttp.ClientError:
                pass  # not listening yet
            await asyncio.sleep(0.2)
        async with session.get(f"{url}/metrics") as response:
            return readiness, await response.text()


def identified_in(log: Path) -> set[int]:
    """The shards a gateway process's log says it identified."""
    text = log.read_text(encoding="utf-8", errors="replace")
    lines = [line for line in text.splitlines() if "discord shard identifying" in line]
    return {int(m.group(1)) for line in lines if (m := re.search(r'"shard": (\d+)', line))}


def posts(discord: DiscordServer, shard: int) -> list[str]:
    return [str(m["content"]) for m in discord.channel_messages(channel_of_shard(shard))]


async def say(discord: DiscordServer, shard: int, message_id: int, text: str) -> None:
    await discord.dispatch(
        "MESSAGE_CREATE",
        plain_message(
            message_id,
            f"<@{BOT_ID}> {text}",
            mentions=[bot_mention()],
            channel_id=channel_of_shard(shard),
            guild_id=guild_of_shard(shard),
        ),
    )


def sharded_rig(
    tmp_path: Path,
    model: AnthropicServer,
    discord: DiscordServer,
    redis_url: str,
    key_tag: str,
    *,
    lease_ms: int,
) -> tuple[dict[str, str], dict[str, str]]:
    """The loopbacks set for ``SHARDS`` shards (one guild each, ``max_concurrency`` 1) and the
    environments of the processes: every role's, and a gateway's on top of it."""
    model.default_reply = lambda body: "answered"
    discord.recommended_shards, discord.max_concurrency = SHARDS, 1
    discord.identify_window = WINDOW
    discord.guilds = [
        guild_create(guild_id=guild_of_shard(s), channel_id=channel_of_shard(s))
        for s in range(SHARDS)
    ]
    common = base_env(tmp_path) | {
        "CHORUS_MODEL": "anthropic:claude-test",
        "ANTHROPIC_API_KEY": "k",
        "ANTHROPIC_BASE_URL": model.base_url,
        "PYTHONPATH": str(ROOT),
        "CHORUS_INSIGHTS_ENABLED": "false",
        "CHORUS_LOG_FORMAT": "json",
        "CHORUS_REDIS_URL": redis_url,
        "CHORUS_BUS": "redis",
        "CHORUS_BUS_NAMESPACE": key_tag,
        "CHORUS_PARTITION_LEASE_MS": str(lease_ms),
    }
    gateway_env = common | {
        "DISCORD_TOKEN": "loopback-token-not-secret",
        "DISCORD_API_BASE_URL": discord.api_url,
        "DISCORD_GATEWAY_URL": discord.ws_url,
        "DISCORD_IDENTIFY_WINDOW": str(WINDOW),
        "DISCORD_SYNC_COMMANDS": "false",
    }
    return common, gateway_env


async def test_two_gateway_processes_split_the_shards_and_pace_their_identifies(
    tmp_path: Path, real_redis_url: str, key_tag: str
) -> None:
    async with AnthropicServer() as model, DiscordServer() as discord:
        common, gateway_env = sharded_rig(
            tmp_path, model, discord, real_redis_url, key_tag, lease_ms=2000
        )
        logs = {name: tmp_path / f"{name}.log" for name in ("a", "b", "w1", "w2")}
        health = free_port()
        procs = {
            name: await spawn(
                ["run", "--role", "gateway"],
                gateway_env
                | {"DISCORD_SHARD_IDS": shards}
                | ({"CHORUS_HEALTH_PORT": str(health)} if name == "a" else {}),
                logs[name],
            )
            for name, shards in RANGES.items()
        }
        for name in ("w1", "w2"):
            procs[name] = await spawn(["run", "--role", "worker"], common, logs[name])
        base = int(key_tag[1:], 16) % 10**15 * 1000  # unique per run: Redis remembers ids
        try:
            await discord.wait_for(lambda: len(discord.identifies) >= SHARDS, limit=120)
            await discord.wait_for(
                lambda: all(discord.shard_connected(s) for s in range(SHARDS)), limit=60
            )

            readiness, metrics = await probe(health)
            assert {k: v for k, v in readiness["checks"].items() if "shard" in k} == {
                "adapter:discord:shard:0": "ok",
                "adapter:discord:shard:1": "ok",
            }, readiness
            assert 'chorus_adapter_part_up{part="shard:1",platform="discord"} 1.0' in metrics

            await say(discord, 3, base + 1, "who answers shard 3?")
            await discord.wait_for(lambda: len(posts(discord, 3)) >= 1, limit=120)
            await say(discord, 0, base + 2, "and shard 0?")  # (time for a second answer to 3)
            await discord.wait_for(lambda: len(posts(discord, 0)) >= 1, limit=120)
            answered_3 = posts(discord, 3)

            procs["b"].kill()  # SIGKILL: shards 2-3 are gone at once
            await procs["b"].wait()
            await discord.wait_for(
                lambda: not discord.shard_connected(2) and not discord.shard_connected(3),
                limit=60,
            )
            await say(discord, 1, base + 3, "still there, shard 1?")
            await discord.wait_for(lambda: len(posts(discord, 1)) >= 1, limit=120)
            await say(discord, 0, base + 4, "and shard 0 again?")
            await discord.wait_for(lambda: len(posts(discord, 0)) >= 2, limit=120)
        except BaseException:
            for name, log in logs.items():
                tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
                print(f"--- {name} ---\n{tail}", file=sys.stderr)
            raise
        finally:
            for proc in procs.values():
                await stop(proc)

    shards_identified = sorted(shard for _, shard, _ in discord.identifies)
    assert shards_identified == [0, 1, 2, 3], "each shard identified once"
    assert {count for _, _, count in discord.identifies} == {SHARDS}
    assert discord.identify_violations == [], "two IDENTIFYs of one bucket within a window"
    times = sorted(at for at, _, _ in discord.identifies)
    assert all(b - a >= WINDOW for a, b in zip(times, times[1:], strict=False))
    assert identified_in(logs["a"]) == {0, 1}
    assert identified_in(logs["b"]) == {2, 3}
    assert answered_3 == ["answered"], "shard 3's message answered exactly once"
    assert posts(discord, 3) == answered_3
    assert posts(discord, 1) == ["answered"]
    assert posts(discord, 0) == ["answered", "answered"]
