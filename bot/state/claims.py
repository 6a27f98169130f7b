"""Claims: the protocol that makes every inbound message answered exactly once.

Delivery is at-least-once (a Redis Streams entry is redelivered when its worker dies before
``XACK``), so each message is claimed in Redis before any work:

- **claim**: ``SET chorus:v1:dedupe:{platform}:{id} claimed:{worker}:{nonce} NX PX lease GET``
  (``Guard.take``), part of the turn's one read (``ClaimTake`` in ``bot.state.turn.TurnQuery``),
  so it costs no extra round trip. An empty answer means ours; ``done`` means it was answered already (skip, ack); another worker's value means it is
  being worked on: wait for that worker to finish (``done``) or die (the lease expires) and try
  again. Nobody deletes another worker's claim: takeover happens only through expiry.
- **renewal**: while a turn runs longer than a third of the lease, a background task extends it
  (``Guard.if_holds``: still our token, then ``PEXPIRE``). A renewal that finds the claim
  gone or someone else's marks it ``lost`` and stops. A retried claim that finds its own token
  (its first answer was lost) holds a lease that began at the first attempt; nothing here
  dates a lease from our own clock, because the commit does not trust any such date.
- **commit**: the turn's changes (``bot.state.turn.TurnChanges``: the reply and the ack of the
  message's stream entry when the bus can publish inside a transaction, the history, the rest)
  and the ``done`` marker are written in one atomic step that first checks the claim still
  holds our token (``Guard.if_holds``; on Redis one Lua script, ``bot.state.guarded``):
  ownership is checked on every path, atomically, in one round trip. A worker killed
  before it is answered is redone by another; killed after, the redelivery finds ``done``. A claim that lapsed while Redis was away, with nobody taking it
  over, is taken back (``SET NX``) and committed: nobody else is answering that message, and
  dropping the answer would lose it (its delivery is acked after that commit, by itself). One
  that another worker took over is waited for (``Claims.record``): this worker goes on to the
  conversation's next message only once that worker has recorded its answer. Nothing trusts
  a claim's age by the worker's own clock: a paused process, or a Redis restart that lost the
  key, would make that belief wrong. Renewal and release are guarded the same way.
- **leases are short** (``CHORUS_CLAIM_LEASE_MS``, 10 s by default) and renewed every third of
  a lease while the turn runs, so a worker that dies holds its messages for at most one lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from bot.state import keys
from bot.state.outages import TRANSIENT, until_redis_answers
from bot.state.turn import ClaimTake, Guard, Record, Release, Renew, TurnChanges

log = logging.getLogger("chorus.claims")

DONE = "done"
WAIT_CAP_MS = 1000  # how stale a wait for another worker's claim may get


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass
class Claims:
    """Claims of one worker over one store (``guard``)."""

    guard: Guard
    worker_id: str = field(default_factory=default_worker_id)
    lease_ms: int = 10_000
    done_seconds: int = 3 * 24 * 3600

    def new(self, platform: str, message_id: str, near: str | None = None) -> Claim:
        """A claim of one message; ``near``: the bus stream it came from (on a Redis Cluster
        the claim shares that stream's slot, ``keys.dedupe``)."""
        return Claim(self, keys.dedupe(platform, message_id, near), self._token())

    def _token(self) -> str:
        return f"claimed:{self.worker_id}:{os.urandom(6).hex()}"  # 48 random bits

    async def record(self, claim: Claim, changes: TurnChanges) -> None:
        """Record a turn through ``claim``, or, if the claim lapsed meanwhile, through
        ``record_again``: once this returns, the message is recorded, here or by the worker
        that took it over."""
        if not await claim.commit(changes):
            await self.record_again(claim, changes)

    async def record_again(self, lapsed: Claim, changes: TurnChanges) -> bool:
        """After ``Claim.commit`` found the claim gone (it lapsed while the store was away
        longer than the lease): take it again and record the answer we have, unless someone
        else does. True: recorded now. False: another worker recorded its answer.

        When another worker holds the claim (it reclaimed the entry after the outage and is
        answering it), wait for it to finish, or for its claim to lapse and then record ours:
        this worker moves on to the conversation's next message only once this one is
        recorded, so two workers never answer one conversation side by side (a reply would
        come out after later ones)."""

        async def attempt() -> bool:
            while True:
                claim = Claim(self, lapsed.key, self._token())
                if not await claim.wait_and_take():  # free: ours at once; held: waited out
                    return False
                if await claim.commit(changes):
                    return True

        outcome = await until_redis_answers("record an answer again", attempt)
        log.info("re-took a lapsed claim", extra={"key": lapsed.key, "recorded_here": outcome})
        return outcome


@dataclass
class Claim:
    owner: Claims
    key: str
    token: str
    lost: bool = False  # a renewal found the claim gone or someone else's
    recorded: bool = False  # ``commit`` wrote the changes itself (not: found them written)

    # -- taking it -------------------------------------------------------------------------
    @property
    def take(self) -> ClaimTake:
        """The claim, as the turn's read takes it (``TurnQuery.claim``); see ``taken``."""
        return ClaimTake(self.key, self.token, self.owner.lease_ms)

    def taken(self, previous: object) -> bool | None:
        """True: ours now (armed by this attempt, or by an earlier one whose answer was lost).
        False: already answered. None: another worker holds it."""
        if previous is None or previous == self.token:
            return True
        return False if previous == DONE else None

    async def wait_and_take(self) -> bool:
        """Wait out another worker's claim: True once ours, False once it is answered.

        The holder usually finishes within seconds (its entry was reclaimed from it while it
        still worked, e.g. after a store outage moved the partitions), so the claim is checked
        again soon, backing off to ``WAIT_CAP_MS``, and never later than its expiry."""
        guard, lease = self.owner.guard, self.owner.lease_ms
        pause_ms = 50
        while True:
            previous = await guard.take(self.key, self.token, lease)
            outcome = self.taken(previous)
            if outcome is not None:
                return outcome
            ttl_ms = await guard.remaining_ms(self.key)
            log.info(
                "message claimed by another worker; waiting",
                extra={"key": self.key, "holder": str(previous), "ttl_ms": ttl_ms},
            )
            await asyncio.sleep(min(max(ttl_ms, 20), pause_ms) / 1000)
            pause_ms = min(pause_ms * 2, WAIT_CAP_MS)

    # -- holding it ------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def renewing(self) -> AsyncIterator[None]:
        """Keep the lease alive while the body runs (a long model call or tool loop).

        The renewing task starts only once a third of the lease has passed (a timer until
        then): most turns end well before, and a task per turn would be work for nothing."""
        task: asyncio.Task[None] | None = None

        def start() -> None:
            nonlocal task
            task = asyncio.create_task(self._renew(), name=f"renew:{self.key}")

        timer = asyncio.get_running_loop().call_later(self.owner.lease_ms / 3000, start)
        try:
            yield
        finally:
            timer.cancel()
            if task is not None:
                task.cancel()
                await asyncio.wait({task})
                if not task.cancelled():
                    task.exception()  # retrieved: logged by ``_renew`` itself

    async def _renew(self) -> None:
        """Renew now, then every third of a lease, until the claim is found lost."""
        guard, renew = self.owner.guard, Renew(self.owner.lease_ms)
        while True:
            try:
                ours = await guard.if_holds(self.key, self.token, renew)
            except TRANSIENT:
                log.warning("store unavailable while renewing a claim", extra={"key": self.key})
                ours = True  # the commit checks ownership anyway
            if not ours:
                self.lost = True
                log.warning("lost the claim while working", extra={"key": self.key})
                return
            await asyncio.sleep(self.owner.lease_ms / 3000)

    # -- finishing -------------------------------------------------------------------------
    async def commit(self, changes: TurnChanges) -> bool:
        """Write ``changes`` and mark the message done, atomically, if the claim is still ours."""
        guard, record = self.owner.guard, Record(changes, self.owner.done_seconds)

        async def ours() -> bool:
            return await guard.if_holds(self.key, self.token, record)

        # Retried while the store is away: if the write ran before the connection dropped, the
        # retry finds "done" instead of our token and nothing doubles.
        for _ in range(3):  # (a take-back can race another worker's claim: then it wins)
            if await until_redis_answers("commit an answer", ours):
                self.recorded = True
                return True
            # Not ours: answered already, held by another worker, or lapsed with nobody taking
            # it (an outage longer than the lease). Then nobody else is answering it, so take
            # it back (SET NX) and commit, instead of dropping an answer we hold.
            previous = await until_redis_answers("take back a claim", self._take_back)
            outcome = self.taken(previous)
            if outcome is False:
                log.info(
                    "the message is recorded as answered (before the connection dropped, or "
                    "by another worker after our lease lapsed)",
                    extra={"key": self.key},
                )
                return True
            if outcome is None:
                break
            log.info("our claim lapsed and nobody took it; taken back", extra={"key": self.key})
        log.warning("lost the claim to another worker", extra={"key": self.key})
        return False

    async def _take_back(self) -> object:
        return await self.owner.guard.take(self.key, self.token, self.owner.lease_ms)

    async def release(self) -> None:
        """Give the claim up (after a failure) so a later delivery may try again. Best effort:
        with the store unreachable the lease simply expires."""
        try:
            await self.owner.guard.if_holds(self.key, self.token, Release())
        except TRANSIENT:
            log.warning("store unavailable; the claim will lapse instead", extra={"key": self.key})
