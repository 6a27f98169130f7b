"""Claiming and finishing summary jobs (the router's side is ``bot.memory.recall.queue_record``).

A conversation is due when its UTC day is over (``due`` zset, next midnight + a grace) or when
enough of its lines have left the history window (``fill`` zset, lines waiting >= history max +
CHORUS_SUMMARY_AFTER_LINES). Like a user's insights job, a conversation is leased with
``SET NX PX`` so two workers never summarise it at once; a worker that dies leaves the job due,
and the lease lapses. The job hash carries the scope's settings (the worker resolves no scopes).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from redis.asyncio import Redis

from bot.events import ConversationKey
from bot.memory.recall import DEFAULT_QUEUE, next_day_due
from bot.state import keys

log = logging.getLogger("chorus.insights.recall")


@dataclass(frozen=True)
class ConversationJob:
    conversation: ConversationKey
    ttl_days: int
    community: bool
    token: str


class RecallQueue:
    def __init__(
        self,
        redis: Redis,
        *,
        fill_threshold: int,
        default_ttl_days: int,
        lease_seconds: float = 300.0,
        queue: str = DEFAULT_QUEUE,
        token: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        self._redis = redis
        self.fill_threshold = fill_threshold
        self.default_ttl_days = default_ttl_days
        self.lease_seconds = lease_seconds
        self._due = keys.recall_queue("due", queue)
        self._fill = keys.recall_queue("fill", queue)
        self._token = token

    async def claim_due(self, now: datetime, limit: int) -> list[ConversationJob]:
        """Lease up to ``limit`` conversations whose day ended or whose lines piled up."""
        scan = limit * 4 + 16
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.zrangebyscore(self._due, "-inf", _ms(now), start=0, num=scan)
            pipe.zrangebyscore(self._fill, self.fill_threshold, "+inf", start=0, num=scan)
            by_day, by_fill = await pipe.execute()
        jobs: list[ConversationJob] = []
        for member in dict.fromkeys([*by_fill, *by_day]):
            if len(jobs) >= limit:
                break
            job = await self._claim(member)
            if job is not None:
                jobs.append(job)
        return jobs

    async def _claim(self, member: str) -> ConversationJob | None:
        try:
            conv = ConversationKey.parse(member)
        except ValueError:
            log.warning("dropping a malformed summary job", exc_info=True)
            await self._drop(member)
            return None
        token = self._token()
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.set(
                keys.recall("lease", conv), token, nx=True, px=round(self.lease_seconds * 1000)
            )
            pipe.hgetall(keys.recall("job", conv))
            leased, data = await pipe.execute()
        if not leased:
            return None
        if not data:  # its lines and settings expired (or were erased): nothing to summarise
            await self._drop(member)
            await self._redis.delete(keys.recall("lease", conv))
            return None
        try:
            ttl = int(data.get("ttl", self.default_ttl_days))
        except ValueError:
            ttl = self.default_ttl_days
        return ConversationJob(conv, max(ttl, 1), data.get("community") == "1", token)

    async def finish(self, job: ConversationJob, now: datetime, remaining: int) -> None:
        """Record what is left waiting (``remaining`` lines: due again at the next day's end,
        or no longer due) and release the lease."""
        member = str(job.conversation)
        lease = keys.recall("lease", job.conversation)
        holder = await self._redis.get(lease)
        async with self._redis.pipeline(transaction=True) as pipe:
            if remaining > 0:
                pipe.zadd(self._fill, {member: remaining})
                pipe.zadd(self._due, {member: _ms(next_day_due(now))})
            else:
                pipe.zrem(self._fill, member)
                pipe.zrem(self._due, member)
            if holder == job.token:
                pipe.delete(lease)
            await pipe.execute()

    async def later(self, job: ConversationJob, when: datetime) -> None:
        """Try again at ``when`` (today's budget is spent, or the model is unavailable); the
        line count starts over and is set exactly by the next run."""
        member = str(job.conversation)
        lease = keys.recall("lease", job.conversation)
        holder = await self._redis.get(lease)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.zrem(self._fill, member)
            pipe.zadd(self._due, {member: _ms(when)})
            if holder == job.token:
                pipe.delete(lease)
            await pipe.execute()

    async def release(self, job: ConversationJob) -> None:
        """Give the conversation back as it is (a retry later, e.g. after a /forget raced)."""
        lease = keys.recall("lease", job.conversation)
        if await self._redis.get(lease) == job.token:
            await self._redis.delete(lease)

    async def _drop(self, member: str) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.zrem(self._fill, member)
            pipe.zrem(self._due, member)
            await pipe.execute()


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)
