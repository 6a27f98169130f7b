"""The timeline's rollups over 24 hours and 7 days: what the dashboard's Charts page draws.

Every process adds its counts to the minute, hour and day buckets of the timeline
(bot/state/turnlog.py, one pipeline a second); this module reads them back as series. Both
spans read the per-hour buckets (24 or 168 ``HGETALL`` in one pipeline): summing the 1,440
minute buckets of a day on every page view would cost the page its time budget, and the last
hour's minutes are the Overview's charts already. Nothing is computed in the background: a
rollup is a hash the writers already keep, with its TTL.

Latency percentiles come from a histogram kept in the same hashes: each answer adds 1 to
``lat:<upper bound>`` (``LATENCY_BOUNDS_MS``), so buckets of different processes and minutes
simply add up, and a percentile is the upper bound of the bucket where the running count
reaches it (an estimate no coarser than the bounds; a mean of percentiles would be wrong).
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from bot.state import keys, turnlog
from bot.state.client import Redis

LATENCY_BOUNDS_MS = (
    100, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 4000, 5000, 7500,
    10_000, 15_000, 20_000, 30_000, 60_000, 120_000,
)  # fmt: skip
OVER = "lat:over"  # slower than the last bound
POINTS_24H, POINTS_7D = 24, 168


def latency_field(ms: float) -> str:
    """The histogram field an answer of ``ms`` milliseconds adds to."""
    at = bisect.bisect_left(LATENCY_BOUNDS_MS, ms)
    return OVER if at >= len(LATENCY_BOUNDS_MS) else f"lat:{LATENCY_BOUNDS_MS[at]}"


def percentile(histogram: Mapping[str, int], share: float) -> float | None:
    """The latency (ms) under which ``share`` of the answers fell: the upper bound of the bucket
    where the running count reaches it (None with no answer; the last bound for ``lat:over``)."""
    counts = [histogram.get(f"lat:{bound}", 0) for bound in LATENCY_BOUNDS_MS]
    counts.append(histogram.get(OVER, 0))
    total = sum(counts)
    if not total:
        return None
    wanted, running = share * total, 0
    for bound, count in zip((*LATENCY_BOUNDS_MS, LATENCY_BOUNDS_MS[-1]), counts, strict=True):
        running += count
        if running >= wanted:
            return float(bound)
    return float(LATENCY_BOUNDS_MS[-1])


@dataclass
class Point:
    """One point of a chart: the counts of its buckets, summed."""

    at: datetime  # the point's start (UTC)
    counts: Counter[str] = field(default_factory=Counter)

    @property
    def answers(self) -> int:
        return self.counts["replies"]

    @property
    def errors(self) -> int:
        return self.counts["errors"]

    @property
    def tokens(self) -> int:
        return self.counts["tokens_in"] + self.counts["tokens_out"]

    @property
    def cost(self) -> float:
        return self.counts["cost_micro"] / turnlog.COST_SCALE

    @property
    def cache_share(self) -> float:
        sent = self.counts["tokens_in"]
        return self.counts["cache_read"] / sent if sent else 0.0

    def latency(self, share: float) -> float | None:
        return percentile(self.counts, share)


@dataclass
class Rollup:
    """A chart's points (oldest first) and their totals."""

    span: str  # "24h" or "7d"
    step: timedelta
    points: list[Point]

    @property
    def total(self) -> Point:
        whole = Point(self.points[0].at if self.points else datetime.now(UTC))
        for point in self.points:
            whole.counts.update(point.counts)
        return whole

    def series(self, name: str) -> list[float]:
        """``answers``, ``errors``, ``tokens``, ``cost``, ``cache_share``, ``p50``, ``p95``,
        ``p99`` per point (a percentile with no answer is 0)."""
        if name in ("p50", "p95", "p99"):
            share = int(name[1:]) / 100
            return [p.latency(share) or 0.0 for p in self.points]
        return [float(getattr(p, name)) for p in self.points]


async def _buckets(redis: Redis, names: Sequence[str]) -> list[dict[str, int]]:
    async with redis.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.hgetall(keys.timeline(name))
        found = await pipe.execute()
    return [
        {str(k): int(v) for k, v in raw.items()} if isinstance(raw, dict) else {} for raw in found
    ]


async def last_24_hours(redis: Redis, now: datetime) -> Rollup:
    """``POINTS_24H`` hourly points from the hour buckets; the last is ``now``'s hour."""
    return await _hours(redis, now, POINTS_24H, "24h")


async def last_7_days(redis: Redis, now: datetime) -> Rollup:
    """``POINTS_7D`` hourly points from the hour buckets; the last is ``now``'s hour."""
    return await _hours(redis, now, POINTS_7D, "7d")


async def _hours(redis: Redis, now: datetime, hours: int, span: str) -> Rollup:
    end = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    moments = [end - timedelta(hours=hours - 1 - i) for i in range(hours)]
    found = await _buckets(redis, [turnlog.hour_bucket(m) for m in moments])
    points = [Point(m, Counter(c)) for m, c in zip(moments, found, strict=True)]
    return Rollup(span, timedelta(hours=1), points)
