"""Conversation summaries and community notes in Redis, and the queue of conversations due one.

What is stored per conversation (keys in ``bot.state.keys``): ``sum`` (the day summaries, one
JSON value), ``notes`` (the community notes and mood), ``vec`` (their vectors), ``job`` (the
scope's settings and the last line summarised) and ``lease``; per user, ``summ``: the
conversations whose summaries their lines fed, so ``/forget`` finds them all. The shapes of the
values are ``bot.memory.summaries``'; this module only moves them, so each change arrives as a
function of what is stored (``SummaryStore.write``, ``SummaryStore.forget``), run between the
``WATCH``ed read and the ``MULTI``: a write never loses a concurrent one, and no Lua is needed.

The queue: a conversation is due (the ``due`` zset, scheduled by a turn's commit:
``bot.state.turn.SummaryDue``) when its UTC day is over or when lines pile up past its history
window. Like a user's insights job it is leased with ``SET NX PX``, so two workers never
summarise it at once; a worker that dies leaves the job due, and the lease lapses. The job hash
carries the scope's settings, so the worker resolves no scopes.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import cast

from bot.events import ConversationKey
from bot.state import keys
from bot.state.client import Pipeline, Redis, is_cluster, watched

log = logging.getLogger("chorus.summaries")

DEFAULT_QUEUE = "main"


@dataclass(frozen=True)
class Stored:
    """A conversation's stored summaries and community notes (None: none)."""

    summaries: str | None = None
    notes: str | None = None


@dataclass(frozen=True)
class SummaryWrite:
    """What one summariser run leaves: the new summaries (None: none left) and, when
    ``notes`` is set, the new notes; the history lines it folded in (their stored values) leave
    the history; ``mark`` is the last line summarised; ``cited`` are the users whose summary
    index must name this conversation. Everything lives ``ttl_seconds``; the job's mark,
    ``job_ttl_seconds`` (a line's text is never kept longer than the history keeps it)."""

    summaries: str | None
    notes: str | None
    remove: Sequence[str]
    mark: str
    cited: Sequence[str]
    ttl_seconds: int
    job_ttl_seconds: int
    at: datetime


@dataclass(frozen=True)
class Dropped:
    """What ``/forget`` leaves of one conversation's summaries and notes (None: delete), and
    how many entries went."""

    summaries: str | None
    notes: str | None
    summaries_gone: int = 0
    notes_gone: int = 0
    changed: bool = False


class SummaryStore:
    """The summaries, notes and summarised lines of conversations."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def read(self, conv: ConversationKey) -> Stored:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(keys.summary("sum", conv))
            pipe.get(keys.summary("notes", conv))
            summaries, notes = await pipe.execute()
        return Stored(summaries, notes)

    async def read_with_lines(self, conv: ConversationKey) -> tuple[list[str], Stored]:
        """The conversation's whole history list (stored values) and what ``read`` returns."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.lrange(keys.history(conv), 0, -1)
            pipe.get(keys.summary("sum", conv))
            pipe.get(keys.summary("notes", conv))
            lines, summaries, notes = await pipe.execute()
        return cast("list[str]", lines), Stored(summaries, notes)

    async def drop_job(self, conv: ConversationKey) -> None:
        await self.redis.delete(keys.summary("job", conv))

    async def remove_lines(self, conv: ConversationKey, lines: Sequence[str]) -> None:
        """``LREM`` already summarised lines from the history (by value: appends and
        deletions meanwhile are never hit)."""
        async with self.redis.pipeline(transaction=True) as pipe:
            for raw in lines:
                pipe.lrem(keys.history(conv), 1, raw)
            await pipe.execute()

    async def write(
        self,
        conv: ConversationKey,
        compose: Callable[[Stored], SummaryWrite],
        *,
        authors: Sequence[str],
        started: datetime,
    ) -> bool:
        """Write what ``compose`` makes of what is stored, atomically; False, writing
        nothing, when one of ``authors`` said ``/forget`` since ``started``."""
        sum_key, notes_key = keys.summary("sum", conv), keys.summary("notes", conv)
        tombs = [keys.forgotten(conv.platform, user) for user in authors]
        since_ms = int(started.timestamp() * 1000)
        cluster = is_cluster(self.redis)
        if cluster:  # the marks live in the authors' slots: read before, not watched
            if any(int(at) >= since_ms for at in await self._marks(tombs) if at is not None):
                return False
            tombs = []

        async def write_them(pipe: Pipeline) -> bool:
            await pipe.watch(sum_key, notes_key, *tombs)
            for tomb in tombs:
                forgot = await pipe.get(tomb)
                if forgot is not None and int(forgot) >= since_ms:
                    await pipe.unwatch()  # type: ignore[no-untyped-call]
                    return False
            stored = Stored(_text(await pipe.get(sum_key)), _text(await pipe.get(notes_key)))
            write = compose(stored)
            pipe.multi()  # type: ignore[no-untyped-call]
            _queue_write(pipe, conv, write, cite=not cluster)
            await pipe.execute()
            if cluster:  # the authors' indexes, in their own slots, after
                async with self.redis.pipeline(transaction=False) as cites:
                    _queue_cites(cites, conv, write)
                    await cites.execute()
            return True

        return await watched(self.redis, write_them, f"summaries of {conv}")

    async def _marks(self, tombs: Sequence[str]) -> list[str | None]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for tomb in tombs:
                pipe.get(tomb)
            found: list[str | None] = await pipe.execute()
        return found

    async def forget(
        self,
        platform: str,
        user_id: str,
        conversations: Iterable[ConversationKey],
        drop: Callable[[Stored], Dropped],
    ) -> list[Dropped]:
        """Apply ``drop`` to the summaries and notes of ``conversations`` and of every one the
        user's summary index names (on ``platform``), each atomically; the index goes after.
        A conversation whose entries change loses its vectors too (their ids need the model:
        the summariser embeds what is left on its next run)."""
        cites = keys.user(platform, user_id, "summ")
        indexed = cast("list[str]", await self.redis.zrange(cites, 0, -1))  # decoded by connect
        convs = dict.fromkeys(list(conversations))
        for member in indexed:
            try:
                convs.setdefault(ConversationKey.parse(member))
            except ValueError:
                log.warning("skipping an unreadable conversation in a summary index", exc_info=True)
        done = [await self._drop(conv, drop) for conv in convs if conv.platform == platform]
        await self.redis.delete(cites)
        return done

    async def _drop(self, conv: ConversationKey, drop: Callable[[Stored], Dropped]) -> Dropped:
        sum_key, notes_key = keys.summary("sum", conv), keys.summary("notes", conv)

        async def drop_them(pipe: Pipeline) -> Dropped:
            await pipe.watch(sum_key, notes_key)
            stored = Stored(_text(await pipe.get(sum_key)), _text(await pipe.get(notes_key)))
            dropped = drop(stored)
            if not dropped.changed:
                await pipe.unwatch()  # type: ignore[no-untyped-call]
                return dropped
            pipe.multi()  # type: ignore[no-untyped-call]
            _queue_keep_ttl(pipe, sum_key, dropped.summaries)
            _queue_keep_ttl(pipe, notes_key, dropped.notes)
            pipe.delete(keys.summary("vec", conv))
            await pipe.execute()
            return dropped

        return await watched(self.redis, drop_them, f"summaries of {conv}")


def _queue_write(
    pipe: Pipeline, conv: ConversationKey, write: SummaryWrite, *, cite: bool = True
) -> None:
    sum_key, notes_key, ttl = (
        keys.summary("sum", conv),
        keys.summary("notes", conv),
        write.ttl_seconds,
    )
    if write.summaries is not None:
        pipe.set(sum_key, write.summaries, ex=ttl)
    else:
        pipe.delete(sum_key)
    if write.notes is not None:
        pipe.set(notes_key, write.notes, ex=ttl)
    history = keys.history(conv)
    for raw in write.remove:
        pipe.lrem(history, 1, raw)
    job = keys.summary("job", conv)
    pipe.hset(job, "mark", write.mark)
    pipe.expire(job, write.job_ttl_seconds)
    if cite:
        _queue_cites(pipe, conv, write)


def _queue_cites(pipe: Pipeline, conv: ConversationKey, write: SummaryWrite) -> None:
    """Each cited author's index of the conversations whose summaries name them."""
    for user in write.cited:
        index = keys.user(conv.platform, user, "summ")
        pipe.zadd(index, {str(conv): int(write.at.timestamp())})
        pipe.expire(index, write.ttl_seconds)


def _queue_keep_ttl(pipe: Pipeline, key: str, value: str | None) -> None:
    """Overwrite ``key`` keeping its TTL, or delete it when nothing is left."""
    if value is None:
        pipe.delete(key)
    else:
        pipe.set(key, value, keepttl=True)


# -- the queue -------------------------------------------------------------------------------
@dataclass(frozen=True)
class ConversationJob:
    conversation: ConversationKey
    ttl_days: int
    community: bool
    token: str
    mark: str | None = None  # the last line summarised (a history entry's JSON)


class SummaryQueue:
    """The summariser's side of the queue: claim, finish, put off, give back."""

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

    async def finish(self, job: ConversationJob, next_due: datetime | None) -> None:
        """Release the lease; due again at ``next_due``, or no longer due (None)."""
        member = str(job.conversation)
        lease = keys.summary("lease", job.conversation)
        holder = await self._redis.get(lease)
        # the queue and the lease hash apart on a cluster: there, one command at a time
        async with self._redis.pipeline(transaction=not is_cluster(self._redis)) as pipe:
            if next_due is not None:
                pipe.zadd(self._due, {member: _ms(next_due)})
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
        async with self._redis.pipeline(transaction=not is_cluster(self._redis)) as pipe:
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


def _text(value: object) -> str | None:
    """A GET result (decoded by ``connect``) as text, or None."""
    return None if value is None else value.decode() if isinstance(value, bytes) else str(value)


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)
