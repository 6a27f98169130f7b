"""The Streams bus's single-purpose operations against the embedded store and a real Redis."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from bot.bus.streams_ops import autoclaim


@pytest.mark.redis
async def test_autoclaim_reads_past_a_page_of_trimmed_entries(
    redis_client: Redis, key_tag: str
) -> None:
    """A worker died holding six entries; the stream was trimmed under the first four. The
    first XAUTOCLAIM page then lists only trimmed ids and no entry, and the reclaim used to stop
    there, leaving the two live entries with the dead worker for good."""
    stream, group = f"stream:{key_tag}", "agent"
    await redis_client.xgroup_create(stream, group, id="0", mkstream=True)
    ids = [await redis_client.xadd(stream, {"n": str(n)}) for n in range(6)]
    await redis_client.xreadgroup(group, "dead", {stream: ">"}, count=6)
    await redis_client.xdel(stream, *ids[:4])
    try:
        claimed = await autoclaim(
            redis_client, stream, group, "alive", min_idle=0, skip=set(), batch=2
        )
        assert [entry_id for entry_id, _, _ in claimed] == ids
        assert [fields for _, fields, _ in claimed[:4]] == [None] * 4  # to be logged and acked
        assert [fields for _, fields, _ in claimed[4:]] == [{"n": "4"}, {"n": "5"}]
    finally:
        await redis_client.delete(stream)
