"""Memory benchmark: Redis round trips per answered message, and bytes per user buffer.

Round trips are counted at the connection (every command or whole pipeline written is one; the
handshake of a connection the pool opens meanwhile is not a message's round trip) while
the real app answers messages from several users over the real anthropic SDK and a loopback
server, with per-user memory and the insights job enqueue on; plain answers and answers with a
three-call tool loop are measured separately. Bytes per buffer is Redis's own ``MEMORY USAGE`` of a
buffer at the default caps with every entry at its maximum length (real Redis only).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from typing import Any

from bot.memory.buffers import MemoryStore
from bot.settings.memory import MemorySettings
from bot.state import connect, keys
from tests.memory_samples import full_buffer
from tests.roundtrips import counting_round_trips
from tests.test_memory_e2e import start, stop

# The benchmark's own database (flushed before and after); override to measure elsewhere.
DEFAULT_REAL = "redis://127.0.0.1:6379/14"
REAL = os.environ.get("CHORUS_BENCH_REDIS_URL", DEFAULT_REAL)


async def _flush_own_database() -> None:
    if REAL != DEFAULT_REAL:
        return
    redis = await connect.open_redis(REAL)
    try:
        await redis.flushdb()
    finally:
        await redis.aclose()


async def round_trips(url: str, messages: int = 30) -> dict[str, float]:
    from tests.loopback.anthropic_server import AnthropicServer

    async with AnthropicServer() as server:
        server.default_reply = lambda body: "Sure."
        console, listener = await start(url, server, f"bench{uuid.uuid4().hex[:8]}")
        try:
            await console.say("warm", "up")
            with counting_round_trips() as plain:
                for n in range(messages):
                    await console.say(f"user{n % 5}", f"message number {n}")
            loop_turns = 5
            for _ in range(loop_turns):
                server.replies.extend(
                    [
                        {"tool_calls": [{"id": "a", "name": "current_time", "arguments": {}}]},
                        {"tool_calls": [{"id": "b", "name": "current_time", "arguments": {}}]},
                        "done",
                    ]
                )
            with counting_round_trips() as looped:
                for n in range(loop_turns):
                    await console.say("looper", f"two tools please {n}")
        finally:
            await stop(console, listener)
    return {"plain": plain.count / messages, "tool_loop": looped.count / loop_turns}


async def buffer_bytes(url: str) -> dict[str, Any]:
    redis = await connect.open_redis(url)
    memory = MemoryStore(redis, MemorySettings())
    result: dict[str, Any] = {}
    try:
        for label, char in (("ascii", "a"), ("emoji", "😀")):
            user = f"bench-{uuid.uuid4().hex[:8]}"
            saved = await memory.save(full_buffer(user, char))
            key = keys.memory("discord", user)
            result[label] = (
                await redis.memory_usage(key),
                len(saved.pins),
                len(saved.recommendations),
            )
            await redis.delete(key)
    finally:
        await redis.aclose()
    return result


async def main() -> list[str]:
    with contextlib.suppress(Exception):  # no real Redis: each figure below reports it
        await _flush_own_database()
    lines = ["## Memory and Redis round trips", ""]
    lines.append(
        "| store | round trips per answered message | per message with a 3-call tool loop |"
    )
    lines.append("|---|---|---|")
    for label, url in (("embedded (memory://)", "memory://bench-rt"), ("Redis 127.0.0.1", REAL)):
        try:
            rt = await round_trips(url)
        except Exception as exc:  # the real server may be missing on a laptop
            lines.append(f"| {label} | not measured: {exc} | |")
            continue
        lines.append(f"| {label} | {rt['plain']:.2f} | {rt['tool_loop']:.2f} |")
    lines += [
        "",
        "| buffer at default caps (20 pins, 10 recommendations, max-length entries) "
        "| MEMORY USAGE bytes | pins kept | recommendations kept |",
        "|---|---|---|---|",
    ]
    try:
        sizes = await buffer_bytes(REAL)
        for label, (size, pins, recs) in sizes.items():
            lines.append(f"| {label} text | {size} | {pins} | {recs} |")
    except Exception as exc:
        lines.append(f"| (real Redis needed) | not measured: {exc} | | |")
    else:
        await _flush_own_database()
    return lines


if __name__ == "__main__":
    print("\n".join(asyncio.run(main())))
