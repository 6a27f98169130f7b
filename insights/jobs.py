"""Claiming, completing and rescheduling insights jobs (enqueueing is ``bot.memory.insight_queue``).

A worker claims a user with a lease (``SET NX PX``) and only then reads the job, in the same
``MULTI``: two workers can never analyse one user at once, and no Lua is needed. The job stays in
the due sets while it is analysed, so if the worker dies the lease expires and another worker
picks the job up: a crash delays an analysis, it does not lose it.

When the analysis ends, ``complete`` removes the job -- unless turns arrived meanwhile (its
``rev`` moved on), in which case the job stays pending for those turns, with a fresh deadline.
``retry_later`` (provider outage) pushes both due times to the retry time and counts the attempt.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import cast

from pydantic import ValidationError
from redis.asyncio import Redis
from redis.exceptions import WatchError

from bot.events import ConversationKey
from bot.memory.insight_queue import CONVERSATION_FIELD, DEFAULT_QUEUE, JOB_TTL_SECONDS, TurnRef
from bot.state import keys

log = logging.getLogger("chorus.insights.jobs")

MAX_CONVERSATIONS = 3
_WATCH_RETRIES = 8


@dataclass(frozen=True)
class ClaimedJob:
    """A job this worker holds the lease of."""

    platform: str
    user_id: str
    display_name: str
    conversations: tuple[tuple[ConversationKey, TurnRef], ...]  # most recent first
    rev: int
    attempts: int
    token: str

    @property
    def member(self) -> str:
        return keys.insights_member(self.platform, self.user_id)


class JobQueue:
    """The worker's side of the queue."""

    def __init__(
        self,
        redis: Redis,
        *,
        max_delay: float,
        lease_seconds: float = 300.0,
        token: Callable[[], str] = lambda: uuid.uuid4().hex,
        queue: str = DEFAULT_QUEUE,
    ) -> None:
        self._redis = redis
        self.queue = queue
        self._due = keys.insights_due(queue)
        self._deadline = keys.insights_deadline(queue)
        self._max_delay_ms = round(max_delay * 1000)
        self.lease_seconds = lease_seconds
        self._token = token

    async def claim_due(self, now: datetime, limit: int) -> list[ClaimedJob]:
        """Lease up to ``limit`` due jobs. Users analysed by another worker are skipped."""
        now_ms = _ms(now)
        scan = limit * 4 + 16  # leased jobs stay due, so look past a few of them
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.zrangebyscore(self._due, "-inf", now_ms, start=0, num=scan)
            pipe.zrangebyscore(self._deadline, "-inf", now_ms, start=0, num=scan)
            by_due, by_deadline = await pipe.execute()
        claimed: list[ClaimedJob] = []
        for member in dict.fromkeys([*by_due, *by_deadline]):
            if len(claimed) >= limit:
                break
            job = await self._claim(member, now_ms)
            if job is not None:
                claimed.append(job)
        return claimed

    async def _claim(self, member: str, now_ms: int) -> ClaimedJob | None:
        try:
            platform, user_id = keys.parse_insights_member(member)
        except ValueError:
            log.warning("dropping a malformed insights job id", exc_info=True)
            await self._forget_member(member)
            return None
        token = self._token()
        lease = keys.insights_lease(platform, user_id, self.queue)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.set(lease, token, nx=True, px=round(self.lease_seconds * 1000))
            pipe.zscore(self._due, member)
            pipe.zscore(self._deadline, member)
            pipe.hgetall(keys.insights_job(platform, user_id, self.queue))
            leased, due, deadline, data = await pipe.execute()
        if not leased:
            return None  # another worker is analysing this user
        if not data:  # cancelled (/forget) or expired: clean the leftovers
            await self._forget_member(member)
            await self._release(lease, token)
            return None
        if not any(score is not None and score <= now_ms for score in (due, deadline)):
            await self._release(lease, token)  # a new turn pushed it later meanwhile
            return None
        return _parse_job(platform, user_id, data, token)

    async def complete(self, job: ClaimedJob, now: datetime) -> bool:
        """Finish ``job``. True when it was removed; False when turns arrived during the
        analysis, so it stays pending for them (with a deadline from now)."""
        key = keys.insights_job(job.platform, job.user_id, self.queue)
        lease = keys.insights_lease(job.platform, job.user_id, self.queue)
        async with self._redis.pipeline(transaction=True) as pipe:
            for _ in range(_WATCH_RETRIES):
                try:
                    await pipe.watch(key, lease)
                    rev = await pipe.hget(key, "rev")
                    holder = await pipe.get(lease)
                    removed = rev is None or int(rev) == job.rev
                    pipe.multi()  # type: ignore[no-untyped-call]
                    if removed:
                        pipe.delete(key)
                        pipe.zrem(self._due, job.member)
                        pipe.zrem(self._deadline, job.member)
                    else:
                        pipe.hset(key, "attempts", 0)
                        pipe.zadd(
                            self._deadline,
                            {job.member: _ms(now) + self._max_delay_ms},
                        )
                    if holder == job.token:
                        pipe.delete(lease)
                    await pipe.execute()
                    return removed
                except WatchError:
                    continue
        raise RuntimeError(f"insights job {key} kept changing; gave up")

    async def retry_later(self, job: ClaimedJob, now: datetime, delay: float) -> None:
        """Keep ``job`` pending and make it due again after ``delay`` seconds (an outage)."""
        key = keys.insights_job(job.platform, job.user_id, self.queue)
        lease = keys.insights_lease(job.platform, job.user_id, self.queue)
        retry_ms = _ms(now) + round(delay * 1000)
        async with self._redis.pipeline(transaction=True) as pipe:
            for _ in range(_WATCH_RETRIES):
                try:
                    await pipe.watch(key, lease)
                    exists = await pipe.exists(key)
                    holder = await pipe.get(lease)
                    pipe.multi()  # type: ignore[no-untyped-call]
                    if exists:
                        pipe.hset(key, "attempts", job.attempts + 1)
                        pipe.expire(key, JOB_TTL_SECONDS)
                        pipe.zadd(self._due, {job.member: retry_ms}, gt=True)
                        pipe.zadd(self._deadline, {job.member: retry_ms})
                    else:  # the user said /forget meanwhile: nothing to retry
                        pipe.zrem(self._due, job.member)
                        pipe.zrem(self._deadline, job.member)
                    if holder == job.token:
                        pipe.delete(lease)
                    await pipe.execute()
                    return
                except WatchError:
                    continue
        raise RuntimeError(f"insights job {key} kept changing; gave up")

    async def next_due(self) -> datetime | None:
        """When the earliest pending job becomes due (it may be in the past), or None."""
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.zrange(self._due, 0, 0, withscores=True)
            pipe.zrange(self._deadline, 0, 0, withscores=True)
            results = await pipe.execute()
        scores = [float(row[0][1]) for row in results if row]
        if not scores:
            return None
        return datetime.fromtimestamp(min(scores) / 1000, UTC)

    async def _release(self, lease: str, token: str) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            for _ in range(_WATCH_RETRIES):
                try:
                    await pipe.watch(lease)
                    if await pipe.get(lease) != token:
                        await pipe.unwatch()  # type: ignore[no-untyped-call]
                        return
                    pipe.multi()  # type: ignore[no-untyped-call]
                    pipe.delete(lease)
                    await pipe.execute()
                    return
                except WatchError:
                    continue

    async def _forget_member(self, member: str) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.zrem(self._due, member)
            pipe.zrem(self._deadline, member)
            await pipe.execute()


def _parse_job(platform: str, user_id: str, data: dict[str, str], token: str) -> ClaimedJob:
    conversations: list[tuple[ConversationKey, TurnRef]] = []
    for field, value in data.items():
        if not field.startswith(CONVERSATION_FIELD):
            continue
        try:
            conv = ConversationKey.parse(field.removeprefix(CONVERSATION_FIELD))
            ref = TurnRef.model_validate_json(value)
        except (ValueError, ValidationError, json.JSONDecodeError):
            log.warning("skipping an unreadable conversation of an insights job", exc_info=True)
            continue
        if conv.platform == platform:
            conversations.append((conv, ref))
    conversations.sort(key=lambda item: (item[1].at, str(item[0])), reverse=True)
    return ClaimedJob(
        platform=platform,
        user_id=user_id,
        display_name=data.get("name", ""),
        conversations=tuple(conversations[:MAX_CONVERSATIONS]),
        rev=_int(data.get("rev")),
        attempts=_int(data.get("attempts")),
        token=token,
    )


def _int(value: str | None) -> int:
    try:
        return int(cast("str", value))
    except (TypeError, ValueError):
        return 0


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)
