"""Slash-command interactions marked while held (bot/state/interactions.py), contract-tested on
the embedded store and a real Redis: another gateway process sees the mark, and it goes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bot.state.client import Redis
from bot.state.interactions import PendingInteractions
from tests.redis_cluster import WITH_CLUSTER, store_url


@pytest.fixture(params=WITH_CLUSTER)
def redis_url(request: pytest.FixtureRequest, key_tag: str) -> Iterator[str]:
    """The stores, and a Redis Cluster of three primaries (``tests/redis_cluster.py``)."""
    yield from store_url(request, key_tag)


async def test_a_held_interaction_is_seen_by_another_process(
    redis_client: Redis, key_tag: str
) -> None:
    holder, other = PendingInteractions(redis_client), PendingInteractions(redis_client)
    assert not await other.held(f"{key_tag}1")
    await holder.hold(f"{key_tag}1", 60)
    assert await other.held(f"{key_tag}1")
    assert not await other.held(f"{key_tag}2"), "an ordinary message id is not held"
    await holder.release(f"{key_tag}1")
    assert not await other.held(f"{key_tag}1")


async def test_the_mark_lapses_by_itself(redis_client: Redis, key_tag: str) -> None:
    holder = PendingInteractions(redis_client)
    await holder.hold(f"{key_tag}9", 60)
    assert 0 < await redis_client.pttl(f"chorus:v1:interaction:discord:{key_tag}9") <= 60_000


async def test_platforms_are_apart(redis_client: Redis, key_tag: str) -> None:
    await PendingInteractions(redis_client, "slack").hold(key_tag, 60)
    assert not await PendingInteractions(redis_client, "discord").held(key_tag)
