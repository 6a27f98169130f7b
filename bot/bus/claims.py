"""Claims: the protocol that makes every inbound message answered exactly once.

Delivery is at-least-once (a Redis Streams entry is redelivered when its worker dies before
``XACK``), so each message is claimed in Redis before any work:

- **claim**: ``SET chorus:v1:dedupe:{platform}:{id} claimed:{worker}:{nonce} NX PX lease GET``,
  queued in the router's read pipeline, so it costs no extra round trip. An empty answer means
  ours; ``done`` means it was answered already (skip, ack); another worker's value means it is
  being worked on: wait for that worker to finish (``done``) or die (the lease expires) and try
  again. Nobody deletes another worker's claim: takeover happens only through expiry.
- **renewal**: while a turn runs longer than a third of the lease, a background task extends it
  (``WATCH``/``GET`` must still be our token, then ``PEXPIRE``). A renewal that finds the claim
  gone or someone else's forgets that the claim was ours at once, so the commit re-checks.
- **the clock**: ``since`` is a lower bound of when the lease in Redis began: the time the
  command that armed it was *sent*. A retried claim that finds its own token did not re-arm
  the lease (``SET NX`` leaves an existing key alone), so its lease began at the first attempt.
- **commit**: the reply (when the bus can publish inside a transaction), the history, the
  ``done`` marker and the rest of the side effect go out in one ``MULTI``/``EXEC``. A worker killed
  before it is answered is redone by another; killed after, the redelivery finds ``done``. While
  the claim is known to be fresh (taken or renewed less than half a lease ago) nobody can have
  taken it over, so the commit needs no extra ``WATCH`` round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import WatchError

from bot.ops.aio import cancel_and_wait
from bot.state import keys
from bot.state.outages import TRANSIENT, until_redis_answers

log = logging.getLogger("chorus.claims")

DONE = "done"
WAIT_CAP_MS = 1000  # how stale a wait for another worker's claim may get


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass
class Claims:
    redis: Redis
    worker_id: str = field(default_factory=default_worker_id)
    lease_ms: int = 60_000
    done_seconds: int = 3 * 24 * 3600
    clock: Callable[[], float] = time.monotonic

    def new(self, platform: str, message_id: str) -> Claim:
        token = f"claimed:{self.worker_id}:{uuid.uuid4().hex[:12]}"
        return Claim(self, keys.dedupe(platform, message_id), token)


@dataclass
class Claim:
    owner: Claims
    key: str
    token: str
    since: float | None = None  # the lease in Redis began no earlier than this (monotonic)
    first_sent: float | None = None  # when a claim command was first sent
    last_sent: float | None = None  # when the latest one was sent

    # -- taking it -------------------------------------------------------------------------
    def queue_take(self, pipe: Pipeline) -> None:
        """Queue the claim (1 result) on the caller's read pipeline; see ``taken``."""
        self._sending()
        pipe.set(self.key, self.token, nx=True, px=self.owner.lease_ms, get=True)

    def taken(self, previous: object) -> bool | None:
        """True: ours now. False: already answered. None: another worker holds it."""
        if previous is None:  # this attempt's SET armed the lease, after it was sent
            self.since = self.last_sent
            return True
        if previous == self.token:  # an earlier attempt armed it and this one left it alone
            self.since = self.first_sent
            return True
        return False if previous == DONE else None

    def _sending(self) -> None:
        self.last_sent = self.owner.clock()
        if self.first_sent is None:
            self.first_sent = self.last_sent

    async def wait_and_take(self) -> bool:
        """Wait out another worker's claim: True once ours, False once it is answered.

        The holder usually finishes within seconds (its entry was reclaimed from it while it
        still worked, e.g. after a Redis outage moved the partitions), so the claim is checked
        again soon, backing off to ``WAIT_CAP_MS``, and never later than its expiry."""
        redis, lease = self.owner.redis, self.owner.lease_ms
        pause_ms = 50
        while True:
            self._sending()
            previous = await redis.set(self.key, self.token, nx=True, px=lease, get=True)
            outcome = self.taken(previous)
            if outcome is not None:
                return outcome
            ttl_ms = await redis.pttl(self.key)
            log.info(
                "message claimed by another worker; waiting",
                extra={"key": self.key, "holder": str(previous), "ttl_ms": ttl_ms},
            )
            await asyncio.sleep(min(max(ttl_ms, 20), pause_ms) / 1000)
            pause_ms = min(pause_ms * 2, WAIT_CAP_MS)

    # -- holding it ------------------------------------------------------------------------
    def fresh(self) -> bool:
        return self.since is not None and (
            self.owner.clock() - self.since < self.owner.lease_ms / 2000
        )

    @contextlib.asynccontextmanager
    async def renewing(self) -> AsyncIterator[None]:
        """Keep the lease alive while the body runs (a long model call or tool loop)."""
        task = asyncio.create_task(self._renew(), name=f"renew:{self.key}")
        try:
            yield
        finally:
            await cancel_and_wait(task)

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self.owner.lease_ms / 3000)
            sent = self.owner.clock()
            try:
                ours = await self._if_ours(lambda pipe: pipe.pexpire(self.key, self.owner.lease_ms))
            except TRANSIENT:
                log.warning("redis unavailable while renewing a claim", extra={"key": self.key})
                continue  # ``since`` still bounds the old lease; the commit re-checks when stale
            if not ours:
                self.since = None  # never commit on the strength of a claim we know we lost
                log.warning("lost the claim while working", extra={"key": self.key})
                return
            self.since = sent

    # -- finishing -------------------------------------------------------------------------
    async def commit(self, fill: Callable[[Pipeline], None]) -> bool:
        """Run ``fill``'s commands and mark the message done, atomically, if still ours."""

        def effect(pipe: Pipeline) -> None:
            fill(pipe)
            pipe.set(self.key, DONE, ex=self.owner.done_seconds)

        if self.fresh():
            try:
                async with self.owner.redis.pipeline(transaction=True) as pipe:
                    effect(pipe)
                    await pipe.execute()
                return True
            except TRANSIENT:
                # Redis went away; the EXEC may or may not have run. Retry only under WATCH
                # while the claim is ours: if it ran, the claim reads "done" and nothing doubles.
                log.warning(
                    "redis unavailable while recording an answer; retrying",
                    extra={"key": self.key},
                )
        if await until_redis_answers("commit an answer", lambda: self._if_ours(effect)):
            return True
        if (
            await until_redis_answers("read a claim", lambda: self.owner.redis.get(self.key))
            == DONE
        ):
            log.info(
                "the message is recorded as answered (before the connection dropped, or by "
                "another worker after our lease lapsed)",
                extra={"key": self.key},
            )
            return True
        log.warning("lost the claim; the answer is not recorded", extra={"key": self.key})
        return False

    async def release(self) -> None:
        """Give the claim up (after a failure) so a later delivery may try again. Best effort:
        with Redis unreachable the lease simply expires."""
        try:
            await self._if_ours(lambda pipe: pipe.delete(self.key))
        except TRANSIENT:
            log.warning("redis unavailable; the claim will lapse instead", extra={"key": self.key})

    async def _if_ours(self, queue: Callable[[Pipeline], object]) -> bool:
        async with self.owner.redis.pipeline(transaction=True) as pipe:
            for _ in range(5):
                try:
                    await pipe.watch(self.key)
                    if await pipe.get(self.key) != self.token:
                        await pipe.unwatch()  # type: ignore[no-untyped-call]
                        return False
                    pipe.multi()  # type: ignore[no-untyped-call]
                    queue(pipe)
                    await pipe.execute()
                    return True
                except WatchError:
                    continue
        return False
