"""Identify buckets: no two IDENTIFYs of one bucket within a window, across processes.

Contract-tested on the embedded store and a real Redis (the ``redis_client`` fixture): two
``IdentifyBuckets`` are two gateway processes sharing the store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from bot.state import keys
from bot.state.client import Redis
from bot.state.identify import IdentifyBuckets
from tests.redis_cluster import WITH_CLUSTER, store_url

WINDOW = 0.4  # seconds; really waited by the test that waits


@pytest.fixture(params=WITH_CLUSTER)
def redis_url(request: pytest.FixtureRequest, key_tag: str) -> Iterator[str]:
    """The stores, and a Redis Cluster of three primaries (``tests/redis_cluster.py``)."""
    yield from store_url(request, key_tag)


async def test_a_bucket_is_taken_once_per_window(redis_client: Redis, key_tag: str) -> None:
    a = IdentifyBuckets(redis_client, key_tag, holder="a")
    b = IdentifyBuckets(redis_client, key_tag, holder="b")
    assert await a.try_take(0, 60) == 0.0
    left = await b.try_take(0, 60)
    assert 0 < left <= 60, "the second process is told how long the first one holds it"
    assert await redis_client.get(keys.identify_bucket("discord", key_tag, 0)) == "a"
    assert await a.try_take(0, 60) > 0, "one holder does not take its own bucket twice either"


async def test_buckets_and_bots_are_independent(redis_client: Redis, key_tag: str) -> None:
    one = IdentifyBuckets(redis_client, key_tag)
    assert await one.try_take(0, 60) == 0.0
    assert await one.try_take(1, 60) == 0.0, "bucket 1 is not bucket 0"
    other_bot = IdentifyBuckets(redis_client, f"{key_tag}x")
    assert await other_bot.try_take(0, 60) == 0.0, "another application has its own buckets"


async def test_take_waits_out_the_holders_window(redis_client: Redis, key_tag: str) -> None:
    a = IdentifyBuckets(redis_client, key_tag, holder="a")
    b = IdentifyBuckets(redis_client, key_tag, holder="b")
    loop = asyncio.get_running_loop()
    assert await a.take(0, WINDOW) == 0.0
    started = loop.time()
    waited = await b.take(0, WINDOW)
    assert waited > 0
    assert loop.time() - started >= WINDOW * 0.9  # the key's own expiry ended the wait
    assert await redis_client.get(b.key(0)) == "b"


async def test_concurrent_takers_get_the_bucket_one_at_a_time(
    redis_client: Redis, key_tag: str
) -> None:
    """Four processes race for one bucket: exactly one wins each round."""
    takers = [IdentifyBuckets(redis_client, key_tag, holder=f"p{i}") for i in range(4)]
    results = await asyncio.gather(*(t.try_take(0, 60) for t in takers))
    assert sorted(r == 0.0 for r in results) == [False, False, False, True]


async def test_a_lapsed_bucket_is_free_again(redis_client: Redis, key_tag: str) -> None:
    """A holder killed mid-window blocks the bucket only until its key lapses."""
    a = IdentifyBuckets(redis_client, key_tag, holder="a")
    assert await a.try_take(2, 60) == 0.0
    await redis_client.delete(a.key(2))  # what the key's expiry does
    assert await IdentifyBuckets(redis_client, key_tag).try_take(2, 60) == 0.0
