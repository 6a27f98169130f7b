"""Slash commands with the shards split over two real ``chorus run --role gateway`` processes.

A slash command is received by the process holding its guild's shard, which defers it privately
and waits; its answer is read off the outbound bus by whichever gateway process holds the lease
of the conversation's partition. Both routes are exercised on purpose: once the two processes
share the 16 outbound partitions (8 each), the test reads the leases and, for a guild of each
process, sends one command in a channel whose partition each lease holder reads. So each
process answers one command it read itself and one forwarded to it by the other
(``adapters/discord/routed.py``). Every command gets exactly one follow-up, ephemeral, with
the worker's answer; nothing is posted in a channel.
"""

from __future__ import annotations

import asyncio
import sys
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import prompts
from adapters.discord import convert
from bot.state import keys
from bot.state.client import Redis
from tests.discord_rig import slash_interaction
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.discord_server import BOT_ID, DiscordServer
from tests.test_discord_shards_e2e import (
    RANGES,
    SHARDS,
    guild_of_shard,
    sharded_rig,
    spawn,
    stop,
)

pytestmark = pytest.mark.e2e

PARTITIONS = 16  # the Redis Streams bus's partitions per topic
OUTBOUND, GROUP = "outbound:discord", "outbound"
FORWARDED = "slash command answer forwarded to its gateway process"


async def lease_holders(redis: Redis, namespace: str) -> dict[int, str]:
    """Outbound partition -> the token of the gateway consumer reading it."""
    names = [keys.bus_lease(OUTBOUND, GROUP, p, namespace) for p in range(PARTITIONS)]
    values = await redis.mget(names)
    return {p: str(v) for p, v in enumerate(values) if v is not None}


async def settled(redis: Redis, namespace: str) -> dict[int, str]:
    """The leases once both gateway processes read their fair share (8 partitions each)."""
    async with asyncio.timeout(120):
        while True:
            holders = await lease_holders(redis, namespace)
            shares = Counter(holders.values())
            if len(holders) == PARTITIONS and sorted(shares.values()) == [8, 8]:
                return holders
            await asyncio.sleep(0.2)


def channel_read_by(shard: int, token: str, holders: dict[int, str]) -> int:
    """A channel id in a guild of ``shard`` whose answers land on a partition ``token`` reads."""
    for k in range(1, 1000):
        channel = guild_of_shard(shard) + k
        if holders[zlib.crc32(f"discord:{channel}".encode()) % PARTITIONS] == token:
            return channel
    raise AssertionError("no channel found")  # 16 partitions: the loop never gets here


def command_in(
    shard: int, channel: int, interaction_id: str, token: str, user: str
) -> dict[str, Any]:
    """``/chorus pins`` by ``user`` in ``channel`` of the guild of ``shard``."""
    data = slash_interaction(interaction_id, "pins", user_id=user, token=token)
    guild = str(guild_of_shard(shard))
    data["guild_id"], data["channel_id"] = guild, str(channel)
    data["channel"] = dict(data["channel"], id=str(channel), guild_id=guild)
    return data


async def test_each_slash_command_is_answered_privately_once_whichever_gateway_reads_it(
    tmp_path: Path, real_redis_url: str, real_redis: Redis, key_tag: str
) -> None:
    async with AnthropicServer() as model, DiscordServer() as discord:
        common, gateway_env = sharded_rig(  # lease 10 s: no lease lapses on a loaded machine
            tmp_path, model, discord, real_redis_url, key_tag, lease_ms=10_000
        )
        gateway_env |= {"DISCORD_SHARD_COUNT": str(SHARDS)}
        logs = {name: tmp_path / f"{name}.log" for name in ("a", "b", "w")}
        procs = {
            name: await spawn(
                ["run", "--role", "gateway"], gateway_env | {"DISCORD_SHARD_IDS": ids}, logs[name]
            )
            for name, ids in RANGES.items()
        }
        procs["w"] = await spawn(["run", "--role", "worker"], common, logs["w"])
        base = int(key_tag[1:], 16) % 10**15 * 1000  # unique per run: Redis remembers ids
        sent: list[tuple[str, str, int]] = []  # interaction id, token, channel
        try:
            await discord.wait_for(
                lambda: all(discord.shard_connected(s) for s in range(SHARDS)), limit=120
            )
            holders = await settled(real_redis, key_tag)
            tokens = sorted(set(holders.values()))
            for shard in (0, 2):  # a guild of gateway a, then one of gateway b
                for token in tokens:  # read by one process, then by the other
                    n = len(sent) + 1
                    interaction, secret = str(base + n), f"token-{key_tag}-{n}"
                    channel = channel_read_by(shard, token, holders)
                    user = str(base + 100 + n)  # a new user: no pins yet
                    sent.append((interaction, secret, channel))
                    await discord.dispatch(
                        "INTERACTION_CREATE", command_in(shard, channel, interaction, secret, user)
                    )
            paths = [f"/webhooks/{BOT_ID}/{secret}" for _, secret, _ in sent]
            await discord.wait_for(
                lambda: all(discord.requests_to("POST", path) for path in paths), limit=120
            )
            assert await lease_holders(real_redis, key_tag) == holders, "leases moved"
        except BaseException:
            for name, log in logs.items():
                tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
                print(f"--- {name} ---\n{tail}", file=sys.stderr)
            raise
        finally:
            for proc in procs.values():
                await stop(proc)

    expected = convert.followup_pieces(prompts.render("commands/pins_empty"))
    for interaction, secret, channel in sent:
        (deferred,) = discord.requests_to("POST", f"/interactions/{interaction}/{secret}/callback")
        assert deferred.body == {"type": 5, "data": {"flags": 64}}, "deferred privately"
        followups = discord.requests_to("POST", f"/webhooks/{BOT_ID}/{secret}")
        assert [(f.body["content"], f.body["flags"] & 64) for f in followups] == [
            (piece, 64) for piece in expected
        ], "the worker's answer, once, ephemeral"
        assert discord.channel_messages(channel) == [], "never posted in the channel"
    assert not [r for r in discord.requests if r.method == "POST" and "/channels/" in r.path]
    forwarded = {
        name: logs[name].read_text(encoding="utf-8", errors="replace").count(FORWARDED)
        for name in RANGES
    }
    assert forwarded == {"a": 1, "b": 1}, "each process forwarded one answer to the other"
