"""Redis Sentinel: ``CHORUS_REDIS_URL=redis+sentinel://…`` follows a failover of the primary.

Real parts: a primary, its replica and a sentinel (``tests/redis_sentinel.py``). A client from
``connect.open_redis`` writes through the turn's own stores; the primary is SIGKILLed; the
sentinel promotes the replica; the same client, with no new URL, reads what was written before
(replicated: ``WAIT``) and writes again, on the new primary.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from bot.events import ConversationKey
from bot.state import connect
from bot.state.client import StoreError
from bot.state.history import HistoryEntry, HistoryStore
from tests.redis_sentinel import start_sentinels

pytestmark = pytest.mark.e2e


def line(n: int) -> HistoryEntry:
    return HistoryEntry(role="user", text=f"line {n}", message_id=f"m{n}", author_id="u")


async def test_the_store_follows_a_failover_to_the_promoted_replica(tmp_path: Path) -> None:
    rig = start_sentinels(tmp_path)
    client = await connect.open_redis(rig.url)
    try:
        history = HistoryStore(client, max_messages=10, ttl_seconds=3600)
        conv = ConversationKey(platform="discord", channel="sentinel")
        await history.append(conv, line(1))
        assert await client.wait(1, 5000) == 1  # the replica has it
        old = rig.primary
        rig.kill(old)
        deadline = time.monotonic() + 60
        while rig.primary_port() in (old, None):  # the sentinel's own failover
            assert time.monotonic() < deadline, "no failover within 60 s"
            await asyncio.sleep(0.2)
        assert rig.primary_port() == rig.replica
        while True:  # the client's connections to the dead primary fail, then it asks again
            try:
                await history.append(conv, line(2))
                break
            except (StoreError, OSError):
                assert time.monotonic() < deadline, "the client never reached the new primary"
                await asyncio.sleep(0.2)
        assert [e.text for e in await history.load(conv)] == ["line 1", "line 2"]
        info = await client.info("server")
        assert int(info["tcp_port"]) == rig.replica
    finally:
        await client.aclose()
        rig.stop()
