"""Scale-out benchmark: answered messages per second with one and with two worker processes.

Real ``chorus run --role worker`` processes consume the Redis Streams bus on a real Redis and
answer through the anthropic SDK against a loopback server; this process publishes a burst of
messages over many conversations and times until every reply is on the outbound stream.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from pathlib import Path

from bot import store
from bot.bus_redis import RedisStreamsBus
from bot.events import Author, ChatMessage, ConversationKey, Reply
from bot.topics import INBOUND, outbound_topic
from tests.loopback.anthropic_server import AnthropicServer

ROOT = Path(__file__).resolve().parent.parent


async def _run(url: str, workers: int, messages: int) -> float:
    namespace = f"scale{uuid.uuid4().hex[:8]}"
    async with AnthropicServer() as server:
        server.default_reply = lambda body: "ok"
        env = {k: v for k, v in os.environ.items() if k in {"PATH", "HOME", "LANG"}} | {
            "CHORUS_BLOCK_REAL_LLM": "1",
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "bench",
            "ANTHROPIC_BASE_URL": server.base_url,
            "CHORUS_REDIS_URL": url,
            "CHORUS_BUS": "redis",
            "CHORUS_BUS_NAMESPACE": namespace,
            "CHORUS_INSIGHTS_ENABLED": "false",
            "CHORUS_HEALTH_PORT": "0",
            "CHORUS_LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(ROOT),
        }
        procs = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "bot.cli",
                "run",
                "--role",
                "worker",
                env=env,
                cwd=ROOT,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
            for _ in range(workers)
        ]
        redis = await store.connect(url)
        bus = RedisStreamsBus(redis, consumer="bench", namespace=namespace, block_ms=100)
        seen: set[str] = set()
        all_in = asyncio.Event()
        warm = asyncio.Event()

        async def collect() -> None:
            async for delivery in bus.consume(outbound_topic("bench"), Reply, group="outbound"):
                rid = delivery.event.reply_to_id or ""
                if rid.startswith("warm"):
                    warm.set()
                else:
                    seen.add(rid)
                    if len(seen) >= messages:
                        all_in.set()
                await delivery.ack()

        collector = asyncio.create_task(collect())
        tag = uuid.uuid4().hex[:6]

        def message(i: int, prefix: str = "") -> ChatMessage:
            return ChatMessage(
                platform="bench",
                id=f"{prefix}{tag}-{i}",
                conversation=ConversationKey(platform="bench", channel=f"{tag}-{i % 64}"),
                author=Author(id=f"u{i % 64}"),
                text=f"hello {i}",
                mentions_bot=True,
            )

        try:
            for i in range(workers * 4):  # every worker up and holding partitions
                await bus.publish(INBOUND, message(i, "warm"))
            await asyncio.wait_for(warm.wait(), 120)
            started = time.perf_counter()
            for i in range(messages):
                await bus.publish(INBOUND, message(i))
            await asyncio.wait_for(all_in.wait(), 600)
            elapsed = time.perf_counter() - started
        finally:
            for proc in procs:
                proc.terminate()
            await asyncio.gather(*(p.wait() for p in procs))
            await bus.close()
            await asyncio.gather(collector, return_exceptions=True)
            doomed = [k async for k in redis.scan_iter(match=f"*{namespace}*")]
            if doomed:
                await redis.delete(*doomed)
            await redis.aclose()
    return messages / elapsed


async def main(url: str, messages: int = 600) -> list[str]:
    lines = [
        "## Scale-out: worker processes over the Redis Streams bus",
        "",
        "| workers | answered messages/s | speed-up |",
        "|---|---|---|",
    ]
    try:
        one = await _run(url, 1, messages)
        two = await _run(url, 2, messages)
    except Exception as exc:
        return [*lines, f"| not measured: {exc!r} | | |"]
    lines += [f"| 1 | {one:,.0f} | 1.00 |", f"| 2 | {two:,.0f} | {two / one:.2f} |"]
    return lines
