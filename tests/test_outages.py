"""Riding over a Redis outage inside a turn: the claim steps that must stay exactly-once when a
command may or may not have run before the connection dropped. The retry helper itself
(``until_redis_answers``) is tested in tests/test_resilience.py; the whole app against a stopped
and restarted Redis is tests/test_redis_outage.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import ConnectionError as RedisConnectionError

from bot.bus.claims import DONE, Claims


@pytest.mark.redis
async def test_a_retried_claim_recognises_itself(redis_client: Redis, key_tag: str) -> None:
    """The SET NX of a claim may have run when its reply was lost: the retry finds our own
    token and must take it as ours, not wait a whole lease for "another worker"."""
    claim = Claims(redis_client, worker_id="w1").new("discord", f"m-{key_tag}")
    async with redis_client.pipeline(transaction=False) as pipe:
        claim.queue_take(pipe)
        [first] = await pipe.execute()
    async with redis_client.pipeline(transaction=False) as pipe:
        claim.queue_take(pipe)
        [again] = await pipe.execute()
    assert claim.taken(first) is True and claim.taken(again) is True
    other = Claims(redis_client, worker_id="w2").new("discord", f"m-{key_tag}")
    assert other.taken(again) is None  # still another worker's claim for anybody else


@pytest.mark.redis
async def test_a_commit_whose_exec_ran_before_the_connection_dropped_is_not_doubled(
    redis_client: Redis, key_tag: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worst moment: the commit script ran (the reply went out) and then the connection
    dropped, so the worker cannot know. The retry's ownership check finds the claim done, and
    does not publish a second reply."""
    claim = Claims(redis_client, worker_id="w1").new("discord", f"m-{key_tag}")
    async with redis_client.pipeline(transaction=False) as pipe:
        claim.queue_take(pipe)
        assert claim.taken((await pipe.execute())[0])
    stream = f"replies-{key_tag}"
    real_eval = Redis.eval
    drops = [1]

    async def eval_then_drop(self: Redis, *args: Any) -> Any:
        result = await real_eval(self, *args)
        if drops:
            drops.pop()
            raise RedisConnectionError("Connection reset by peer (after the commit ran)")
        return result

    monkeypatch.setattr(Redis, "eval", eval_then_drop)
    assert await claim.commit(queue_reply(stream))
    assert not drops, "the drop happened"
    assert await redis_client.xlen(stream) == 1, "one reply, not two"
    assert await redis_client.get(claim.key) == DONE
    await redis_client.delete(stream)


@pytest.mark.redis
async def test_a_commit_that_never_reached_redis_is_retried_until_it_does(
    redis_client: Redis, key_tag: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    claim = Claims(redis_client, worker_id="w1").new("discord", f"m-{key_tag}")
    async with redis_client.pipeline(transaction=False) as pipe:
        claim.queue_take(pipe)
        assert claim.taken((await pipe.execute())[0])
    stream = f"replies-{key_tag}"
    real_eval = Redis.eval
    failures = [1, 1]

    async def refuse_twice(self: Redis, *args: Any) -> Any:
        if failures:
            failures.pop()
            raise RedisConnectionError("Connection refused")
        return await real_eval(self, *args)

    monkeypatch.setattr(Redis, "eval", refuse_twice)
    assert await claim.commit(queue_reply(stream))
    assert await redis_client.xlen(stream) == 1
    assert await redis_client.get(claim.key) == DONE
    await redis_client.delete(stream)


@pytest.mark.redis
async def test_a_wait_for_another_workers_claim_ends_soon_after_it_finishes(
    redis_client: Redis, key_tag: str
) -> None:
    """After an outage a survivor may reclaim entries their first worker is still finishing;
    it must notice that worker's "done" within about a second, not at the 60 s lease expiry
    (which held a whole conversation back for a minute before)."""
    holder = Claims(redis_client, worker_id="w1", lease_ms=60_000).new("discord", f"m-{key_tag}")
    async with redis_client.pipeline(transaction=False) as pipe:
        holder.queue_take(pipe)
        assert holder.taken((await pipe.execute())[0])
    waiter = Claims(redis_client, worker_id="w2", lease_ms=60_000).new("discord", f"m-{key_tag}")
    waiting = asyncio.create_task(waiter.wait_and_take())
    await asyncio.sleep(0.3)
    assert not waiting.done()
    assert await holder.commit(lambda pipe: None)
    assert await asyncio.wait_for(waiting, 5) is False  # answered by the holder: skip it


def queue_reply(stream: str) -> Callable[[Pipeline], None]:
    """The write a claim commits with its done marker: one reply appended to ``stream``."""

    def write(pipe: Pipeline) -> None:
        pipe.xadd(stream, {"e": "the reply"})

    return write
