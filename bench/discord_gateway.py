"""Discord gateway benchmark: what one gateway process spends per inbound message.

The real Discord adapter (discord.py's ``AutoShardedClient``, 4 shards in one process) reads
MESSAGE_CREATE mentions from the loopback gateway, converts them and publishes them on the
Redis Streams bus of a real Redis; this process also plays the router (it consumes and acks the
``inbound`` stream) and the loopback gateway, whose frames are serialised before the clock
starts; at most ``IN_FLIGHT`` messages are on their way at once (a steady stream, as a
shard's socket delivers it, not thousands in one instant). CPU is ``process_time`` of the whole process, so the figure is an upper bound of the
gateway's own cost: it includes the consuming side and the loopback server's socket writes.
The shard count of a deployment comes from Discord (about 1,000 guilds per shard); what this
measures is how many messages per second one gateway process's core carries, whatever its
shard count, which is what decides how many shards one process can hold.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from adapters.discord.adapter import DiscordAdapter
from bot.bus.streams import RedisStreamsBus
from bot.bus.topics import INBOUND
from bot.events import ChatMessage
from bot.settings import DiscordSettings
from bot.state import connect
from tests.loopback.discord_server import (
    BOT_ID,
    GUILD_ID,
    DiscordServer,
    bot_mention,
    guild_create,
    plain_message,
)

SHARDS = 4
IN_FLIGHT = 32  # messages sent but not yet consumed, at most


def _guild(shard: int) -> int:
    return GUILD_ID - (((GUILD_ID >> 22) % SHARDS) << 22) + (shard << 22)


async def bench_gateway(redis_url: str, messages: int = 3000) -> dict[str, float]:
    namespace = f"gw{uuid.uuid4().hex[:8]}"
    redis = await connect.open_redis(redis_url)
    bus = RedisStreamsBus(redis, consumer="bench", namespace=namespace, block_ms=100)
    async with DiscordServer() as discord:
        discord.recommended_shards, discord.max_concurrency = SHARDS, SHARDS
        discord.guilds = [
            guild_create(guild_id=_guild(s), channel_id=_guild(s) + 1) for s in range(SHARDS)
        ]
        settings = DiscordSettings.model_validate(
            {
                "DISCORD_TOKEN": "bench-token",
                "DISCORD_API_BASE_URL": discord.api_url,
                "DISCORD_GATEWAY_URL": discord.ws_url,
                "DISCORD_SYNC_COMMANDS": False,
                "DISCORD_TYPING_TIMEOUT": 0.01,
            }
        )
        adapter = DiscordAdapter(bus, settings, client_options={"guild_ready_timeout": 0.01})
        running = asyncio.create_task(adapter.run())
        seen = 0
        done = asyncio.Event()
        room = asyncio.Event()  # set while fewer than IN_FLIGHT messages are on their way
        room.set()
        sent = 0

        async def consume() -> None:
            nonlocal seen, sent
            async for delivery in bus.consume(INBOUND, ChatMessage, group="router"):
                await delivery.ack()
                seen += 1
                if sent - seen < IN_FLIGHT:
                    room.set()
                if seen >= messages:
                    done.set()

        consumer = asyncio.create_task(consume())
        try:
            async with asyncio.timeout(120):
                while not await adapter.ready():  # noqa: ASYNC110 (discord.py's state)
                    await asyncio.sleep(0.05)
            frames = []
            for i in range(messages):
                shard = i % SHARDS
                payload = plain_message(
                    10**15 + i,
                    f"<@{BOT_ID}> hello {i}",
                    mentions=[bot_mention()],
                    channel_id=_guild(shard) + 1,
                    guild_id=_guild(shard),
                )
                frames.append((shard, discord.frame("MESSAGE_CREATE", payload)))
            cpu, wall = time.process_time(), time.perf_counter()
            for shard, text in frames:
                await room.wait()  # a steady stream, not one instant burst
                sent += 1
                if sent - seen >= IN_FLIGHT:
                    room.clear()
                await discord.send_frame(shard, text)
            async with asyncio.timeout(300):
                await done.wait()
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        finally:
            await adapter.aclose()
            await bus.close()
            for task in (running, consumer):
                task.cancel()
            await asyncio.gather(running, consumer, return_exceptions=True)
            doomed = [key async for key in redis.scan_iter(match=f"*:{namespace}:*", count=1000)]
            if doomed:
                await redis.delete(*doomed)
            await redis.aclose()
    return {
        "messages": messages,
        "cpu_ms_per_message": round(cpu / messages * 1000, 3),
        "messages_per_s": round(messages / wall),
        "messages_per_cpu_s": round(messages / cpu),
    }


async def main(redis_url: str) -> list[str]:
    lines = [
        "## Discord gateway: CPU per inbound message",
        "",
        "| shards in the process | messages | CPU per message (upper bound) "
        "| messages per CPU-second | wall messages/s |",
        "|---|---|---|---|---|",
    ]
    try:
        got = await bench_gateway(redis_url)
    except Exception as exc:
        return [*lines, f"| not measured: {exc!r} | | | | |"]
    lines.append(
        f"| {SHARDS} | {got['messages']:.0f} | {got['cpu_ms_per_message']:.3f} ms "
        f"| {got['messages_per_cpu_s']:,.0f} | {got['messages_per_s']:,.0f} |"
    )
    return lines


if __name__ == "__main__":
    import sys

    from bot.llm.guard import block_real_calls

    block_real_calls()
    url = sys.argv[1] if len(sys.argv) > 1 else "redis://127.0.0.1:6379/14"
    print("\n".join(asyncio.run(main(url))))
