"""New entries of a consumer's partitions on a Redis Cluster: one ``XREADGROUP`` per hash slot.

On a cluster one command may only name keys of one slot, and the bus spreads its partitions
over slots (``bot.state.keys.bus_stream``), so the single ``XREADGROUP`` over every partition a
consumer holds becomes one per slot. Each is a blocking read of its own, kept running across
fetches: a fetch returns what the reads that finished first brought and leaves the others
blocking for the next fetch. A read is never cancelled on the way (its entries would be
delivered to the consumer with the reply lost, pending until reclaimed) -- only when the
consumer stops, whose ``hand_back`` then returns whatever such a read had taken.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from bot.state import keys

Rows = list[tuple[str, list[tuple[str, dict[str, str]]]]]


class SlotReads:
    """The running per-slot reads of one consumer."""

    def __init__(self) -> None:
        self._reads: dict[str, tuple[asyncio.Task[Any], frozenset[int]]] = {}

    @property
    def partitions(self) -> set[int]:
        """The partitions a read is in flight for (not idle: their leases are kept)."""
        return {p for _, parts in self._reads.values() for p in parts}

    async def fetch(
        self,
        streams: dict[int, str],
        read: Callable[[dict[str, str], int], Awaitable[Any]],
        count: int,
    ) -> Rows:
        """Rows of the reads that finish first; ``streams``: partition -> stream key of the
        partitions to read, ``read(streams, count)`` one ``XREADGROUP``."""
        groups: dict[str, list[int]] = {}
        for partition, stream in streams.items():
            groups.setdefault(keys.slot_tag(stream) or stream, []).append(partition)
        share = max(1, count // max(len(groups), 1))
        for tag, parts in groups.items():
            if tag not in self._reads:
                names = {streams[p]: ">" for p in parts}
                task = asyncio.ensure_future(read(names, share))
                self._reads[tag] = (task, frozenset(parts))
        try:
            await asyncio.wait(
                [task for task, _ in self._reads.values()], return_when="FIRST_COMPLETED"
            )
        except asyncio.CancelledError:
            self.cancel()
            raise
        rows: Rows = []
        failure: BaseException | None = None
        for tag, (task, _) in list(self._reads.items()):
            if not task.done():
                continue
            del self._reads[tag]
            error = task.exception()
            if error is not None:
                failure = failure or error
            else:
                rows.extend(task.result() or [])
        if failure is not None and not rows:
            raise failure
        return rows

    def cancel(self) -> None:
        """Stop every read (the consumer stops)."""
        for task, _ in self._reads.values():
            task.cancel()
        self._reads.clear()
