"""Claims that cannot double: two workers never both commit an answer to one message.

The races are replayed step by step on both backends, with the lease lapse in Redis played by
deleting the key (what expiry, or a Redis restart that lost the key, does). Each test states
the interleaving that, before the fix, let both workers write the reply: a worker trusted its
own clock ("my claim is fresh, nobody can have taken it") and committed without checking.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from bot.bus.claims import DONE, Claim, Claims

LEASE_MS = 60_000


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
async def test_a_retried_claim_whose_lease_lapsed_does_not_commit_over_the_next_holder(
    redis_client: Redis, key_tag: str
) -> None:
    """A's claim SET runs but its answer is lost; A's retry finds its own token (SET NX leaves
    the key, and its lease, alone), so its lease began at the first attempt. The lease lapses;
    B takes the message and answers. Before the fix A dated its lease from the retry, still
    believed it fresh, and committed without a check: two replies."""
    message = f"m-{key_tag}"
    replies = f"replies:{key_tag}"
    a = Claims(redis_client, worker_id="a", lease_ms=LEASE_MS).new("slack", message)
    assert await take(redis_client, a) is True  # armed (the answer "got lost")
    assert await take(redis_client, a) is True  # the retry recognises itself

    await redis_client.delete(a.key)  # the lease lapses
    b = Claims(redis_client, worker_id="b", lease_ms=LEASE_MS).new("slack", message)
    assert await take(redis_client, b) is True
    assert await b.commit(reply_writer(replies, "b")) is True

    await a.commit(reply_writer(replies, "a"))
    assert await redis_client.lrange(replies, 0, -1) == ["b"]
    assert await redis_client.get(a.key) == DONE
    await redis_client.delete(replies, a.key)


@pytest.mark.redis
async def test_a_just_taken_claim_that_redis_lost_is_not_committed(
    redis_client: Redis, key_tag: str
) -> None:
    """A takes the claim; moments later Redis loses the key (a restart without persistence)
    and B claims the redelivered message. A finishes well inside its lease, before any renewal
    could notice. Before the fix A's commit skipped the ownership check for a claim this
    young and wrote its reply beside B's."""
    message = f"m-{key_tag}"
    replies = f"replies:{key_tag}"
    a = Claims(redis_client, worker_id="a", lease_ms=LEASE_MS).new("slack", message)
    assert await take(redis_client, a) is True
    await redis_client.delete(a.key)
    b = Claims(redis_client, worker_id="b", lease_ms=LEASE_MS).new("slack", message)
    assert await take(redis_client, b) is True

    assert await a.commit(reply_writer(replies, "a")) is False
    assert await b.commit(reply_writer(replies, "b")) is True
    assert await redis_client.lrange(replies, 0, -1) == ["b"]
    await redis_client.delete(replies, a.key)


@pytest.mark.redis
async def test_a_renewal_that_finds_the_claim_lost_marks_it_and_stops(
    redis_client: Redis, key_tag: str
) -> None:
    """A holds a claim; Redis loses the key and B claims the redelivered message. A's next
    renewal sees B's token: it must not extend B's lease, and A's claim is marked lost."""
    message = f"m-{key_tag}"
    replies = f"replies:{key_tag}"
    a = Claims(redis_client, worker_id="a", lease_ms=300).new("slack", message)
    assert await take(redis_client, a) is True
    await redis_client.delete(a.key)
    b = Claims(redis_client, worker_id="b", lease_ms=LEASE_MS).new("slack", message)
    assert await take(redis_client, b) is True

    async with a.renewing():
        for _ in range(200):  # the renewal runs every lease/3 = 0.1 s
            if a.lost:
                break
            await asyncio.sleep(0.05)
    assert a.lost
    assert await redis_client.pttl(a.key) > 300, "B's lease was not touched by A's renewal"
    assert await a.commit(reply_writer(replies, "a")) is False
    assert await b.commit(reply_writer(replies, "b")) is True
    assert await redis_client.lrange(replies, 0, -1) == ["b"]
    await redis_client.delete(replies, a.key)


@pytest.mark.redis
async def test_a_turn_longer_than_its_lease_keeps_the_claim_by_renewing(
    redis_client: Redis, key_tag: str
) -> None:
    """The renewal starts a third of a lease in (a timer before that) and repeats: a turn that
    runs for several leases still holds its claim and commits."""
    a = Claims(redis_client, worker_id="a", lease_ms=1200).new("slack", f"m-{key_tag}")
    assert await take(redis_client, a) is True
    async with a.renewing():
        for _ in range(30):  # 3 s: two and a half leases (renewed every 0.4 s)
            await asyncio.sleep(0.1)
            assert await redis_client.get(a.key) == a.token
    assert not a.lost
    assert await a.commit(reply_writer(f"replies:{key_tag}", "a")) is True
    await redis_client.delete(f"replies:{key_tag}", a.key)


@pytest.mark.redis
async def test_a_claim_that_lapsed_with_nobody_taking_it_is_taken_back_and_committed(
    redis_client: Redis, key_tag: str
) -> None:
    """A holds a claim when Redis goes away for longer than the lease; the key lapses and no
    other worker takes the message. A's answer is the only one coming: before the fix the
    commit found the claim gone, gave up, and the acked message was never answered."""
    message = f"m-{key_tag}"
    replies = f"replies:{key_tag}"
    a = Claims(redis_client, worker_id="a", lease_ms=LEASE_MS).new("slack", message)
    assert await take(redis_client, a) is True
    await redis_client.delete(a.key)  # the lease lapsed during the outage

    assert await a.commit(reply_writer(replies, "a")) is True
    assert await redis_client.lrange(replies, 0, -1) == ["a"]
    assert await redis_client.get(a.key) == DONE
    b = Claims(redis_client, worker_id="b", lease_ms=LEASE_MS).new("slack", message)
    assert await take(redis_client, b) is False, "the redelivery finds it answered"
    await redis_client.delete(replies, a.key)
