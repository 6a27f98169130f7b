"""Exactly one reply per message when a worker is SIGKILLed mid-run (real Redis only).

Three worker processes (tests/fault/worker.py: the real router over the Redis Streams bus, a
scripted model that awaits a little simulated work per turn) answer 500 messages over 25
conversations. Once replies flow, one worker that holds pending entries is killed. Its
partition leases lapse, a survivor reclaims its pending entries (XAUTOCLAIM) and waits out its
message claims; then every message must have exactly one reply, in conversation order.

Waiting: worker readiness is a line on stdout; the reply count is followed with ``XREAD BLOCK``
on the outbound streams; the end is the bus's drain. Only the partition balance (state of other
processes) is polled, every 100 ms.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from redis.asyncio import Redis

from bot.bus.streams import FIELD, RedisStreamsBus
from bot.bus.topics import INBOUND, outbound_topic
from bot.events import Author, ChatMessage, ConversationKey, Reply
from bot.state import keys
from tests.bus_leases import wait_balanced
from tests.redis_cluster import WITH_CLUSTER, store_url


@pytest.fixture(params=WITH_CLUSTER)
def redis_url(request: pytest.FixtureRequest, key_tag: str) -> Iterator[str]:
    """The stores, and a Redis Cluster of three primaries (``tests/redis_cluster.py``)."""
    yield from store_url(request, key_tag)


pytestmark = pytest.mark.e2e  # every test here starts processes

WORKER = Path(__file__).parent / "fault" / "worker.py"
PARTITIONS = 8  # as in the worker
CONVERSATIONS = 25
PER_CONVERSATION = 20
TOTAL = CONVERSATIONS * PER_CONVERSATION


async def _start_worker(url: str, tag: str, name: str) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(WORKER),
        url,
        tag,
        name,
        "15",
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "CHORUS_BLOCK_REAL_LLM": "1"},
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 20)
    assert line.strip() == b"ready", f"worker {name} did not start: {line!r}"
    return proc


async def _follow(redis: Redis, tag: str, total: int, on_count: asyncio.Queue[int]) -> None:
    """Count outbound entries with XREAD BLOCK, reporting each new total."""
    cursors = {keys.bus_stream(outbound_topic("console"), p, tag): "0-0" for p in range(PARTITIONS)}
    seen = 0
    while seen < total:
        response = cast(
            "list[tuple[str, list[tuple[str, dict[str, str]]]]] | None",
            await redis.xread(cursors, count=500, block=1000),  # type: ignore[arg-type]  # stub wants dict[KeyT, StreamIdT], a dict[str, str] is one
        )
        for stream, entries in response or []:
            cursors[stream] = entries[-1][0]
            seen += len(entries)
        await on_count.put(seen)


async def test_one_reply_per_message_when_a_worker_dies(
    real_redis_url: str, real_redis: Redis, key_tag: str
) -> None:
    tag, redis_client = key_tag, real_redis
    names = ["w1", "w2", "w3"]
    workers = dict(
        zip(names, [await _start_worker(real_redis_url, tag, n) for n in names], strict=True)
    )
    publisher = RedisStreamsBus(redis_client, consumer="test", namespace=tag, partitions=PARTITIONS)
    counts: asyncio.Queue[int] = asyncio.Queue()
    follower = asyncio.create_task(_follow(redis_client, tag, TOTAL, counts))
    try:
        await asyncio.wait_for(wait_balanced(redis_client, tag, PARTITIONS, 3), 20)
        convs = [
            ConversationKey(platform="console", channel=f"{tag}-c{c}") for c in range(CONVERSATIONS)
        ]
        order: dict[str, list[str]] = defaultdict(list)
        for n in range(PER_CONVERSATION):
            for conv in convs:
                message = ChatMessage(
                    platform="console",
                    id=f"{tag}-{conv.channel}-{n}",
                    conversation=conv,
                    author=Author(id="ada"),
                    text=f"message {n}",
                    is_direct=True,
                )
                order[conv.channel].append(message.id)
                await publisher.publish(INBOUND, message)

        # Replies flow: kill a worker that has answered some and holds pending entries.
        while await asyncio.wait_for(counts.get(), 30) < TOTAL // 4:
            pass
        # Frozen first (SIGSTOP), so the entries it is seen holding are the ones it dies with;
        # one that finished them in between is let go on and another moment is chosen.
        while True:
            victim = await _victim(redis_client, tag, names)
            workers[victim].send_signal(signal.SIGSTOP)
            if await _pending_of(redis_client, tag, victim):
                break
            workers[victim].send_signal(signal.SIGCONT)
        workers[victim].send_signal(signal.SIGKILL)
        await workers[victim].wait()
        stranded = await _pending_of(redis_client, tag, victim)
        assert stranded, "the victim died holding pending entries"

        while await asyncio.wait_for(counts.get(), 45) < TOTAL:
            pass
        await publisher.drain(timeout=30)  # every inbound entry acked by the group
        replies = await _replies(redis_client, tag)
        assert await _pending_of(redis_client, tag, victim) == [], "survivors reclaimed them"
    finally:
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)
        await publisher.close()
        for proc in workers.values():
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        for proc in workers.values():
            await asyncio.wait_for(proc.wait(), 15)

    by_message = Counter(r.reply_to_id for r in replies)
    expected = {mid for ids in order.values() for mid in ids}
    assert set(by_message) == expected, "lost or unknown replies"
    assert [m for m, n in by_message.items() if n > 1] == [], "doubled replies"
    assert len(replies) == TOTAL
    assert not any(r.is_error for r in replies)
    for conv_name, ids in order.items():
        got = [r.reply_to_id for r in replies if r.conversation.channel == conv_name]
        assert got == ids, f"{conv_name} answered out of order"
    authors = Counter(r.text.split(":")[0] for r in replies)
    assert authors[victim] > 0, "the victim should have answered some before it died"
    assert sum(n for w, n in authors.items() if w != victim) > 0


async def _victim(redis: Redis, tag: str, names: list[str]) -> str:
    """A worker that has entries pending right now (it is mid-turn)."""
    while True:
        pending: Counter[str] = Counter()
        for p in range(PARTITIONS):
            summary = await redis.xpending(keys.bus_stream(INBOUND, p, tag), "agent")
            for consumer in summary.get("consumers") or []:
                pending[consumer["name"]] += int(consumer["pending"])
        candidates = [n for n in names if pending[n] > 0]
        if candidates:
            return candidates[0]
        await asyncio.sleep(0.05)  # another process's state


async def _replies(redis: Redis, tag: str) -> list[Reply]:
    """Every reply on the outbound streams, each stream in order (a conversation is in one)."""
    replies: list[Reply] = []
    for p in range(PARTITIONS):
        entries = cast(
            "list[tuple[str, dict[str, str]]]",
            await redis.xrange(keys.bus_stream(outbound_topic("console"), p, tag)),
        )
        for _, fields in entries:
            replies.append(Reply.model_validate_json(fields[FIELD]))
    return replies


async def _pending_of(redis: Redis, tag: str, consumer: str) -> list[str]:
    ids: list[str] = []
    for p in range(PARTITIONS):
        rows = cast(
            "list[dict[str, str]]",
            await redis.xpending_range(
                keys.bus_stream(INBOUND, p, tag), "agent", "-", "+", 1000, consumername=consumer
            ),
        )
        ids.extend(row["message_id"] for row in rows)
    return ids
