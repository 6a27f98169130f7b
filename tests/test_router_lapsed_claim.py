"""A claim that lapsed under a turn (Redis away longer than the lease) never costs the answer.

Before, the commit found the claim gone, logged "the answer is not recorded", and the
delivery was acked anyway: if nobody else had taken the message, it was lost. Now the worker
takes the claim again and records the answer it has; if another worker holds the claim, it
leaves the delivery unacked for that worker. The lapse is made by hand (the key deleted, or
set to another worker's token) while the model is held, on a real Redis with the Streams bus.
"""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from bot.bus.topics import INBOUND
from bot.state import keys
from tests.test_router_shutdown import (
    GatedModel,
    _bus,
    _message,
    _pending,
    _replies,
    _router,
)


async def _lapse_during_the_turn(redis: Redis, tag: str, holder: str | None) -> list[str]:
    """One message; while its model call is held, its claim lapses (``holder`` None) or is
    taken by another worker; then the model answers. The pending ids afterwards."""
    publisher, bus, model = _bus(redis, tag, "gateway"), _bus(redis, tag, "w1"), GatedModel("w1")
    router = _router(redis, bus, model)
    running = asyncio.create_task(router.run())
    try:
        await publisher.publish(INBOUND, _message(tag, 1))
        await asyncio.wait_for(model.started.wait(), 20)
        claim = keys.dedupe("console", f"{tag}-m1")
        if holder is None:
            await redis.delete(claim)
        else:
            await redis.set(claim, f"claimed:{holder}:0123456789ab", px=60_000)
        model.gate.set()
        await asyncio.wait_for(router.join(), 20)  # the turn is over
        return list(await _pending(redis, tag, "w1"))
    finally:
        await router.close()
        await bus.close()
        await publisher.close()
        await asyncio.gather(running, return_exceptions=True)


async def test_a_lapsed_claim_is_taken_again_and_the_answer_recorded(
    real_redis: Redis, key_tag: str
) -> None:
    redis = real_redis
    pending = await _lapse_during_the_turn(redis, key_tag, holder=None)
    [reply] = await asyncio.wait_for(_replies(redis, key_tag, 1), 10)
    assert (reply.reply_to_id, reply.text) == (f"{key_tag}-m1", "w1: message 1")
    assert await redis.get(keys.dedupe("console", f"{key_tag}-m1")) == "done"
    assert pending == [], "recorded, so acked"


async def test_a_claim_another_worker_took_is_left_to_it_unacked(
    real_redis: Redis, key_tag: str
) -> None:
    redis = real_redis
    pending = await _lapse_during_the_turn(redis, key_tag, holder="w2")
    stream = keys.bus_stream("outbound:console", 0, key_tag)
    assert await redis.xlen(stream) == 0, "no second answer beside the holder's"
    assert pending == [f"{key_tag}-m1"], "the holder answers and acks it"
