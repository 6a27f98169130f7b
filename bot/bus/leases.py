"""Partition leases: which consumer of a group reads which partition of a bus topic.

Why: a Redis consumer group hands each entry of a stream to whichever consumer asks first, so
two workers reading one stream would interleave the messages of one conversation and could
answer them out of order. The Redis Streams bus therefore hashes every event's conversation to
one of P partition streams, and each partition is read by exactly one consumer of the group at a
time: the holder of its lease (``SET NX PX``, value = the consumer's token). One worker reads a
partition's entries in stream order; the router keeps them in order per conversation.

Fair share: live consumers heartbeat in a zset; each aims at ``ceil(P / live)`` partitions. A
consumer holding more *drains* the extras (stops reading them) and releases each one only once
its in-flight entries are acked, so the next holder continues exactly where it stopped. A dead
consumer's leases lapse after ``lease_ms``; whoever takes a partition over first reclaims its
pending entries (``XAUTOCLAIM``, in id order) and only then reads new ones, so order survives a
crash too.

Fencing: a consumer reads a partition only while it *knows* the lease is still its own, that is
within half a lease of the last renewal or acquisition that Redis confirmed (dated from when the
command was sent). A consumer cut off from Redis, or paused, past that point stops reading the
partition until a renewal succeeds again; by the time its lease can lapse and another consumer
take the partition over, it has stopped. So after an outage in which every lease lapsed, two
workers never read one partition at once, and a conversation's messages stay in order. (Reads
block at most half a lease, which the bus enforces.) The router's claims keep replies
exactly-once regardless.

Renewing and releasing are compare-and-set operations over many keys at once, done as
``WATCH`` + ``MGET`` + ``MULTI``/``EXEC`` (they run every few seconds, not per message).
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Awaitable, Callable
from typing import cast

from bot.state.client import Redis, WatchError, is_cluster

# KEYS: the leases held; ARGV: the token, the lease in ms, then per key "1" release / "0" renew.
# -> the (1-based) indexes of the keys that still held the token.
RENEW = """
local mine = {}
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then
    if ARGV[i + 2] == '1' then redis.call('DEL', key) else redis.call('PEXPIRE', key, ARGV[2]) end
    mine[#mine + 1] = i
  end
end
return mine
"""

log = logging.getLogger("chorus.bus")


class PartitionLeases:
    """The lease bookkeeping of one consumer; ``tick`` runs every ``lease_ms / 3``."""

    def __init__(
        self,
        redis: Redis,
        *,
        lease_key: Callable[[int], str],
        members_key: str,
        partitions: int,
        token: str,
        lease_ms: int,
        is_idle: Callable[[int], bool],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._redis = redis
        self._cluster = is_cluster(redis)
        self._lease_key = lease_key
        self._members_key = members_key
        self.partitions = partitions
        self.token = token
        self.lease_ms = lease_ms
        self._is_idle = is_idle
        self._clock = clock
        self._offset = zlib.crc32(token.encode()) % partitions  # spread first choices
        self.owned: set[int] = set()  # leases we hold
        self.draining: set[int] = set()  # held, no longer read, released once idle
        self.changed = asyncio.Event()  # set whenever ``readable`` may have changed
        self._acquired: list[int] = []  # taken over since the last ``take_acquired``
        self._unsure: set[int] = set()  # asked for when a cancel cut the answer off
        self._valid_until: dict[int, float] = {}  # partition -> lease surely ours until (clock)
        self.frozen = False  # ``freeze``: keep what is held, take and shed nothing

    @property
    def readable(self) -> list[int]:
        """The partitions to read new entries from: held, not draining, and known to be ours
        for at least another half lease (see "Fencing" above)."""
        now = self._clock()
        margin = self.lease_ms / 2000
        return sorted(
            p for p in self.owned - self.draining if self._valid_until.get(p, 0.0) - now > margin
        )

    def take_acquired(self) -> list[int]:
        """Partitions acquired since the last call: reclaim their pending entries first."""
        acquired, self._acquired = self._acquired, []
        return [p for p in acquired if p in self.owned]

    async def tick(self) -> None:
        """Heartbeat, notice lost leases, shed or take partitions, renew the rest."""
        sent = self._clock()
        now_ms = int(sent * 1000)
        lease_keys = [self._lease_key(p) for p in range(self.partitions)]
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.zadd(self._members_key, {self.token: now_ms + self.lease_ms})
            pipe.zremrangebyscore(self._members_key, "-inf", now_ms)
            pipe.zcard(self._members_key)
            pipe.pexpire(self._members_key, self.lease_ms * 3)
            if self._cluster:  # redis-py's cluster pipeline has no MGET (the keys share a slot)
                for key in lease_keys:
                    pipe.get(key)
            else:
                pipe.mget(lease_keys)
            _, _, live, _, *rest = await pipe.execute()
        holders = rest if self._cluster else rest[0]
        self._forget_lost({p for p, holder in enumerate(holders) if holder == self.token})
        if self.frozen:
            await self._renew_and_release(sent=sent)
            return
        target = -(-self.partitions // max(int(live), 1))
        self._rebalance(target)
        await self._renew_and_release(sent=sent)
        await self._acquire(target, holders, sent=sent)

    def freeze(self) -> None:
        """A graceful stop: renew what is held until ``release_all``, acquire nothing more (a
        partition taken now would sit unread), shed nothing more than already draining."""
        self.frozen = True

    async def release_all(self) -> None:
        """Give every lease back (clean shutdown), so others need not wait for them to lapse."""
        self.owned |= self._unsure  # each is given back only if its lease holds our token
        self._unsure.clear()
        self.draining = set(self.owned)
        await self._renew_and_release(force=True, sent=self._clock())
        await self._redis.zrem(self._members_key, self.token)

    # -- internals ------------------------------------------------------------------------------
    def _preference(self, partition: int) -> int:
        return (partition - self._offset) % self.partitions

    def _forget_lost(self, held: set[int]) -> None:
        lost = self.owned - held
        if lost:
            log.warning(
                "lost partition leases (they lapsed and another consumer took them)",
                extra={"partitions": sorted(lost), "token": self.token},
            )
            self.owned -= lost
            self.draining -= lost
            for p in lost:
                self._valid_until.pop(p, None)
            self.changed.set()

    def _rebalance(self, target: int) -> None:
        active = sorted(self.owned - self.draining, key=self._preference)
        if len(active) > target:
            self.draining.update(active[target:])
            self.changed.set()
        elif len(active) < target and self.draining:
            back = sorted(self.draining, key=self._preference)[: target - len(active)]
            self.draining.difference_update(back)
            self.changed.set()

    async def _renew_by_script(
        self, held: list[int], names: list[str], release: set[int]
    ) -> set[int]:
        """On a cluster: the renewal and release as one script of the leases' slot (redis-py's
        cluster pipeline runs a watching transaction's commands on a thread of its own, which
        the bus keeps off its path); the partitions that were still ours."""
        flags = ["1" if p in release else "0" for p in held]
        run = self._redis.eval(RENEW, len(names), *names, self.token, self.lease_ms, *flags)
        found = await cast("Awaitable[list[int]]", run)
        return {held[int(i) - 1] for i in found}

    async def _renew_and_release(self, *, sent: float, force: bool = False) -> None:
        if not self.owned:
            return
        release = {p for p in self.draining if force or self._is_idle(p)}
        held = sorted(self.owned)
        names = [self._lease_key(p) for p in held]
        if self._cluster:
            mine = await self._renew_by_script(held, names, release)
        else:
            try:
                async with self._redis.pipeline(transaction=True) as pipe:
                    await pipe.watch(*names)
                    values = await pipe.mget(names)
                    mine = {p for p, v in zip(held, values, strict=True) if v == self.token}
                    pipe.multi()  # type: ignore[no-untyped-call]
                    for p, name in zip(held, names, strict=True):
                        if p not in mine:
                            continue
                        if p in release:
                            pipe.delete(name)
                        else:
                            pipe.pexpire(name, self.lease_ms)
                    await pipe.execute()
            except WatchError:  # a lease changed under us: the next tick sees who holds what
                log.info("partition lease changed during renewal", extra={"token": self.token})
                return
        for p in mine - release:
            self._valid_until[p] = sent + self.lease_ms / 1000
        gone = (set(held) - mine) | (release & mine)
        if gone:
            self.owned -= gone
            self.draining -= gone
            for p in gone:
                self._valid_until.pop(p, None)
        self.changed.set()  # renewed leases may have become readable again

    async def _acquire(self, target: int, holders: list[str | None], *, sent: float) -> None:
        need = target - len(self.owned - self.draining)
        if need <= 0:
            return
        free = [p for p in range(self.partitions) if holders[p] is None and p not in self.owned]
        candidates = sorted(free, key=self._preference)[:need]
        if not candidates:
            return
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for p in candidates:
                    pipe.set(self._lease_key(p), self.token, nx=True, px=self.lease_ms)
                results = await pipe.execute()
        except asyncio.CancelledError:
            # The consumer is stopping, and the SETs may have been applied: ``release_all``
            # gives back whichever of them holds our token, instead of leaving it to lapse.
            self._unsure.update(candidates)
            raise
        won = [p for p, ok in zip(candidates, results, strict=True) if ok]
        if won:
            for p in won:
                self._valid_until[p] = sent + self.lease_ms / 1000
            self.owned.update(won)
            self._acquired.extend(won)
            self.changed.set()
            log.debug("acquired partitions", extra={"partitions": won, "token": self.token})
