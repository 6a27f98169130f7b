"""Slash-command interactions held by gateway processes and their answers routed to the holder
(bot/state/interactions.py), contract-tested on the embedded store and a real Redis: another
process sees who holds a command, an answered command stays private, and a forwarded answer
reaches the holder's inbox, with the holder's liveness told apart from its death."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from bot.state import keys_interactions
from bot.state.client import Redis
from bot.state.interactions import ANSWERED, PendingInteractions
from tests.redis_cluster import WITH_CLUSTER, store_url


@pytest.fixture(params=WITH_CLUSTER)
def redis_url(request: pytest.FixtureRequest, key_tag: str) -> Iterator[str]:
    """The stores, and a Redis Cluster of three primaries (``tests/redis_cluster.py``)."""
    yield from store_url(request, key_tag)


async def test_a_held_interaction_names_its_holder_to_another_process(
    redis_client: Redis, key_tag: str
) -> None:
    holder, other = PendingInteractions(redis_client), PendingInteractions(redis_client)
    assert not await other.held(f"{key_tag}1")
    await holder.hold(f"{key_tag}1", 60)
    assert await other.holder_of(f"{key_tag}1") == holder.holder != other.holder
    assert not await other.held(f"{key_tag}2"), "an ordinary message id is not held"
    await holder.release(f"{key_tag}1", 60)
    assert await other.holder_of(f"{key_tag}1") == ANSWERED, "still private once answered"
    await other.release(f"{key_tag}3", 60)  # never held: no mark is made
    assert not await other.held(f"{key_tag}3")


async def test_the_mark_lapses_by_itself_also_once_released(
    redis_client: Redis, key_tag: str
) -> None:
    holder = PendingInteractions(redis_client)
    await holder.hold(f"{key_tag}9", 60)
    await holder.release(f"{key_tag}9", 30)
    assert 0 < await redis_client.pttl(f"chorus:v1:interaction:discord:{key_tag}9") <= 30_000


async def test_platforms_are_apart(redis_client: Redis, key_tag: str) -> None:
    await PendingInteractions(redis_client, "slack").hold(key_tag, 60)
    assert not await PendingInteractions(redis_client, "discord").held(key_tag)


async def test_a_forwarded_answer_reaches_the_live_holder_once(redis_client: Redis) -> None:
    holder, reader = PendingInteractions(redis_client), PendingInteractions(redis_client)
    assert await holder.receive(0.1) is None  # nothing yet; now it is alive
    assert await reader.forward(holder.holder, '{"a": 1}', 60) is True
    assert await holder.receive(2) == '{"a": 1}'
    assert await holder.receive(0.1) is None, "taken once"
    inbox = keys_interactions.interaction_inbox("discord", holder.holder)
    assert await redis_client.exists(inbox) == 0
    await holder.leave()
    assert await reader.forward(holder.holder, '{"a": 2}', 60) is False, "left: not alive"
    assert 0 < await redis_client.pttl(inbox) <= 60_000, "an undelivered answer lapses"


async def test_a_holder_waiting_on_its_inbox_gets_an_answer_forwarded_meanwhile(
    redis_client: Redis,
) -> None:
    holder, reader = PendingInteractions(redis_client), PendingInteractions(redis_client)
    waiting = asyncio.create_task(holder.receive(3))
    alive = keys_interactions.gateway_alive("discord", holder.holder)
    async with asyncio.timeout(10):
        while not await redis_client.exists(alive):  # noqa: ASYNC110 (a store's state)
            await asyncio.sleep(0.01)
    assert await reader.forward(holder.holder, "answer", 60) is True
    assert await waiting == "answer"


async def test_a_holder_that_never_read_its_inbox_is_not_alive(redis_client: Redis) -> None:
    gone = PendingInteractions(redis_client)
    assert await PendingInteractions(redis_client).forward(gone.holder, "x", 1) is False
