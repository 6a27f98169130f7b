"""Waiting until a consumer group's partitions are shared out, read off the lease keys.

Used by the fault test and the scale-out benchmark: both start worker processes and must not
publish their load while the first worker still holds every partition (a run that starts then
measures one worker, whatever the number started).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import cast

from redis.asyncio import Redis

from bot.bus.topics import INBOUND
from bot.state import keys


async def wait_balanced(
    redis: Redis, namespace: str, partitions: int, consumers: int, *, group: str = "agent"
) -> None:
    """Return once every inbound partition is leased, by ``consumers`` distinct consumers, none
    holding more than its fair share (``ceil(partitions / consumers)``)."""
    names = [keys.bus_lease(INBOUND, group, p, namespace) for p in range(partitions)]
    share = -(-partitions // consumers)
    while True:
        holders = cast("list[str | None]", await redis.mget(names))
        counts = Counter(h.split(":")[0] for h in holders if h)
        if None not in holders and len(counts) == consumers and max(counts.values()) <= share:
            return
        await asyncio.sleep(0.1)  # other processes' state: a modest poll
