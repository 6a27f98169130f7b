"""Per-minute and per-day counters in Redis, for the admin dashboard's charts and totals.

Why not Prometheus: the dashboard reads its state from Redis, so any process of a scaled
deployment can serve it and every process's counts land in one place. Why counted in memory and
flushed in batches: a message in costs a dict increment, not a Redis command; ``queue_flush``
adds what was counted since the last flush to a pipeline the caller sends anyway (the router's
commit), and ``flush`` sends it alone when nothing else was sent for a second. Each bucket is a
hash with a TTL, so nothing needs sweeping.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from bot.state import keys

MINUTE_SECONDS = 26 * 3600  # a minute bucket outlives the day it belongs to
DAY_SECONDS = 8 * 24 * 3600
COST_SCALE = 1_000_000  # cost is counted in micro-USD (HINCRBY takes integers)


def minute_bucket(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y%m%d%H%M")


def day_bucket(moment: datetime) -> str:
    return "d" + moment.astimezone(UTC).strftime("%Y%m%d")


class Timeline:
    """Counts since the last flush: ``in:<platform>``, ``out:<platform>``, ``replies``,
    ``tokens_in``, ``tokens_out``, ``cache_read``, ``cost_micro``, ``errors``."""

    def __init__(self) -> None:
        self.pending: Counter[str] = Counter()

    def count(self, field: str, amount: int = 1) -> None:
        self.pending[field] += amount

    def cost(self, usd: float | None) -> None:
        if usd:
            self.pending["cost_micro"] += round(usd * COST_SCALE)

    def queue_flush(self, pipe: Pipeline, now: datetime) -> bool:
        """Queue what was counted into ``pipe`` (and forget it here); False when nothing was."""
        pending = {field: n for field, n in self.pending.items() if n}
        self.pending.clear()
        if not pending:
            return False
        for key, ttl in (
            (keys.timeline(minute_bucket(now)), MINUTE_SECONDS),
            (keys.timeline(day_bucket(now)), DAY_SECONDS),
        ):
            for field, amount in pending.items():
                pipe.hincrby(key, field, amount)
            pipe.expire(key, ttl)
        return True

    async def flush(self, redis: Redis, now: datetime) -> None:
        """Send what was counted in a pipeline of its own. A failure puts the counts back."""
        if not self.pending:
            return
        saved = Counter(self.pending)
        try:
            async with redis.pipeline(transaction=False) as pipe:
                if self.queue_flush(pipe, now):
                    await pipe.execute()
        except BaseException:
            self.pending.update(saved)
            raise


async def read_minutes(
    redis: Redis, now: datetime, minutes: int = 60
) -> list[tuple[datetime, dict[str, int]]]:
    """The last ``minutes`` minute buckets, oldest first (empty ones as ``{}``): one round trip."""
    moments = [now - timedelta(minutes=minutes - 1 - i) for i in range(minutes)]
    async with redis.pipeline(transaction=False) as pipe:
        for moment in moments:
            pipe.hgetall(keys.timeline(minute_bucket(moment)))
        found = await pipe.execute()
    return [(m, _ints(raw)) for m, raw in zip(moments, found, strict=True)]


async def read_day(redis: Redis, now: datetime) -> dict[str, int]:
    """Today's (UTC) counters."""
    return _ints(await redis.hgetall(keys.timeline(day_bucket(now))))


def _ints(raw: object) -> dict[str, int]:
    if not isinstance(raw, dict):
        return {}
    return {str(k): int(v) for k, v in raw.items()}


def total(row: dict[str, int], prefix: str) -> int:
    """The sum of every field starting with ``prefix`` (``in:`` over every platform)."""
    return sum(n for field, n in row.items() if field.startswith(prefix))


def series(rows: Sequence[tuple[datetime, dict[str, int]]], prefix: str) -> list[int]:
    return [total(row, prefix) for _, row in rows]
