"""Partition leases fence reads: a consumer reads a partition only while it knows the lease is
its own. The clock is injected; Redis (embedded and real) holds the leases."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection

from bot.bus.leases import PartitionLeases
from tests.redis_cluster import WITH_CLUSTER, store_url
from tests.roundtrips import packed, wire_commands


@pytest.fixture(params=WITH_CLUSTER)
def redis_url(request: pytest.FixtureRequest, key_tag: str) -> Iterator[str]:
    """The stores, and a Redis Cluster of three primaries (``tests/redis_cluster.py``)."""
    yield from store_url(request, key_tag)


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def leases(redis: Redis, tag: str, token: str, clock: Clock) -> PartitionLeases:
    return PartitionLeases(
        redis,
        lease_key=lambda p: f"lease:{{{tag}}}:{p}",  # one slot on a cluster
        members_key=f"members:{tag}",
        partitions=2,
        token=token,
        lease_ms=10_000,
        is_idle=lambda p: True,
        clock=clock,
    )


@pytest.mark.redis
async def test_a_consumer_that_cannot_renew_stops_reading_before_its_lease_can_lapse(
    redis_client: Redis, key_tag: str
) -> None:
    """A worker cut off from Redis used to keep reading its partitions after its leases lapsed
    and another worker took them: both read one conversation, and answered it out of order."""
    clock = Clock()
    mine = leases(redis_client, key_tag, "a", clock)
    await mine.tick()
    assert mine.readable == [0, 1]
    clock.now += 4.0  # a renewal is late (every lease/3 normally): still surely ours
    assert mine.readable == [0, 1]
    clock.now += 1.5  # past half a lease without a confirmed renewal: fenced
    assert mine.readable == [] and mine.owned == {0, 1}
    await mine.tick()  # Redis answers again and the leases are still ours
    assert mine.readable == [0, 1]
    await redis_client.delete(
        f"lease:{{{key_tag}}}:0", f"lease:{{{key_tag}}}:1", f"members:{key_tag}"
    )


@pytest.mark.redis
async def test_after_every_lease_lapsed_only_the_new_holder_reads(
    redis_client: Redis, key_tag: str
) -> None:
    clock = Clock()
    old = leases(redis_client, key_tag, "old", clock)
    await old.tick()
    assert old.readable == [0, 1]
    clock.now += 11.0  # an outage longer than the lease: nothing was renewed
    await redis_client.delete(f"lease:{{{key_tag}}}:0", f"lease:{{{key_tag}}}:1")  # they lapsed
    new = leases(redis_client, key_tag, "new", clock)
    await new.tick()
    assert new.readable == [0, 1]
    assert old.readable == []  # before it has even noticed the loss
    await old.tick()
    assert old.owned == set() and old.readable == []
    await redis_client.delete(
        f"lease:{{{key_tag}}}:0", f"lease:{{{key_tag}}}:1", f"members:{key_tag}"
    )


@pytest.mark.redis
async def test_leases_taken_by_a_cancelled_tick_are_given_back_by_the_release(
    redis_client: Redis, key_tag: str
) -> None:
    """A consumer cancelled while its leases' ``SET NX`` was on its way (on a busy machine,
    its first tick often is) held the partitions for a whole lease: the release knew only
    what Redis had answered. It now gives back whatever holds its token."""
    mine = leases(redis_client, key_tag, "a", Clock())
    sent = asyncio.Event()
    original = AbstractConnection.send_packed_command

    async def sending(self: AbstractConnection, command: Any, check_health: bool = True) -> None:
        await original(self, command, check_health)
        if any(c[0].upper() == b"SET" for c in wire_commands(packed(command))):
            sent.set()  # the SETs are written; their answer is read after this returns

    names = [f"lease:{{{key_tag}}}:{p}" for p in (0, 1)]
    with mock.patch.object(AbstractConnection, "send_packed_command", sending):
        tick = asyncio.create_task(mine.tick())
        await sent.wait()
        tick.cancel()
        await asyncio.gather(tick, return_exceptions=True)
    assert tick.cancelled() and mine.owned == set()  # the answer never came back
    assert await redis_client.mget(names) == ["a", "a"]  # but Redis took the SETs
    await mine.release_all()
    assert await redis_client.mget(names) == [None, None]
    await redis_client.delete(f"members:{key_tag}")
