"""``TurnStore`` over Redis (a server, or the embedded ``memory://`` store): a turn's read is
one pipeline, its commit one Lua script guarded by the claim.

The read: the claim (``SET NX PX GET``), the history window, the author's memory through their
``/link`` alias (the ``LOAD`` script of ``bot.state.alias_scripts``: one command that follows the
alias, keeps a link alive and reads the buffer), the conversation's summaries, community notes
and their vectors, the author's note vectors and the knowledge base's version: one round trip.

The commit: every change of ``TurnChanges`` becomes its commands, in the order the owners'
data depends on nothing else (reply, ack, history, activity, summary and insights schedules,
the live channel's record, usage counters, the cost reservation settled), then ``SET claim
done EX``; ``GUARDED``
(``bot.state.guarded``) runs them only while the claim holds the worker's token. A script's
commands run atomically, so a reply and its record are written together or not at all, and
the other round trip of an answered message is this one. The keys the script touches are not
declared, which one Redis allows.

On a Redis Cluster (``client.is_cluster``) a script must stay within one hash slot, so the two
steps split by slot (docs/scaling.md, "Redis Cluster"). The read sends the alias and the own
buffer as two plain ``GET``s in its pipeline (redis-py sends each node its share at once) and
follows a ``/link`` alias in a second round trip, for linked authors only. The commit runs, in
``GUARDED``, the commands whose key shares the claim's slot -- the claim takes the hash tag of
the message's bus partition, whose reply stream and ack share it -- so the reply, the ack and
the ``done`` marker stay one atomic step (exactly once); the rest (history, activity,
schedules, counters, the cost settled) follows in one pipeline once the guard held: one more
round trip, and a worker killed between the two leaves that turn's reply without those records.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterator, Sequence
from typing import cast

from bot.state import keys
from bot.state.alias_scripts import LOAD
from bot.state.claims import DONE
from bot.state.client import EncodableT, Pipeline, Redis, is_cluster, slot_of
from bot.state.cost import queue_settle
from bot.state.engagement import MemoryLiveStore, RedisLiveStore
from bot.state.guarded import GUARDED
from bot.state.history import HistoryStore
from bot.state.turn import (
    Activity,
    CounterAdd,
    Effect,
    InsightDue,
    Release,
    Renew,
    SummaryDue,
    TurnChanges,
    TurnQuery,
    TurnState,
)


class RedisTurnStore:
    """Turns over one Redis client; ``history`` and ``channels`` are the stores whose layout the
    turns share (the history's window, the live channels' TTLs). A store built without them
    reads and writes everything else (``write`` of an activity or a schedule, in tests and
    commands that hold no claim)."""

    def __init__(
        self,
        redis: Redis,
        *,
        history: HistoryStore | None = None,
        channels: RedisLiveStore | MemoryLiveStore | None = None,
    ) -> None:
        self.redis = redis
        self.cluster = is_cluster(redis)
        # a cluster's commit is captured on a plain pipeline (never sent) and split by slot
        self._capture = Redis(decode_responses=True) if self.cluster else redis
        self._history = history
        self._channels = channels

    @property
    def history(self) -> HistoryStore:
        if self._history is None:
            raise ValueError("this turn store was built without a history store")
        return self._history

    @property
    def channels(self) -> RedisLiveStore | MemoryLiveStore:
        if self._channels is None:
            raise ValueError("this turn store was built without a live-channel store")
        return self._channels

    async def write(self, changes: TurnChanges) -> None:
        """``changes`` in one transaction, guarded by no claim (on a cluster, whose keys span
        slots: one pipeline, each command atomic on its own)."""
        async with self.redis.pipeline(transaction=not self.cluster) as pipe:
            self.lower(pipe, changes)
            await pipe.execute()

    # -- the read ---------------------------------------------------------------------------
    async def read(self, query: TurnQuery) -> TurnState:
        conv = query.conversation
        async with self.redis.pipeline(transaction=False) as pipe:
            if query.claim is not None:
                claim = query.claim
                pipe.set(claim.key, claim.token, nx=True, px=claim.lease_ms, get=True)
            self.history.queue_load(pipe, conv)
            if query.memory_refresh is not None and self.cluster:
                pipe.get(keys.person_of(query.platform, query.user_id))
                pipe.get(keys.memory(query.platform, query.user_id))
            elif query.memory_refresh is not None:
                who = (query.platform, query.user_id)
                pipe.eval(
                    LOAD,
                    2,
                    keys.person_of(*who),
                    keys.memory(*who),
                    keys.person_prefix(),
                    query.memory_refresh,
                )
            if query.summaries:
                pipe.get(keys.summary("sum", conv))
            if query.summaries and query.community:
                pipe.get(keys.summary("notes", conv))
            if query.summaries and query.summary_vectors:
                pipe.hgetall(keys.summary("vec", conv))
            if query.user_vectors:
                pipe.hgetall(keys.user_vectors(query.platform, query.user_id))
            if query.knowledge_base is not None:
                pipe.get(keys.knowledge(query.knowledge_base, "version"))
            results: list[object] = await pipe.execute()
        found = iter(results)
        claimed = next(found) if query.claim is not None else None
        raw = cast("list[str]", next(found))  # decoded by connect
        person, memory = None, None
        if query.memory_refresh is not None and self.cluster:
            alias_key = keys.person_of(query.platform, query.user_id)
            person, memory = await self._follow(
                alias_key, next(found), next(found), query.memory_refresh
            )
        elif query.memory_refresh is not None:
            person, memory = parse_alias_read(next(found))
        summaries = _text_or_none(next(found)) if query.summaries else None
        community = _text_or_none(next(found)) if query.summaries and query.community else None
        summary_vectors = _mapping(found) if query.summaries and query.summary_vectors else {}
        user_vectors = _mapping(found) if query.user_vectors else {}
        version = int(str(next(found) or 0)) if query.knowledge_base is not None else 0
        return TurnState(
            claimed=claimed,
            history=self.history.parse_load(conv, raw),
            waiting=self.history.waiting(raw),
            person=person,
            memory=memory,
            summaries=summaries,
            community=community,
            summary_vectors=summary_vectors,
            user_vectors=user_vectors,
            knowledge_version=version,
        )

    async def _follow(
        self, alias_key: str, alias: object, own: object, refresh: int
    ) -> tuple[str | None, str | None]:
        """``LOAD``'s work on a cluster: the own buffer, or (an alias set) the person's, read
        and kept alive in a second round trip (the person's keys hash elsewhere)."""
        person = _text(alias) or None
        if person is None:
            return None, _text_or_none(own)
        async with self.redis.pipeline(transaction=False) as pipe:
            if refresh > 0:
                pipe.expire(alias_key, refresh)
                pipe.expire(keys.person_members(person), refresh)
                pipe.expire(keys.person_memory(person), refresh)
            pipe.get(keys.person_memory(person))
            results: list[object] = await pipe.execute()
        return person, _text_or_none(results[-1])

    # -- the claim's steps ----------------------------------------------------------------------
    async def take(self, key: str, token: str, lease_ms: int) -> object:
        return await self.redis.set(key, token, nx=True, px=lease_ms, get=True)

    async def remaining_ms(self, key: str) -> int:
        return int(await self.redis.pttl(key))

    async def if_holds(self, key: str, token: str, effect: Effect) -> bool:
        """``effect`` as commands, run by ``GUARDED`` only while ``key`` holds ``token``."""
        async with self._capture.pipeline(transaction=False) as pipe:
            if isinstance(effect, Renew):
                pipe.pexpire(key, effect.lease_ms)
            elif isinstance(effect, Release):
                pipe.delete(key)
            else:
                self.lower(pipe, effect.changes)
                pipe.set(key, DONE, ex=effect.done_seconds)
            commands = [args for args, _ in pipe.command_stack]  # only captured, never sent
        later: list[tuple[str | bytes, ...]] = []
        if self.cluster:  # the claim's slot in the guarded step, the rest after it
            slot = slot_of(key)
            later = [args for args in commands if slot_of(str(args[1])) != slot]
            commands = [args for args in commands if slot_of(str(args[1])) == slot]
        argv: list[EncodableT] = [token]
        for args in commands:
            argv.append(len(args))
            argv.extend(args)
        run = cast("Awaitable[int]", self.redis.eval(GUARDED, 1, key, *argv))
        held = bool(await run)
        if held and later:
            async with self.redis.pipeline(transaction=False) as pipe:
                for command in later:
                    pipe.execute_command(*command)
                await pipe.execute()
        return held

    # -- the commit's commands --------------------------------------------------------------------
    def lower(self, pipe: Pipeline, changes: TurnChanges) -> None:
        """The commands of a turn's changes, queued on ``pipe``."""
        if changes.reply is not None:
            reply = changes.reply
            pipe.xadd(reply.stream, dict(reply.fields), maxlen=reply.maxlen, approximate=True)  # type: ignore[arg-type]
        if changes.ack is not None:
            pipe.xack(changes.ack.stream, changes.ack.group, changes.ack.entry_id)
        if changes.history is not None:
            history = changes.history
            self.history.queue_append(
                pipe, history.conversation, *history.entries, keep=history.keep
            )
        if changes.activity is not None:
            _activity(pipe, changes.activity)
        if changes.summary is not None:
            _summary(pipe, changes.summary)
        if changes.insight is not None:
            _insight(pipe, changes.insight)
        if changes.channel is not None:
            channel, live = changes.channel, self.channels
            if isinstance(live, RedisLiveStore):
                live.lower(pipe, channel.conversation, channel.changes, channel.now)
            else:  # an in-process policy's twin (one process, nothing durable): written now
                live.apply(channel.conversation, channel.changes, channel.now)
        _usage(pipe, changes.usage)
        if changes.cost is not None:
            queue_settle(pipe, changes.cost)


def parse_alias_read(result: object) -> tuple[str | None, str | None]:
    """``(person id or None, the stored buffer's JSON or None)`` from a ``LOAD`` result."""
    if not isinstance(result, Sequence) or isinstance(result, str | bytes) or len(result) != 2:
        raise ValueError(f"unexpected memory read result {result!r:.60}")
    person, raw = result
    return (_text(person) or None), (_text(raw) if raw else None)


def _activity(pipe: Pipeline, activity: Activity) -> None:
    moment = int(activity.at.timestamp())
    convs = keys.user_conversations(activity.platform, activity.user_id)
    pipe.expire(keys.memory(activity.platform, activity.user_id), activity.memory_ttl)
    pipe.zadd(convs, {str(activity.conversation): moment})
    pipe.zremrangebyscore(convs, "-inf", moment - activity.window_seconds)
    pipe.zremrangebyrank(convs, 0, -(activity.max_conversations + 1))
    pipe.expire(convs, activity.window_seconds)


def _summary(pipe: Pipeline, due: SummaryDue) -> None:
    conv = due.conversation
    if due.due_ms is not None:
        pipe.zadd(keys.summary_queue(due.queue), {str(conv): due.due_ms}, lt=True)
    if due.ttl_days is not None:
        job = keys.summary("job", conv)
        pipe.hset(job, mapping={"ttl": due.ttl_days, "community": int(due.community)})
        pipe.expire(job, due.ttl_seconds)


def _insight(pipe: Pipeline, due: InsightDue) -> None:
    member = keys.insights_member(due.platform, due.user_id)
    key = keys.insights_job(due.platform, due.user_id, due.queue)
    pipe.hincrby(key, "rev", 1)
    conversation = due.conversation_field + str(due.conversation)
    pipe.hset(key, mapping={"name": due.display_name, conversation: due.ref})
    pipe.expire(key, due.ttl_seconds)
    pipe.zadd(keys.insights_due(due.queue), {member: due.due_ms}, gt=True)
    pipe.zadd(keys.insights_deadline(due.queue), {member: due.deadline_ms}, nx=True)


def _usage(pipe: Pipeline, counters: Sequence[CounterAdd]) -> None:
    for counter in counters:
        if counter.field is None:
            pipe.incrby(counter.key, counter.amount)
        else:
            pipe.hincrby(counter.key, counter.field, counter.amount)
        pipe.expire(counter.key, counter.ttl_seconds)


def _mapping(found: Iterator[object]) -> dict[str, str]:
    raw = next(found) or {}
    return {str(k): str(v) for k, v in cast("dict[object, object]", raw).items()}


def _text_or_none(value: object) -> str | None:
    return None if value is None else _text(value)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")
