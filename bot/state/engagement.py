"""Durable live-chat state: the part of a channel's ledger that must outlive its process.

Why: the engagement ledger (bot/engagement/ledger.py) lives in the memory of the one process that
holds the channel. A restart, or the channel's bus partition moving to another worker, must not
silently undo ``!chorus pause``, forget who was answered a moment ago (the cooldowns) or answer
a mention a second time. Exactly that much is kept in a store, every key with a TTL: whether the
channel is paused, when the bot last decided to speak there, when each user was last answered,
and which messages were answered. The lines waiting for a batch stay in memory only: they cost
a write per message to keep, and losing a few ambient lines on a restart is harmless.

``LiveStore`` is the seam; ``RedisLiveStore`` keeps the state in Redis (keys ``chorus:v1:live:*``,
bot/state/keys.py) and ``MemoryLiveStore`` is its in-memory twin (one process; what a
``LiveChat`` without Redis uses). tests/test_engagement_store.py holds both to one contract. Each
turn store (``bot.state.turn``) owns the live store its turns' decisions are written to
(``channels``), so the two always agree on where a channel's state lives.

Times are the policy's clock: epoch seconds (``time.time``), so they mean the same in every
process, and they order the writes: a pause or resume, and the last time the bot spoke, are
zset scores written with ``ZADD GT``, so a late write of an older decision (a retried commit, a
process that was cut off) never undoes a newer one, whatever the order the writes land in. Reads happen once per channel activation (``load``), never per message; writes ride the
commit of a turn's reply (a ``bot.state.turn.ChannelSave``), so a reply and the record that it
was sent are durable together, or in a batch of their own (``save``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from bot.events import ConversationKey
from bot.state import keys
from bot.state.client import Pipeline, Redis, is_cluster

PAUSE_SECONDS = 12 * 3600  # CHORUS_ENGAGE_PAUSE_HOURS' default
PAUSE_FEED_MAX = 1000  # pause decisions the feed keeps (approximately): workers read it each second
PAUSE_FEED_READ = 500  # decisions one read returns at most (the rest: the next read)
PAUSED, RESUMED, SPOKE = "paused", "resumed", "spoke"  # members of a channel's zset
ANSWERED_LIMIT = 1024  # answered message ids a load returns (the newest)


@dataclass(slots=True)
class Changes:
    """What changed in one channel and is not durable yet."""

    paused: bool | None = None  # True: paused, False: resumed, None: unchanged
    pause_at: float = 0.0  # when that pause or resume was decided
    spoke: float | None = None  # when the bot last decided to speak
    users: dict[str, float] = field(default_factory=dict)  # user id -> answered at
    answered: dict[str, float] = field(default_factory=dict)  # message id -> answered at

    def __bool__(self) -> bool:
        return (
            self.paused is not None or self.spoke is not None or bool(self.users or self.answered)
        )

    def marks(self) -> dict[str, float]:
        """The channel zset's members this change writes (``paused``/``resumed``, ``spoke``)."""
        found = {} if self.paused is None else {PAUSED if self.paused else RESUMED: self.pause_at}
        if self.spoke is not None:
            found[SPOKE] = self.spoke
        return found


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A channel's durable state as one load found it."""

    paused: bool = False
    pause_at: float | None = None  # when the stored pause or resume was decided; None: neither
    spoke: float | None = None
    users: Mapping[str, float] = field(default_factory=dict)  # answered since ``users_since``
    answered: tuple[str, ...] = ()  # newest first, at most ``ANSWERED_LIMIT``

    @classmethod
    def from_marks(
        cls,
        marks: Mapping[str, float],
        horizon: float,
        users: Mapping[str, float],
        answered: tuple[str, ...],
    ) -> Snapshot:
        paused, resumed = marks.get(PAUSED), marks.get(RESUMED)
        spoke = marks.get(SPOKE)
        decided = [at for at in (paused, resumed) if at is not None]
        return cls(
            paused=paused is not None and (resumed is None or paused > resumed),
            pause_at=max(decided) if decided else None,
            spoke=spoke if spoke is not None and spoke >= horizon else None,
            users=users,
            answered=answered,
        )


class LiveStore(Protocol):
    """Where a live channel's durable state lives."""

    async def load(self, conv: ConversationKey, *, now: float, users_since: float) -> Snapshot:
        """The channel's state: one round trip."""
        ...

    async def save(self, changes: Mapping[ConversationKey, Changes], now: float) -> None:
        """Write the changes of several channels: one round trip (none when there are none)."""
        ...

    async def refresh_pause(self, convs: Sequence[ConversationKey]) -> list[bool]:
        """Restart each channel's pause TTL; False where the channel is not paused (resumed
        elsewhere, or the pause lapsed). One round trip."""
        ...

    async def pause_changes(self, cursor: str | None) -> tuple[str, list[ConversationKey]]:
        """The channels paused or resumed (by any process) since ``cursor``, and the cursor to
        pass next time. ``None``: start from now (nothing is returned). One round trip."""
        ...


class RedisLiveStore:
    """``LiveStore`` over Redis, three keys per channel (bot/state/keys.py): ``chan``, a zset of
    ``paused``/``resumed``/``spoke`` -> epoch seconds (TTL: the pause's), and the ``users`` and
    ``answered`` zsets (TTL: the ledger's), pruned by score and rank on every write."""

    def __init__(
        self,
        redis: Redis,
        *,
        pause_seconds: int = PAUSE_SECONDS,
        ledger_seconds: int = keys.LIVE_LEDGER_SECONDS,
        answered_limit: int = ANSWERED_LIMIT,
    ) -> None:
        self.redis = redis
        self.pause_seconds = pause_seconds
        self.ledger_seconds = ledger_seconds
        self.answered_limit = answered_limit

    async def load(self, conv: ConversationKey, *, now: float, users_since: float) -> Snapshot:
        horizon = now - self.ledger_seconds
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zrange(keys.live("chan", conv), 0, -1, withscores=True)
            pipe.zrangebyscore(
                keys.live("users", conv), max(users_since, horizon), "+inf", withscores=True
            )
            pipe.zrevrangebyscore(
                keys.live("answered", conv), "+inf", horizon, start=0, num=self.answered_limit
            )
            marks, users, answered = await pipe.execute()
        return Snapshot.from_marks(
            {str(m): float(at) for m, at in marks},
            horizon,
            {str(uid): float(at) for uid, at in users},
            tuple(str(m) for m in answered),
        )

    def lower(self, pipe: Pipeline, conv: ConversationKey, changes: Changes, now: float) -> None:
        """The writes of ``changes`` as commands of a transaction someone else runs (a turn's
        commit, ``bot.state.redis_turn``). Idempotent: a retried commit may queue them again."""
        marks = changes.marks()
        if marks:
            chan = keys.live("chan", conv)
            pipe.zadd(chan, marks, gt=True)  # an older decision never overwrites a newer one
            pipe.expire(chan, self.pause_seconds)
        if changes.paused is not None:  # every worker holding the channel reloads it
            feed = keys.live_pauses()
            event = {"conv": str(conv), "paused": int(changes.paused)}
            pipe.xadd(feed, event, maxlen=PAUSE_FEED_MAX, approximate=True)  # type: ignore[arg-type]
            pipe.expire(feed, self.pause_seconds)
        for kind, members, cap in (
            ("users", changes.users, None),
            ("answered", changes.answered, self.answered_limit),
        ):
            if not members:
                continue
            key = keys.live(kind, conv)
            pipe.zadd(key, dict(members), gt=True)
            pipe.zremrangebyscore(key, "-inf", f"({now - self.ledger_seconds!r}")
            if cap is not None:
                pipe.zremrangebyrank(key, 0, -cap - 1)
            pipe.expire(key, self.ledger_seconds)

    async def save(self, changes: Mapping[ConversationKey, Changes], now: float) -> None:
        if not any(changes.values()):
            return
        # a cluster spreads the channels (and the pause feed) over slots: there each command
        # is atomic on its own (each keeps the newer decision by itself, as a retry needs)
        async with self.redis.pipeline(transaction=not is_cluster(self.redis)) as pipe:
            for conv, change in changes.items():
                self.lower(pipe, conv, change, now)
            await pipe.execute()

    async def paused_many(self, convs: Sequence[ConversationKey]) -> list[bool]:
        """Whether each channel is paused (for the dashboard: no TTL is touched)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for conv in convs:
                pipe.zrange(keys.live("chan", conv), 0, -1, withscores=True)
            found = await pipe.execute()
        marks = [{str(m): float(at) for m, at in rows} for rows in found]
        return [Snapshot.from_marks(mark, 0.0, {}, ()).paused for mark in marks]

    async def refresh_pause(self, convs: Sequence[ConversationKey]) -> list[bool]:
        if not convs:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for conv in convs:
                pipe.zrange(keys.live("chan", conv), 0, -1, withscores=True)
                pipe.expire(keys.live("chan", conv), self.pause_seconds)
            found = await pipe.execute()
        snaps = [Snapshot.from_marks(dict(marks), 0.0, {}, ()) for marks in found[::2]]
        return [snap.paused for snap in snaps]

    async def pause_changes(self, cursor: str | None) -> tuple[str, list[ConversationKey]]:
        feed = keys.live_pauses()
        if cursor is None:
            newest = await self.redis.xrevrange(feed, count=1)
            return (_text(newest[0][0]) if newest else "0-0"), []
        found: list[tuple[Any, list[tuple[Any, dict[Any, Any]]]]]
        found = await self.redis.xread({feed: cursor}, count=PAUSE_FEED_READ)  # type: ignore[assignment]
        convs: list[ConversationKey] = []
        for _, entries in found:
            for entry_id, fields in entries:
                cursor = _text(entry_id)
                try:
                    conv = ConversationKey.parse(_text(fields.get(b"conv") or fields.get("conv")))
                except ValueError:
                    continue
                convs.append(conv)
        return cursor, convs


@dataclass(slots=True)
class _Channel:
    marks: dict[str, float] = field(default_factory=dict)  # paused, resumed, spoke
    marks_until: float = 0.0  # on the twin's timer, like the Redis TTL of the channel zset
    users: dict[str, float] = field(default_factory=dict)
    answered: dict[str, float] = field(default_factory=dict)


class MemoryLiveStore:
    """The in-memory twin of ``RedisLiveStore`` (one process): ``apply`` writes a turn's
    changes at once. The channel's marks lapse on ``timer``
    (monotonic seconds, as a Redis TTL does); the rest is pruned by the policy's clock."""

    def __init__(
        self,
        *,
        pause_seconds: float = PAUSE_SECONDS,
        ledger_seconds: float = keys.LIVE_LEDGER_SECONDS,
        answered_limit: int = ANSWERED_LIMIT,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pause_seconds = pause_seconds
        self.ledger_seconds = ledger_seconds
        self.answered_limit = answered_limit
        self.timer = timer
        self.channels: dict[ConversationKey, _Channel] = {}
        self.pause_feed: deque[tuple[int, ConversationKey]] = deque(maxlen=PAUSE_FEED_MAX)
        self._pause_seq = 0  # the feed's last entry (entries are numbered from 1)

    async def load(self, conv: ConversationKey, *, now: float, users_since: float) -> Snapshot:
        chan = self.channels.get(conv)
        if chan is None:
            return Snapshot()
        horizon = now - self.ledger_seconds
        since = max(users_since, horizon)
        answered = sorted(
            ((at, m) for m, at in chan.answered.items() if at >= horizon), reverse=True
        )
        return Snapshot.from_marks(
            self._marks(chan),
            horizon,
            {uid: at for uid, at in chan.users.items() if at >= since},
            tuple(m for _, m in answered[: self.answered_limit]),
        )

    def apply(self, conv: ConversationKey, changes: Changes, now: float) -> None:
        """The writes of ``changes``, at once (a turn's commit, ``bot.state.memory_turn``)."""
        chan = self.channels.setdefault(conv, _Channel())
        if changes.paused is not None:
            self._pause_seq += 1
            self.pause_feed.append((self._pause_seq, conv))
        marks = changes.marks()
        if marks:
            kept = self._marks(chan)
            for name, at in marks.items():
                kept[name] = max(at, kept.get(name, at))
            chan.marks, chan.marks_until = kept, self.timer() + self.pause_seconds
        horizon = now - self.ledger_seconds
        for members, update in ((chan.users, changes.users), (chan.answered, changes.answered)):
            for member, at in update.items():
                members[member] = max(at, members.get(member, at))
            if update:
                for gone in [m for m, at in members.items() if at < horizon]:
                    del members[gone]
        if len(chan.answered) > self.answered_limit:
            newest = sorted(chan.answered.items(), key=lambda item: item[1])
            chan.answered = dict(newest[-self.answered_limit :])

    async def save(self, changes: Mapping[ConversationKey, Changes], now: float) -> None:
        for conv, change in changes.items():
            if change:
                self.apply(conv, change, now)

    async def refresh_pause(self, convs: Sequence[ConversationKey]) -> list[bool]:
        found = []
        for conv in convs:
            chan = self.channels.get(conv)
            marks = {} if chan is None else self._marks(chan)
            if chan is not None and marks:
                chan.marks_until = self.timer() + self.pause_seconds
            found.append(Snapshot.from_marks(marks, 0.0, {}, ()).paused)
        return found

    async def pause_changes(self, cursor: str | None) -> tuple[str, list[ConversationKey]]:
        if cursor is None:
            return str(self._pause_seq), []
        after = int(cursor)
        found = [(seq, conv) for seq, conv in self.pause_feed if seq > after][:PAUSE_FEED_READ]
        return (str(found[-1][0]) if found else cursor), [conv for _, conv in found]

    def _marks(self, chan: _Channel) -> dict[str, float]:
        if self.timer() >= chan.marks_until:
            chan.marks = {}
        return chan.marks


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
