"""Scrape-time gauges of a bus: how far each consumer group is behind, and what it holds unacked.

Why here and not in ``bot.ops.metrics``: only the bus knows how it counts (an in-process queue
depth, or ``XINFO GROUPS`` over every partition of a stream), and operations must not import
what they observe. ``bus_gauges`` returns the reader that ``Metrics.watch_bus`` registers;
``outbox_gauges`` the gateway outbox's depth and what it recovered from (or refused in) its
spool.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from bot.bus.base import InProcessBus
from bot.bus.outbox import Outbox
from bot.bus.streams import RedisStreamsBus
from bot.bus.topics import DELETIONS, INBOUND
from bot.ops.metrics import Labels, Reader
from bot.state.client import Redis

OutboxGauge = tuple[str, str, Callable[[], float], Literal["gauge", "counter"]]

LAG = "chorus_bus_lag"
PENDING = "chorus_bus_pending"


def bus_gauges(
    bus: object, *, redis: Redis | None = None, topics: Sequence[str] = (INBOUND, DELETIONS)
) -> Reader:
    """The lag/pending reader for ``bus``.

    Redis Streams: ``XINFO GROUPS`` of every partition of ``topics``, summed per topic and group
    (one pipelined round trip per scrape; ``redis`` is the bus's client). In-process: each
    topic's queue depth (lag) and its delivered-but-unacked events (pending); ``topics`` is
    ignored. Anything else is refused with ``TypeError``.
    """
    if isinstance(bus, RedisStreamsBus):
        if redis is None:
            raise ValueError("bus gauges need the Redis client of a RedisStreamsBus")
        return _streams_reader(bus, redis, tuple(topics))
    if isinstance(bus, InProcessBus):
        return _in_process_reader(bus)
    raise TypeError(f"no bus gauges for {type(bus).__name__}")


def _in_process_reader(bus: InProcessBus) -> Reader:
    async def read() -> dict[str, dict[Labels, float]]:
        lag: dict[Labels, float] = {}
        pending: dict[Labels, float] = {}
        for key, (queued, unacked) in bus.backlog().items():
            lag[key] = float(queued)
            pending[key] = float(unacked)
        return {LAG: lag, PENDING: pending}

    return read


def _streams_reader(bus: RedisStreamsBus, redis: Redis, topics: tuple[str, ...]) -> Reader:
    async def read() -> dict[str, dict[Labels, float]]:
        names = [(t, bus.stream(t, p)) for t in topics for p in range(bus.partitions)]
        async with redis.pipeline(transaction=False) as pipe:
            for _, stream in names:
                pipe.xinfo_groups(stream)
            results = await pipe.execute(raise_on_error=False)
        lag: dict[Labels, float] = {}
        pending: dict[Labels, float] = {}
        for (topic, _), groups in zip(names, results, strict=True):
            if isinstance(groups, Exception):
                continue  # the stream does not exist yet
            for group in groups:
                key = (topic, str(group.get("name", "")))
                # ``lag`` is nil when Redis cannot tell (entries deleted mid-stream): count 0.
                lag[key] = lag.get(key, 0.0) + float(group.get("lag") or 0)
                pending[key] = pending.get(key, 0.0) + float(group.get("pending") or 0)
        return {LAG: lag, PENDING: pending}

    return read


def outbox_gauges(outbox: Outbox) -> list[OutboxGauge]:
    """The gateway outbox's series (name, help, reader, kind), for
    ``Metrics.register_gauge_callback``: what it holds now, what it read back from the spool
    at start and the spooled records it refused there. (What it spools is logged at shutdown:
    no scrape would see a counter.)"""
    return [
        (
            "chorus_outbox_depth",
            "Inbound events the gateway holds, not yet in Redis",
            lambda: float(outbox.depth),
            "gauge",
        ),
        (
            "chorus_outbox_recovered",
            "Events read back from the spool at start and published first",
            lambda: float(outbox.recovered),
            "counter",
        ),
        (
            "chorus_outbox_refused",
            "Spooled records refused at start: not signed with this deployment's spool key",
            lambda: float(outbox.spool.refused if outbox.spool is not None else 0),
            "counter",
        ),
    ]
