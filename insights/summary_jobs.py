"""Claiming and finishing summary jobs (the router's side is ``bot.memory.summaries.due``).

A conversation is due (``due`` zset) when its UTC day is over (next midnight + a grace) or when
CHORUS_SUMMARY_AFTER_LINES lines wait past its history window (the router saw them: due now).
Like a user's insights job, a conversation is leased with
``SET NX PX`` so two workers never summarise it at once; a worker that dies leaves the job due,
and the lease lapses. The job hash carries the scope's settings (the worker resolves no scopes).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import cast

from redis.asyncio import Redis

from bot.events import ConversationKey
from bot.memory.summaries import DEFAULT_QUEUE, next_day_due
from bot.state import keys

log = logging.getLogger("chorus.insights.summary_jobs")


@dataclass(frozen=True)
class ConversationJob:
    conversation: ConversationKey
    ttl_days: int
    community: bool
    token: str
    mark: str | None = None  # the last line summarised (a history entry's JSON)


class SummaryQueue:
    def __init__(
        self,
        redis: Redis,
        *,
        default_ttl_days: int,
        lease_seconds: float = 300.0,
        queue: str = DEFAULT_QUEUE,
        token: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        self._redis = redis
        self.default_ttl_days = default_ttl_days
        self.lease_seconds = lease_seconds
        self._due = keys.summary_queue(queue)
        self._token = token

    async def claim_due(self, now: datetime, limit: int) -> list[ConversationJob]:
        """Lease up to ``limit`` conversations whose day ended or whose lines piled up."""
        scan = limit * 4 + 16
        found = await self._redis.zrangebyscore(self._due, "-inf", _ms(now), start=0, num=scan)
        due = cast("list[str]", found)  # decoded by connect
        jobs: list[ConversationJob] = []
        for member in due:
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
                keys.summary("lease", conv), token, nx=True, px=round(self.lease_seconds * 1000)
            )
            pipe.hgetall(keys.summary("job", conv))
            leased, data = await pipe.execute()
        if not leased:
            return None
        if not data:  # its lines and settings expired (or were erased): nothing to summarise
            await self._drop(member)
            await self._redis.delete(keys.summary("lease", conv))
            return None
        try:
            ttl = int(data.get("ttl", self.default_ttl_days))
        except ValueError:
            ttl = self.default_ttl_days
        community = data.get("community") == "1"
        return ConversationJob(conv, max(ttl, 1), community, token, data.get("mark"))

    async def finish(self, job: ConversationJob, now: datetime, remaining: int) -> None:
        """Release the lease; due again after the next day's end while ``remaining`` lines
        wait (or lines may have come in during the run), else no longer due."""
        member = str(job.conversation)
        lease = keys.summary("lease", job.conversation)
        holder = await self._redis.get(lease)
        async with self._redis.pipeline(transaction=True) as pipe:
            if remaining >= 0:
                pipe.zadd(self._due, {member: _ms(next_day_due(now))})
            else:
                pipe.zrem(self._due, member)
            if holder == job.token:
                pipe.delete(lease)
            await pipe.execute()

    async def later(self, job: ConversationJob, when: datetime) -> None:
        """Try again at ``when`` (today's budget is spent, or the model is unavailable)."""
        member = str(job.conversation)
        lease = keys.summary("lease", job.conversation)
        holder = await self._redis.get(lease)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.zadd(self._due, {member: _ms(when)})
            if holder == job.token:
                pipe.delete(lease)
            await pipe.execute()

    async def release(self, job: ConversationJob) -> None:
        """Give the conversation back as it is (a retry later, e.g. after a /forget raced)."""
        lease = keys.summary("lease", job.conversation)
        if await self._redis.get(lease) == job.token:
            await self._redis.delete(lease)

    async def _drop(self, member: str) -> None:
        await self._redis.zrem(self._due, member)


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)
