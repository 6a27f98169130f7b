"""Riding over a Redis outage inside a turn: the claim steps that must stay exactly-once when a
command may or may not have run before the connection dropped (``RedisTurnStore``). The retry helper itself
(``until_redis_answers``) is tested in tests/test_resilience.py; the whole app against a stopped
and restarted Redis is tests/test_redis_outage.py."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from bot.state.claims import DONE, Claim, Claims
from bot.state.history import HistoryStore
from bot.state.redis_turn import RedisTurnStore
from bot.state.turn import StreamAppend, TurnChanges
from tests.turn_rig import take


@pytest.mark.redis
async def test_a_retried_claim_recognises_itself(redis_client: Redis, key_tag: str) -> None:
    """The SET NX of a claim may have run when its reply was lost: the retry finds our own
    token and must take it as ours, not wait a whole lease for "another worker"."""
    store = RedisTurnStore(redis_client)
    claim = Claims(store, worker_id="w1").new("discord", f"m-{key_tag}")
    first = await store.take(claim.key, claim.token, 10_000)
    again = await store.take(claim.key, claim.token, 10_000)
    assert claim.taken(first) is True and claim.taken(again) is True
    other = Claims(store, worker_id="w2").new("discord", f"m-{key_tag}")
    assert other.taken(again) is None  # still another worker's claim for anybody else


@pytest.mark.redis
async def test_a_commit_whose_exec_ran_before_the_connection_dropped_is_not_doubled(
    redis_client: Redis, key_tag: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worst moment: the commit script ran (the reply went out) and then the connection
    dropped, so the worker cannot know. The retry's ownership check finds the claim done, and
    does not publish a second reply."""
    claim = await taken(redis_client, key_tag)
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
    claim = await taken(redis_client, key_tag)
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


async def taken(redis: Redis, key_tag: str) -> Claim:
    """A claim of worker ``w1``, taken."""
    store = RedisTurnStore(redis, history=HistoryStore(redis, max_messages=40, ttl_seconds=60))
    claim = Claims(store, worker_id="w1").new("discord", f"m-{key_tag}")
    assert await take(store, claim) is True
    return claim


def queue_reply(stream: str) -> TurnChanges:
    """The write a claim commits with its done marker: one reply appended to ``stream``."""
    return TurnChanges(reply=StreamAppend(stream, {"e": "the reply"}, maxlen=1000))
