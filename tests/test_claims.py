"""Claims that cannot double: two workers never both commit an answer to one message.

The races are replayed step by step on both backends, with the workers' clocks in the test's
hands and the lease lapse in Redis played by deleting the key (what expiry, or a Redis restart
that lost the key, does). Each test first states the interleaving that, before the fix, let
both workers write the reply.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from bot.bus.claims import DONE, Claim, Claims

LEASE_MS = 60_000


class Clock:
    """A monotonic clock that moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def take(redis: Redis, claim: Claim) -> bool | None:
    async with redis.pipeline(transaction=False) as pipe:
        claim.queue_take(pipe)
        [previous] = await pipe.execute()
    return claim.taken(previous)


def reply_writer(redis_key: str, worker: str) -> Callable[[Pipeline], None]:
    """The commit's side effect: append the worker's name to a list of replies."""

    def fill(pipe: Pipeline) -> None:
        pipe.rpush(redis_key, worker)

    return fill


@pytest.mark.redis
async def test_a_retried_claim_keeps_the_clock_of_its_first_attempt(
    redis_client: Redis, key_tag: str
) -> None:
    """A's claim SET runs at t=0 but its reply is lost; A's retry at t=20 finds its own token
    (SET NX leaves the key, and its lease, alone). The lease still ends at t=60. Before the
    fix A dated its lease from t=20, believed it fresh at t=45 and committed without a check
    after B had taken the lapsed claim and answered: two replies."""
    clock_a = Clock()
    message = f"m-{key_tag}"
    replies = f"replies:{key_tag}"
    a = Claims(redis_client, worker_id="a", lease_ms=LEASE_MS, clock=clock_a).new("slack", message)
    assert await take(redis_client, a) is True  # t=0: armed (the answer "got lost")
    clock_a.now = 20.0
    assert await take(redis_client, a) is True  # the retry recognises itself
    assert a.since == 0.0, "the lease began with the first attempt"

    clock_a.now = 61.0
    await redis_client.delete(a.key)  # the lease lapses at t=60
    b = Claims(redis_client, worker_id="b", lease_ms=LEASE_MS).new("slack", message)
    assert await take(redis_client, b) is True
    assert await b.commit(reply_writer(replies, "b")) is True

    clock_a.now = 45.0  # A finishes its turn "at t=45" by its own (stale) reckoning
    assert not a.fresh()
    await a.commit(reply_writer(replies, "a"))
    assert await redis_client.lrange(replies, 0, -1) == ["b"]
    assert await redis_client.get(a.key) == DONE
    await redis_client.delete(replies, a.key)


@pytest.mark.redis
async def test_a_renewal_that_finds_the_claim_lost_forgets_it_at_once(
    redis_client: Redis, key_tag: str
) -> None:
    """A holds a fresh claim; Redis loses the key (a restart without persistence) and B claims
    the redelivered message. A's next renewal sees B's token. Before the fix A kept its old
    clock, still "fresh", and committed without a check: two replies."""
    message = f"m-{key_tag}"
    replies = f"replies:{key_tag}"
    a = Claims(redis_client, worker_id="a", lease_ms=300, clock=Clock()).new("slack", message)
    assert await take(redis_client, a) is True
    assert a.fresh()  # A's clock never moves: only the renewal's finding can make it stale
    await redis_client.delete(a.key)
    b = Claims(redis_client, worker_id="b", lease_ms=LEASE_MS).new("slack", message)
    assert await take(redis_client, b) is True

    async with a.renewing():
        for _ in range(200):  # the renewal runs every lease/3 = 0.1 s
            if a.since is None:
                break
            await asyncio.sleep(0.05)
    assert a.since is None and not a.fresh()
    assert await a.commit(reply_writer(replies, "a")) is False
    assert await b.commit(reply_writer(replies, "b")) is True
    assert await redis_client.lrange(replies, 0, -1) == ["b"]
    await redis_client.delete(replies, a.key)
