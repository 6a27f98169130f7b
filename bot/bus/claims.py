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
  gone or someone else's marks it ``lost`` and stops. A retried claim that finds its own token
  (its first answer was lost) holds a lease that began at the first attempt; nothing here
  dates a lease from our own clock, because the commit does not trust any such date.
- **commit**: the reply and the ack of the message's stream entry (when the bus can publish
  inside a transaction: ``Delivery.queue_ack``), the history, the
  ``done`` marker and the rest of the side effect run in one Lua script that first checks the
  claim still holds our token (``GUARDED``): ownership is checked on every path, atomically, in
  one round trip. A worker killed before it is answered is redone by another; killed after, the
  redelivery finds ``done``. A claim that lapsed while Redis was away, with nobody taking it
  over, is taken back (``SET NX``) and committed: nobody else is answering that message, and
  dropping the answer would lose it (its delivery is acked after that commit, by itself). One
  that another worker took over is waited for (``bot.router.record.recommit``): this worker
  goes on to the conversation's next message only once that worker has recorded its answer.
  (An earlier fast path skipped the check while the claim looked "fresh" by the worker's own
  clock; a paused process, or a Redis restart that lost the key, made that belief wrong and two
  workers committed.) Renewal and release use the same script.
  The script runs the commands a ``Pipeline`` would have sent, so callers still "fill a
  pipeline"; the keys they touch are not declared, which is fine on one Redis (not Cluster).
  The embedded store runs that script natively in Python, atomically under its own lock
  (``bot.state.embedded``); any other script goes through fakeredis's Lua engine.
- **leases are short** (``CHORUS_CLAIM_LEASE_MS``, 10 s by default) and renewed every third of
  a lease while the turn runs, so a worker that dies holds its messages for at most one lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import cast

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.typing import EncodableT

from bot.ops.aio import cancel_and_wait
from bot.state import keys
from bot.state.guarded import GUARDED
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
    lease_ms: int = 10_000
    done_seconds: int = 3 * 24 * 3600

    def new(self, platform: str, message_id: str) -> Claim:
        token = f"claimed:{self.worker_id}:{os.urandom(6).hex()}"  # 48 random bits, as before
        return Claim(self, keys.dedupe(platform, message_id), token)


@dataclass
class Claim:
    owner: Claims
    key: str
    token: str
    lost: bool = False  # a renewal found the claim gone or someone else's
    recorded: bool = False  # ``commit`` ran its commands itself (not: found them run before)

    # -- taking it -------------------------------------------------------------------------
    def queue_take(self, pipe: Pipeline) -> None:
        """Queue the claim (1 result) on the caller's read pipeline; see ``taken``."""
        pipe.set(self.key, self.token, nx=True, px=self.owner.lease_ms, get=True)

    def taken(self, previous: object) -> bool | None:
        """True: ours now (armed by this attempt, or by an earlier one whose answer was lost).
        False: already answered. None: another worker holds it."""
        if previous is None or previous == self.token:
            return True
        return False if previous == DONE else None

    async def wait_and_take(self) -> bool:
        """Wait out another worker's claim: True once ours, False once it is answered.

        The holder usually finishes within seconds (its entry was reclaimed from it while it
        still worked, e.g. after a Redis outage moved the partitions), so the claim is checked
        again soon, backing off to ``WAIT_CAP_MS``, and never later than its expiry."""
        redis, lease = self.owner.redis, self.owner.lease_ms
        pause_ms = 50
        while True:
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
    @contextlib.asynccontextmanager
    async def renewing(self) -> AsyncIterator[None]:
        """Keep the lease alive while the body runs (a long model call or tool loop).

        The renewing task starts only once a third of the lease has passed (a timer until
        then): most turns end well before, and a task created and cancelled per turn was a
        measurable share of a turn's work."""
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
                await cancel_and_wait(task)

    async def _renew(self) -> None:
        """Renew now, then every third of a lease, until the claim is found lost."""
        while True:
            try:
                ours = await self._if_ours(lambda pipe: pipe.pexpire(self.key, self.owner.lease_ms))
            except TRANSIENT:
                log.warning("redis unavailable while renewing a claim", extra={"key": self.key})
                ours = True  # the commit checks ownership anyway
            if not ours:
                self.lost = True
                log.warning("lost the claim while working", extra={"key": self.key})
                return
            await asyncio.sleep(self.owner.lease_ms / 3000)

    # -- finishing -------------------------------------------------------------------------
    async def commit(self, fill: Callable[[Pipeline], None]) -> bool:
        """Run ``fill``'s commands and mark the message done, atomically, if still ours."""

        def effect(pipe: Pipeline) -> None:
            fill(pipe)
            pipe.set(self.key, DONE, ex=self.owner.done_seconds)

        # Retried while Redis is away: if an EXEC ran before the connection dropped, the retry
        # finds "done" instead of our token and nothing doubles.
        for _ in range(3):  # (a take-back can race another worker's claim: then it wins)
            if await until_redis_answers("commit an answer", lambda: self._if_ours(effect)):
                self.recorded = True
                return True
            # Not ours: answered already, held by another worker, or lapsed with nobody taking
            # it (a Redis outage longer than the lease). Then nobody else is answering it, so
            # take it back (SET NX) and commit, instead of dropping an answer we hold.
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
        return await self.owner.redis.set(
            self.key, self.token, nx=True, px=self.owner.lease_ms, get=True
        )

    async def release(self) -> None:
        """Give the claim up (after a failure) so a later delivery may try again. Best effort:
        with Redis unreachable the lease simply expires."""
        try:
            await self._if_ours(lambda pipe: pipe.delete(self.key))
        except TRANSIENT:
            log.warning("redis unavailable; the claim will lapse instead", extra={"key": self.key})

    async def _if_ours(self, queue: Callable[[Pipeline], object]) -> bool:
        """Run ``queue``'s commands only if the claim still holds our token, atomically, in ONE
        round trip: a Lua script checks the token and runs the commands (``GUARDED``)."""
        async with self.owner.redis.pipeline(transaction=False) as pipe:
            queue(pipe)  # only to capture the commands; this pipeline never executes
            commands = [args for args, _ in pipe.command_stack]
        argv: list[EncodableT] = [self.token]
        for args in commands:
            argv.append(len(args))
            argv.extend(args)
        run = cast("Awaitable[int]", self.owner.redis.eval(GUARDED, 1, self.key, *argv))
        return bool(await run)
