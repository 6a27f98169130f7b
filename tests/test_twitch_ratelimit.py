"""The Redis-shared Twitch send limiter: two processes, one budget, never over it.

Runs against the embedded store and a real Redis (``redis_url``). Time is a fake clock that the
fake ``sleep`` advances, so a 30-second window costs no real waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Iterator

import pytest
from redis.asyncio import Redis

from bot.state import connect
from bot.state.platforms import SharedRateLimiter, bucket_key
from tests.redis_cluster import WITH_CLUSTER, store_url


@pytest.fixture(params=WITH_CLUSTER)
def redis_url(request: pytest.FixtureRequest, key_tag: str) -> Iterator[str]:
    """The stores, and a Redis Cluster of three primaries (``tests/redis_cluster.py``)."""
    yield from store_url(request, key_tag)


class FakeTime:
    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)  # let the other "process" run


def _max_in_window(grants: list[float], window: float) -> int:
    grants = sorted(grants)
    return max(sum(1 for g in grants if start <= g < start + window) for start in grants)


async def test_two_limiters_on_one_redis_never_exceed_the_window(
    redis_url: str, key_tag: str
) -> None:
    time = FakeTime()
    a_client, b_client = await connect.open_redis(redis_url), await connect.open_redis(redis_url)
    try:
        last_read = [0.0, 0.0]  # the clock each limiter read last: its grant's time

        def clock_of(i: int) -> Callable[[], float]:
            def read() -> float:
                last_read[i] = time.now
                return time.now

            return read

        limiters = [
            SharedRateLimiter(
                client, platform="twitch", window=30.0, clock=clock_of(i), sleep=time.sleep
            )
            for i, client in enumerate((a_client, b_client))
        ]
        grants: list[float] = []
        rng = random.Random(7)

        async def process(i: int) -> None:
            for _ in range(35):
                await limiters[i].acquire(f"bot-{key_tag}", 20)
                grants.append(last_read[i])
                time.now += rng.uniform(0, 0.5)  # the send itself takes a moment
                await asyncio.sleep(0)

        await asyncio.gather(process(0), process(1))
        assert len(grants) == 70
        assert _max_in_window(grants, 30.0) <= 20
        assert _max_in_window(grants, 30.0) == 20  # the budget is used, not wasted
        assert time.sleeps, "the 21st send must have waited"
        assert time.now - 1_700_000_000.0 >= 90  # 70 sends need at least 3 full windows
    finally:
        await a_client.aclose()
        await b_client.aclose()


async def test_try_acquire_reports_the_wait_until_the_oldest_send_leaves(
    redis_client: Redis, key_tag: str
) -> None:
    time = FakeTime()
    limiter = SharedRateLimiter(
        redis_client, platform="twitch", window=30.0, clock=time.clock, sleep=time.sleep
    )
    bucket = f"b-{key_tag}"
    for _ in range(3):
        assert await limiter.try_acquire(bucket, 3) == 0.0
        time.now += 1
    # sends at t0, t0+1, t0+2; now t0+3: the first leaves the window at t0+30
    assert await limiter.try_acquire(bucket, 3) == pytest.approx(27.0)
    assert (
        await redis_client.zcard(bucket_key("twitch", bucket)) == 3
    )  # the refused attempt left no trace
    assert 0 < await redis_client.pttl(bucket_key("twitch", bucket)) <= 31_000
    time.now += 27
    assert await limiter.try_acquire(bucket, 3) == 0.0


async def test_pause_holds_every_process_and_the_wait_is_logged(
    redis_url: str, key_tag: str, caplog: pytest.LogCaptureFixture
) -> None:
    time = FakeTime()
    a_client, b_client = await connect.open_redis(redis_url), await connect.open_redis(redis_url)
    try:
        a = SharedRateLimiter(
            a_client, platform="twitch", window=31.0, clock=time.clock, sleep=time.sleep
        )
        b = SharedRateLimiter(
            b_client, platform="twitch", window=31.0, clock=time.clock, sleep=time.sleep
        )
        bucket = f"p-{key_tag}"
        await a.pause(bucket, 5.0)
        await a.pause(bucket, 1.0)  # a shorter pause never shortens the longer one
        with caplog.at_level(logging.INFO, logger="chorus.twitch.ratelimit"):
            waited = await b.acquire(bucket, 20)
        assert waited == pytest.approx(5.0)
        assert time.sleeps == [pytest.approx(5.0)]
        assert any(getattr(r, "wait_s", None) == 5.0 for r in caplog.records)
    finally:
        await a_client.aclose()
        await b_client.aclose()


async def test_a_cancel_swallowed_inside_a_transaction_still_stops_acquire(key_tag: str) -> None:
    """redis-py can eat a cancellation that lands mid-transaction; acquire must still stop, or
    a closing adapter's send loop lives on (seen as a hung shutdown in the fuzz tests)."""

    class Swallowing(SharedRateLimiter):
        async def try_acquire(self, bucket: str, limit: int) -> float:
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):  # swallowed, as redis-py did
                await asyncio.sleep(0)
            return await super().try_acquire(bucket, limit)

    redis = await connect.open_redis(f"memory://ratelimit-{key_tag}")
    try:
        limiter = Swallowing(redis, platform="twitch", window=31.0)
        with pytest.raises(asyncio.CancelledError):
            await limiter.acquire(f"cancel-{key_tag}", 20)
        assert (
            await redis.zcard(bucket_key("twitch", f"cancel-{key_tag}")) == 1
        )  # granted, then stopped
    finally:
        await redis.aclose()
