"""The insights job queue in Redis: each user's pending analysis, claimed, finished or put off,
how analyses ended, and the insights agent's daily token budgets.

The reply path enqueues a job as a change of the turn's commit (``bot.state.turn.InsightDue``,
written by ``bot.state.redis_turn``); everything else a job goes through is here, so one module
owns the queue's layout (keys in ``bot.state.keys``).

Debounce without Lua: one job per user (deterministic id ``keys.insights_member``), kept in two
sorted sets. ``due`` holds "last turn + CHORUS_INSIGHTS_DEBOUNCE" and is pushed later by every
turn (``ZADD GT``), so a burst of turns collapses into one analysis after the burst; ``deadline``
holds "first pending turn + CHORUS_INSIGHTS_MAX_DELAY" (``ZADD NX``), so a conversation that
never pauses is still analysed. The job's hash remembers the conversations it covers and a turn
counter (``rev``) that tells the worker whether turns arrived while it was busy.

A worker claims a user with a lease (``SET NX PX``) and only then reads the job, in the same
``MULTI``: two workers can never analyse one user at once, and no Lua is needed. The job stays
in the due sets while it is analysed, so if the worker dies the lease expires and another
worker picks the job up: a crash delays an analysis, it does not lose it. When the analysis
ends, ``complete`` removes the job -- unless turns arrived meanwhile (its ``rev`` moved on), in
which case the job stays pending for those turns, with a fresh deadline. ``retry_later``
(provider outage) pushes both due times to the retry time and counts the attempt.

Budgets: each analysis first checks today's counters (UTC day) of its user and channels and is
skipped when either is spent; afterwards its real usage is added with ``INCRBY``, and the
counter expires an hour after its day ends. A check and the charge are not atomic, so
concurrent workers may overshoot a budget by the analyses already under way; a limit of 0 turns
analyses off for everyone. A channel is platform + channel (all its threads together); an
analysis spanning several conversations charges each channel in full, which errs on the side
of spending less.
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, ValidationError

from bot.events import AwareDatetime, ConversationKey
from bot.state import keys
from bot.state.client import KeptChanging, Pipeline, Redis, delete_if_holds, watched

log = logging.getLogger("chorus.insights.jobs")

DEFAULT_QUEUE = "main"  # a deployment or a test may use its own queue name
JOB_TTL_SECONDS = 2 * 24 * 3600
CONVERSATION_FIELD = "c:"
OUTCOMES_MAX = 200
OUTCOMES_SECONDS = 7 * 24 * 3600
MAX_CONVERSATIONS = 3
_GRACE = timedelta(hours=1)


class TurnRef(BaseModel):
    """The last turn of a user in one conversation, as stored in the job hash."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    message_id: str
    at: AwareDatetime


@dataclass(frozen=True)
class PendingJob:
    """A pending job as the admin dashboard lists it."""

    platform: str
    user_id: str
    name: str
    due: datetime
    turns: int
    attempts: int
    running: bool
    tokens_today: int


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

        async def finish(pipe: Pipeline) -> bool:
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

        return await watched(self._redis, finish, f"insights job {key}")

    async def retry_later(
        self, job: ClaimedJob, now: datetime, delay: float, *, attempt: bool = True
    ) -> None:
        """Keep ``job`` pending and make it due again after ``delay`` seconds (an outage);
        ``attempt=False``: put off without counting a failed attempt (the daily cost cap)."""
        key = keys.insights_job(job.platform, job.user_id, self.queue)
        lease = keys.insights_lease(job.platform, job.user_id, self.queue)
        retry_ms = _ms(now) + round(delay * 1000)

        async def put_off(pipe: Pipeline) -> None:
            await pipe.watch(key, lease)
            # HLEN, not EXISTS: redis-py's cluster pipeline sends no multi-key command
            # (EXISTS) at once while watching; for a hash the two agree
            exists = await pipe.hlen(key)
            holder = await pipe.get(lease)
            pipe.multi()  # type: ignore[no-untyped-call]
            if exists:
                pipe.hset(key, "attempts", job.attempts + int(attempt))
                pipe.expire(key, JOB_TTL_SECONDS)
                pipe.zadd(self._due, {job.member: retry_ms}, gt=True)
                pipe.zadd(self._deadline, {job.member: retry_ms})
            else:  # the user said /forget meanwhile: nothing to retry
                pipe.zrem(self._due, job.member)
                pipe.zrem(self._deadline, job.member)
            if holder == job.token:
                pipe.delete(lease)
            await pipe.execute()

        await watched(self._redis, put_off, f"insights job {key}")

    async def peek(self, now: datetime, limit: int = 25) -> tuple[int, list[PendingJob]]:
        """How many jobs are pending, and the ``limit`` due first, as the dashboard shows them
        (with the user's tokens spent today): two round trips."""
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.zcard(self._due)
            pipe.zrange(self._due, 0, limit - 1, withscores=True)
            size, head = await pipe.execute()
        members = [(keys.parse_insights_member(str(m)), float(score)) for m, score in head]
        day = now.strftime("%Y%m%d")
        async with self._redis.pipeline(transaction=False) as pipe:
            for (platform, user_id), _ in members:
                pipe.hmget(keys.insights_job(platform, user_id, self.queue), "rev", "attempts")
                pipe.hget(keys.insights_job(platform, user_id, self.queue), "name")
                pipe.exists(keys.insights_lease(platform, user_id, self.queue))
                pipe.get(keys.budget_user(platform, user_id, day))
            found = await pipe.execute()
        jobs = []
        for i, ((platform, user_id), score) in enumerate(members):
            (rev, attempts), name, running, used = found[4 * i : 4 * i + 4]
            jobs.append(
                PendingJob(
                    platform=platform,
                    user_id=user_id,
                    name=str(name or user_id),
                    due=datetime.fromtimestamp(score / 1000, UTC),
                    turns=int(rev or 0),
                    attempts=int(attempts or 0),
                    running=bool(running),
                    tokens_today=int(used or 0),
                )
            )
        return int(size), jobs

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
        with contextlib.suppress(KeptChanging):  # a lease that keeps changing is not ours now
            await delete_if_holds(self._redis, lease, token)

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


def queue_cancel(
    pipe: Pipeline, platform: str, user_id: str, *, queue: str = DEFAULT_QUEUE
) -> None:
    """Queue the removal of a user's pending job (3 commands), e.g. on /forget."""
    member = keys.insights_member(platform, user_id)
    pipe.delete(keys.insights_job(platform, user_id, queue))
    pipe.zrem(keys.insights_due(queue), member)
    pipe.zrem(keys.insights_deadline(queue), member)


async def record_outcome(
    redis: Redis,
    platform: str,
    user_id: str,
    outcome: str,
    at: datetime,
    *,
    queue: str = DEFAULT_QUEUE,
) -> None:
    """Note how an analysis ended (merged, unchanged, skipped...) for the admin dashboard: ids
    and the outcome only, never what was learnt."""
    key = keys.insights_outcomes(queue)
    entry = {"at": at.timestamp(), "platform": platform, "user_id": user_id, "outcome": outcome}
    async with redis.pipeline(transaction=False) as pipe:
        pipe.lpush(key, json.dumps(entry))
        pipe.ltrim(key, 0, OUTCOMES_MAX - 1)
        pipe.expire(key, OUTCOMES_SECONDS)
        await pipe.execute()


async def recent_outcomes(
    redis: Redis, *, queue: str = DEFAULT_QUEUE, limit: int = 25
) -> list[dict[str, Any]]:
    """The latest ``limit`` outcomes, newest first (unreadable entries skipped)."""
    rows = cast("list[str]", await redis.lrange(keys.insights_outcomes(queue), 0, limit - 1))
    found = []
    for row in rows:
        try:
            found.append(dict(json.loads(row)))
        except (ValueError, TypeError):
            continue
    return found


@dataclass(frozen=True)
class Exhausted:
    """Which budget stopped an analysis, and how far it went."""

    scope: str  # "user" or "channel"
    used: int
    limit: int
    channel: str | None = None


class Budget:
    """The insights agent's daily token budgets, per user and per channel."""

    def __init__(self, redis: Redis, *, user_daily: int, channel_daily: int) -> None:
        self._redis = redis
        self.user_daily = user_daily
        self.channel_daily = channel_daily

    async def exhausted(
        self,
        platform: str,
        user_id: str,
        conversations: Iterable[ConversationKey],
        now: datetime,
    ) -> Exhausted | None:
        """The first budget already spent today, or None when the analysis may run."""
        day = _day(now)
        channels = _channels(conversations)
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.get(keys.budget_user(platform, user_id, day))
            for channel in channels:
                pipe.get(keys.budget_channel(platform, channel, day))
            used = [int(value or 0) for value in await pipe.execute()]
        if used[0] >= self.user_daily:
            return Exhausted("user", used[0], self.user_daily)
        for channel, spent in zip(channels, used[1:], strict=True):
            if spent >= self.channel_daily:
                return Exhausted("channel", spent, self.channel_daily, channel)
        return None

    async def charge(
        self,
        platform: str,
        user_id: str,
        conversations: Iterable[ConversationKey],
        tokens: int,
        now: datetime,
    ) -> None:
        """Add ``tokens`` to today's counters of the user and of each channel."""
        if tokens <= 0:
            return
        day = _day(now)
        # Relative to ``now`` (not EXPIREAT) so an injected clock behaves like the real one.
        ttl = round((_end_of_day(now) + _GRACE - now).total_seconds())
        counters = [keys.budget_user(platform, user_id, day)] + [
            keys.budget_channel(platform, channel, day) for channel in _channels(conversations)
        ]
        async with self._redis.pipeline(transaction=True) as pipe:
            for key in counters:
                pipe.incrby(key, tokens)
                pipe.expire(key, ttl)
            await pipe.execute()

    async def channel_exhausted(
        self, platform: str, channel: str, now: datetime
    ) -> Exhausted | None:
        """The channel's budget when spent today (summaries and community notes have no
        subject user: they count to their channel only)."""
        used = int(await self._redis.get(keys.budget_channel(platform, channel, _day(now))) or 0)
        if used >= self.channel_daily:
            return Exhausted("channel", used, self.channel_daily, channel)
        return None

    async def charge_channel(self, platform: str, channel: str, tokens: int, now: datetime) -> None:
        """Add ``tokens`` to today's counter of the channel."""
        if tokens <= 0:
            return
        key = keys.budget_channel(platform, channel, _day(now))
        ttl = round((_end_of_day(now) + _GRACE - now).total_seconds())
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.incrby(key, tokens)
            pipe.expire(key, ttl)
            await pipe.execute()

    async def used(self, platform: str, user_id: str, now: datetime) -> int:
        return int(await self._redis.get(keys.budget_user(platform, user_id, _day(now))) or 0)


def _day(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y%m%d")


def _end_of_day(now: datetime) -> datetime:
    start = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return start + timedelta(days=1)


def _channels(conversations: Iterable[ConversationKey]) -> list[str]:
    return list(dict.fromkeys(conv.channel for conv in conversations))
