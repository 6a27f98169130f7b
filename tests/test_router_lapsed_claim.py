"""A claim that lapsed under a turn (Redis away longer than the lease) never costs the answer,
and never the conversation's order.

Before, the commit found the claim gone, logged "the answer is not recorded", and the
delivery was acked anyway: if nobody else had taken the message, it was lost. Then the worker
took the claim again and recorded its answer, but if another worker held the claim it went on
to the conversation's next message at once, while the holder still answered this one: after a
Redis outage the holder's reply came out behind later ones (the outage test caught it now and
then). Now the worker waits for the holder: its answer recorded (nothing doubles), or its
claim lapsed (then ours is recorded). The lapse is made by hand (the key deleted, or set to
another worker's token) while the model is held, on a real Redis with the Streams bus.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest
from redis.asyncio import Redis

from bot.bus.streams import RedisStreamsBus
from bot.bus.topics import INBOUND, outbound_topic
from bot.events import Reply
from bot.router.core import Router
from bot.state import keys
from tests.test_router_shutdown import (
    GatedModel,
    _bus,
    _message,
    _pending,
    _replies,
    _router,
)

WAITING = "message claimed by another worker; waiting"


class _Run:
    """A gateway's publisher and one worker (``w1``) over the Streams bus, its model held."""

    def __init__(self, redis: Redis, tag: str) -> None:
        self.publisher: RedisStreamsBus = _bus(redis, tag, "gateway")
        self.bus: RedisStreamsBus = _bus(redis, tag, "w1")
        self.model = GatedModel("w1")
        self.router: Router = _router(redis, self.bus, self.model)
        self.running = asyncio.create_task(self.router.run())

    async def finish(
        self, redis: Redis, tag: str
    ) -> tuple[list[tuple[str | None, str]], dict[str, int]]:
        """Once both replies are out and the turns over: who answered what, in stream order,
        and what is still pending at w1."""
        replies = await asyncio.wait_for(_replies(redis, tag, 2), 20)
        await asyncio.wait_for(self.router.join(), 20)
        return [(r.reply_to_id, r.text) for r in replies], await _pending(redis, tag, "w1")

    async def close(self) -> None:
        await self.router.close()
        await self.bus.close()
        await self.publisher.close()
        await asyncio.gather(self.running, return_exceptions=True)


async def _held_then_answered(run: _Run, redis: Redis, tag: str, held_ms: int | None) -> str:
    """Messages 1 and 2 of one conversation; while message 1's model call is held, its claim
    lapses (``held_ms`` None) or worker ``w2`` takes it for ``held_ms``; then the model
    answers. The claim's key."""
    await run.publisher.publish(INBOUND, _message(tag, 1))
    await run.publisher.publish(INBOUND, _message(tag, 2))
    await asyncio.wait_for(run.model.started.wait(), 20)
    claim = keys.dedupe("console", f"{tag}-m1")
    if held_ms is None:
        await redis.delete(claim)
    else:
        await redis.set(claim, "claimed:w2:0123456789ab", px=held_ms)
    run.model.gate.set()
    return claim


class _Waiting(logging.Handler):
    """Set once a worker logs that it waits for another worker's claim."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seen = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == WAITING:
            self.seen.set()


@pytest.fixture
def waiting() -> Iterator[_Waiting]:
    logger, handler = logging.getLogger("chorus.claims"), _Waiting()
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


async def test_a_lapsed_claim_is_taken_again_and_the_answer_recorded(
    real_redis: Redis, key_tag: str
) -> None:
    redis, run = real_redis, _Run(real_redis, key_tag)
    try:
        claim = await _held_then_answered(run, redis, key_tag, held_ms=None)
        said, pending = await run.finish(redis, key_tag)
    finally:
        await run.close()
    assert said == [(f"{key_tag}-m1", "w1: message 1"), (f"{key_tag}-m2", "w1: message 2")]
    assert await redis.get(claim) == "done"
    assert pending == {}, "recorded, so acked"


async def test_a_claim_another_worker_took_is_waited_for_before_the_next_message(
    real_redis: Redis, key_tag: str, waiting: _Waiting
) -> None:
    redis, run = real_redis, _Run(real_redis, key_tag)
    try:
        claim = await _held_then_answered(run, redis, key_tag, held_ms=60_000)
        await asyncio.wait_for(waiting.seen.wait(), 20)
        assert len(run.model.requests) == 1, "message 2 waits while w2 still answers message 1"
        # w2 records its answer, as its commit would: the reply, then the done marker
        conv, m1 = _message(key_tag, 1).conversation, f"{key_tag}-m1"
        answer = Reply(conversation=conv, text="w2: message 1", reply_to_id=m1)
        await run.publisher.publish(outbound_topic("console"), answer)
        await redis.set(claim, "done")
        said, pending = await run.finish(redis, key_tag)
    finally:
        await run.close()
    assert said == [(f"{key_tag}-m1", "w2: message 1"), (f"{key_tag}-m2", "w1: message 2")]
    assert len(run.model.requests) == 2, "w1's own answer to message 1 is dropped, not sent"
    assert pending == {}, "answered by the holder: nothing left to redo"


async def test_a_holder_that_dies_leaves_the_message_to_the_answer_we_have(
    real_redis: Redis, key_tag: str, waiting: _Waiting
) -> None:
    redis, run = real_redis, _Run(real_redis, key_tag)
    try:
        claim = await _held_then_answered(run, redis, key_tag, held_ms=400)  # w2 dies
        await asyncio.wait_for(waiting.seen.wait(), 20)
        said, pending = await run.finish(redis, key_tag)
    finally:
        await run.close()
    assert said == [(f"{key_tag}-m1", "w1: message 1"), (f"{key_tag}-m2", "w1: message 2")]
    assert len(run.model.requests) == 2, "the answer held while waiting is the one recorded"
    assert await redis.get(claim) == "done"
    assert pending == {}
