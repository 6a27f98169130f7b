"""Claims that cannot double: two workers never both commit an answer to one message.

The races are replayed step by step on every turn store (the twin, the embedded store, a real
Redis), with the lease lapse played by deleting the key (what expiry, or a Redis restart that
lost the key, does). Each test states the interleaving that, unguarded, let both workers write
the reply: a worker trusted its own clock ("my claim is fresh, nobody can have taken it") and
committed without checking.
"""

from __future__ import annotations

import asyncio

from bot.state.claims import DONE, Claims
from tests.turn_rig import Store, conversation, lapse, replies, reply, take, value

LEASE_MS = 60_000


async def test_a_retried_claim_whose_lease_lapsed_does_not_commit_over_the_next_holder(
    turn_store: Store, key_tag: str
) -> None:
    """A's claim SET runs but its answer is lost; A's retry finds its own token (SET NX leaves
    the key, and its lease, alone), so its lease began at the first attempt. The lease lapses;
    B takes the message and answers. A must not date its lease from the retry and commit
    unchecked: that made two replies."""
    conv = conversation(key_tag)
    a = Claims(turn_store, worker_id="a", lease_ms=LEASE_MS).new("slack", f"m-{key_tag}")
    assert await take(turn_store, a) is True  # armed (the answer "got lost")
    assert await take(turn_store, a) is True  # the retry recognises itself

    await lapse(turn_store, a.key)
    b = Claims(turn_store, worker_id="b", lease_ms=LEASE_MS).new("slack", f"m-{key_tag}")
    assert await take(turn_store, b) is True
    assert await b.commit(reply(conv, "b")) is True

    await a.commit(reply(conv, "a"))
    assert await replies(turn_store, conv) == ["b"]
    assert await value(turn_store, a.key) == DONE


async def test_a_just_taken_claim_that_the_store_lost_is_not_committed(
    turn_store: Store, key_tag: str
) -> None:
    """A takes the claim; moments later the store loses the key (a restart without
    persistence) and B claims the redelivered message. A finishes well inside its lease,
    before any renewal could notice: its commit must still check ownership."""
    conv = conversation(key_tag)
    a = Claims(turn_store, worker_id="a", lease_ms=LEASE_MS).new("slack", f"m-{key_tag}")
    assert await take(turn_store, a) is True
    await lapse(turn_store, a.key)
    b = Claims(turn_store, worker_id="b", lease_ms=LEASE_MS).new("slack", f"m-{key_tag}")
    assert await take(turn_store, b) is True

    assert await a.commit(reply(conv, "a")) is False
    assert await b.commit(reply(conv, "b")) is True
    assert await replies(turn_store, conv) == ["b"]


async def test_a_renewal_that_finds_the_claim_lost_marks_it_and_stops(
    turn_store: Store, key_tag: str
) -> None:
    """A holds a claim; the store loses the key and B claims the redelivered message. A's next
    renewal sees B's token: it must not extend B's lease, and A's claim is marked lost."""
    conv = conversation(key_tag)
    a = Claims(turn_store, worker_id="a", lease_ms=300).new("slack", f"m-{key_tag}")
    assert await take(turn_store, a) is True
    await lapse(turn_store, a.key)
    b = Claims(turn_store, worker_id="b", lease_ms=LEASE_MS).new("slack", f"m-{key_tag}")
    assert await take(turn_store, b) is True

    async with a.renewing():
        for _ in range(200):  # the renewal runs every lease/3 = 0.1 s
            if a.lost:
                break
            await asyncio.sleep(0.05)
    assert a.lost
    assert await turn_store.remaining_ms(a.key) > 300, "B's lease was not touched by A"
    assert await a.commit(reply(conv, "a")) is False
    assert await b.commit(reply(conv, "b")) is True
    assert await replies(turn_store, conv) == ["b"]


async def test_a_turn_longer_than_its_lease_keeps_the_claim_by_renewing(
    turn_store: Store, key_tag: str
) -> None:
    """The renewal starts a third of a lease in (a timer before that) and repeats: a turn that
    runs for several leases still holds its claim and commits."""
    a = Claims(turn_store, worker_id="a", lease_ms=1200).new("slack", f"m-{key_tag}")
    assert await take(turn_store, a) is True
    async with a.renewing():
        for _ in range(30):  # 3 s: two and a half leases (renewed every 0.4 s)
            await asyncio.sleep(0.1)
            assert await value(turn_store, a.key) == a.token
    assert not a.lost
    assert await a.commit(reply(conversation(key_tag), "a")) is True


async def test_a_claim_that_lapsed_with_nobody_taking_it_is_taken_back_and_committed(
    turn_store: Store, key_tag: str
) -> None:
    """A holds a claim when the store goes away for longer than the lease; the key lapses and
    no other worker takes the message. A's answer is the only one coming: a commit that gave up
    on a vanished claim would leave the acked message unanswered."""
    conv = conversation(key_tag)
    a = Claims(turn_store, worker_id="a", lease_ms=LEASE_MS).new("slack", f"m-{key_tag}")
    assert await take(turn_store, a) is True
    await lapse(turn_store, a.key)  # the lease lapsed during the outage

    assert await a.commit(reply(conv, "a")) is True
    assert await replies(turn_store, conv) == ["a"]
    assert await value(turn_store, a.key) == DONE
    b = Claims(turn_store, worker_id="b", lease_ms=LEASE_MS).new("slack", f"m-{key_tag}")
    assert await take(turn_store, b) is False, "the redelivery finds it answered"


async def test_a_released_claim_is_free_for_the_next_delivery(
    turn_store: Store, key_tag: str
) -> None:
    """A failed turn gives its claim back: the next delivery takes it at once, and a release
    by a worker that no longer holds the claim changes nothing."""
    a = Claims(turn_store, worker_id="a", lease_ms=LEASE_MS).new("slack", f"m-{key_tag}")
    assert await take(turn_store, a) is True
    await a.release()
    b = Claims(turn_store, worker_id="b", lease_ms=LEASE_MS).new("slack", f"m-{key_tag}")
    assert await take(turn_store, b) is True
    await a.release()  # not A's any more
    assert await value(turn_store, b.key) == b.token


async def test_a_wait_for_another_workers_claim_ends_soon_after_it_finishes(
    turn_store: Store, key_tag: str
) -> None:
    """After an outage a survivor may reclaim entries their first worker is still finishing;
    it must notice that worker's "done" within about a second, not at the 60 s lease expiry
    (which would hold a whole conversation back for a minute)."""
    holder = Claims(turn_store, worker_id="w1", lease_ms=60_000).new("discord", f"m-{key_tag}")
    assert await take(turn_store, holder) is True
    waiter = Claims(turn_store, worker_id="w2", lease_ms=60_000).new("discord", f"m-{key_tag}")
    waiting = asyncio.create_task(waiter.wait_and_take())
    await asyncio.sleep(0.3)
    assert not waiting.done()
    assert await holder.commit(reply(conversation(key_tag), "w1"))
    assert await asyncio.wait_for(waiting, 5) is False  # answered by the holder: skip it


async def test_record_waits_for_the_worker_that_took_a_lapsed_claim_over(
    turn_store: Store, key_tag: str
) -> None:
    """A's claim lapsed and B took the message over; A's ``record`` finds B holding it, waits
    until B has recorded its answer, and writes nothing of its own."""
    conv = conversation(key_tag)
    claims_a = Claims(turn_store, worker_id="a", lease_ms=LEASE_MS)
    a = claims_a.new("slack", f"m-{key_tag}")
    assert await take(turn_store, a) is True
    await lapse(turn_store, a.key)
    b = Claims(turn_store, worker_id="b", lease_ms=LEASE_MS).new("slack", f"m-{key_tag}")
    assert await take(turn_store, b) is True

    recording = asyncio.create_task(claims_a.record(a, reply(conv, "a")))
    await asyncio.sleep(0.3)
    assert not recording.done(), "A waits while B holds the message"
    assert await b.commit(reply(conv, "b"))
    await asyncio.wait_for(recording, 5)
    assert await replies(turn_store, conv) == ["b"]
