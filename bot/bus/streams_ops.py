"""The Redis Streams bus's single-purpose operations: reclaiming pending entries, handing them
back at a graceful stop, counting what a drain still waits for. Kept apart from ``bus_redis`` so that module stays about the
consume loop; each function is one protocol step with its quirks noted.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from bot.state.client import Redis, is_cluster

Claimed = tuple[str, dict[str, str] | None, int]  # entry id, fields (None: trimmed), attempt


async def autoclaim(
    redis: Redis,
    stream: str,
    group: str,
    consumer: str,
    *,
    min_idle: int,
    skip: set[str],
    batch: int,
) -> list[Claimed]:
    """Take over the group's pending entries idle for ``min_idle`` ms, oldest first.

    ``XAUTOCLAIM`` pages with a cursor (``0-0`` when done). Since Redis 7 its third element
    lists pending ids whose entries were trimmed away; they come back with ``fields=None`` so
    the caller can log and ack them. ``skip`` are ids this consumer is still handling. The
    attempt is the entry's delivery count (``XPENDING``), which XAUTOCLAIM just incremented.
    """
    claimed: list[tuple[str, dict[str, str] | None]] = []
    cursor = "0-0"
    while True:
        reply = await redis.xautoclaim(
            stream, group, consumer, min_idle, start_id=cursor, count=batch
        )
        cursor, entries = reply[0], reply[1]
        trimmed = reply[2] if len(reply) > 2 else []
        claimed.extend((i, f) for i, f in entries if i not in skip)
        claimed.extend((i, None) for i in trimmed)
        # A page may hold only trimmed ids: only the cursor says whether more pages follow.
        if cursor == "0-0" or not (entries or trimmed):
            break
    if not claimed:
        return []
    claimed.sort(key=lambda item: id_key(item[0]))
    rows = await redis.xpending_range(
        stream,
        group,
        min=claimed[0][0],
        max=claimed[-1][0],
        count=len(claimed) + batch,
        consumername=consumer,
    )
    counts = {str(row["message_id"]): int(row["times_delivered"]) for row in rows}
    return [(i, f, counts.get(i, 2)) for i, f in claimed]


async def hand_back(redis: Redis, stream: str, group: str, consumer: str, limit: int) -> int:
    """At a graceful stop, undo this consumer's deliveries of the entries it leaves unacked:
    each stays pending (the next holder of the partition reclaims it with ``XAUTOCLAIM``) with
    its delivery count one lower (``XCLAIM ... JUSTID RETRYCOUNT``), so a message that was
    only queued, or cut short by the shutdown, is not counted as an attempt that failed on it
    (``CHORUS_MAX_DELIVERIES``). Returns how many entries were handed back."""
    rows = await redis.xpending_range(stream, group, "-", "+", limit, consumername=consumer)
    if not rows:
        return 0
    async with redis.pipeline(transaction=False) as pipe:
        for row in rows:
            count = max(int(row["times_delivered"]) - 1, 0)
            pipe.xclaim(
                stream, group, consumer, 0, [row["message_id"]], justid=True, retrycount=count
            )
        await pipe.execute()
    return len(rows)


async def unacked(redis: Redis, streams: dict[str, str]) -> dict[str, int]:
    """Per topic, how many entries of ``streams`` (stream key -> topic) some group has not
    acked. One MULTI: a consumer publishes its follow-up before acking, so an atomic snapshot
    of every stream never sees the ack without the follow-up."""
    if not streams:
        return {}
    # a cluster's streams are in several slots: there each is read on its own (not atomic)
    async with redis.pipeline(transaction=not is_cluster(redis)) as pipe:
        for name in streams:
            pipe.xlen(name)
            pipe.xinfo_groups(name)
            pipe.xrevrange(name, count=1)
        results = await pipe.execute(raise_on_error=False)
    busy: dict[str, int] = {}
    for index, topic in enumerate(streams.values()):
        length, groups, last = results[3 * index : 3 * index + 3]
        if isinstance(groups, Exception) or isinstance(length, Exception):
            groups = []  # no such stream yet
        last_id = last[0][0] if last and not isinstance(last, Exception) else None
        count = _unacked_count(int(length or 0), groups, last_id)
        if count:
            busy[topic] = busy.get(topic, 0) + count
    return busy


async def wait_event(event: asyncio.Event, seconds: float) -> None:
    """Wait for ``event`` at most ``seconds``. ``asyncio.timeout``, not ``wait_for``: 3.11's
    ``wait_for`` can swallow a cancellation that arrives as its timeout fires."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()


def id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _unacked_count(length: int, groups: list[dict[str, Any]], last_id: str | None) -> int:
    """How many entries of one stream some group has not acked yet (its worst group)."""
    if not groups:
        return length
    worst = 0
    for group in groups:
        lag = group.get("lag")
        if lag is None:  # Redis cannot tell (deletions): compare the ids instead
            delivered = group.get("last-delivered-id") or "0-0"
            lag = int(last_id is not None and id_key(delivered) < id_key(last_id))
        worst = max(worst, int(group.get("pending") or 0) + int(lag))
    return worst
