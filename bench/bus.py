"""Redis Streams bus benchmark: publish -> consume latency (p50/p99) and burst throughput.

Latency is measured one event at a time (publish, then wait for its delivery), so it is the
bus's own cost on loopback without queueing; throughput publishes ``n`` events back to back
and stops the clock when the last one is acked. Keys live in a throwaway namespace that is
deleted afterwards.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from typing import Any

from bot.bus.streams import RedisStreamsBus
from bot.events import Author, ChatMessage, ConversationKey
from bot.state import connect


def _message(n: int) -> ChatMessage:
    return ChatMessage(
        platform="bench",
        id=f"m{n}",
        conversation=ConversationKey(platform="bench", channel=f"c{n % 16}"),
        author=Author(id="u1"),
        text=f"hello {n}",
    )


async def bench_bus(redis_url: str, n: int) -> dict[str, Any]:
    """Latency p50/p99 (ms) of ``n`` sequential publish->consume trips and the throughput
    (events/s) of a burst of ``n``, over the Redis Streams bus at ``redis_url``."""
    namespace = f"bench{uuid.uuid4().hex[:8]}"
    redis = await connect.open_redis(redis_url)
    bus = RedisStreamsBus(redis, consumer="bench", namespace=namespace, block_ms=100)
    arrived: asyncio.Queue[float] = asyncio.Queue()

    async def consume() -> None:
        async for delivery in bus.consume("bench", ChatMessage, group="bench"):
            await delivery.ack()
            arrived.put_nowait(time.perf_counter())

    consumer = asyncio.create_task(consume())
    try:
        await bus.publish("bench", _message(-1))  # warm up: group, leases, connections
        await asyncio.wait_for(arrived.get(), 30)
        latencies = []
        for i in range(n):
            start = time.perf_counter()
            await bus.publish("bench", _message(i))
            latencies.append((await asyncio.wait_for(arrived.get(), 30) - start) * 1000)
        start = time.perf_counter()
        for i in range(n):
            await bus.publish("bench", _message(i))
        for _ in range(n):
            last = await asyncio.wait_for(arrived.get(), 60)
        elapsed = last - start
    finally:
        await bus.close()
        await asyncio.gather(consumer, return_exceptions=True)
        doomed = [key async for key in redis.scan_iter(match=f"*:{namespace}:*", count=1000)]
        if doomed:
            await redis.delete(*doomed)
        await redis.aclose()
    quantiles = statistics.quantiles(latencies, n=100)
    return {
        "n": n,
        "latency_p50_ms": round(statistics.median(latencies), 3),
        "latency_p99_ms": round(quantiles[98], 3),
        "throughput_per_s": round(n / elapsed),
    }


if __name__ == "__main__":
    import sys

    print(
        asyncio.run(
            bench_bus(sys.argv[1] if len(sys.argv) > 1 else "redis://127.0.0.1:6379/15", 2000)
        )
    )
