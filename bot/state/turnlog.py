"""What the admin dashboard reads, as the router writes it: the turn log (what was decided about
each message of a conversation), two indexes (which conversations were active lately, and who
is who) and the timeline (per-minute, per-hour and per-day counters for its charts and totals).

Why here, written by the router at decision time: the dashboard must answer "what did it do
here, and why?" and "find Ada on Twitch" in well under 200 ms with 10,000 conversations and
100,000 people in Redis, so nothing it reads may need a ``KEYS`` or ``SCAN``. Each index is kept
up to date where the data is born: the router's observer holds records and counts in memory and
``TurnLog.write`` sends a batch of them once a second, in one pipeline (a message costs a list
append and a dict increment, no Redis command). The timeline lives in Redis rather than
Prometheus so that any process of a scaled deployment can serve the dashboard and every
process's counts land in one place; each bucket is a hash with a TTL, so nothing needs sweeping.

Privacy: a record holds the decision, its reason and its numbers, never the message text (the
history holds that, and ``/forget`` scrubs it there); the names index holds display names, which
``forget_names`` removes with the rest of a person's data. Every log has a TTL and a cap.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Literal, cast

from bot.events import ConversationKey
from bot.state import keys
from bot.state.client import Pipeline, Redis

TURN_LOG_MAX = 200  # records kept per conversation (newest first)
TURN_LOG_SECONDS = 7 * 24 * 3600
CONVERSATIONS_MAX = 50_000  # conversations kept per platform in the activity index
PLATFORMS = ("console", "discord", "slack", "twitch", "youtube")  # the dashboard lists these
SEP = "\0"

Decision = Literal[
    "answered",
    "command",
    "batched",
    "quiet",
    "moderated",
    "over_quota",
    "error",
    "ignored",
    "spoken",
]


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One decision about one message (or one batch). Numbers are 0 when not applicable."""

    at: float  # epoch seconds
    message_id: str
    user_id: str
    user_name: str
    decision: Decision
    reason: str = ""
    model: str = ""
    prompt_tokens: int = 0
    cache_share: float = 0.0  # cached input / all input
    output_tokens: int = 0
    tools: int = 0
    latency_ms: int = 0
    cost_usd: float = 0.0
    speech_ms: int = 0  # "spoken": how long the overlay's speech provider took
    speech_chars: int = 0  # "spoken": the characters spoken (cost_usd is their estimated cost)

    def encode(self) -> str:
        # A dict built by hand: ``dataclasses.asdict`` (a deep copy) cost 5x the dump itself.
        data = {name: getattr(self, name) for name in _FIELDS}
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def decode(cls, raw: str | bytes) -> TurnRecord | None:
        """A stored record, or None when it cannot be read (a newer format, corruption)."""
        try:
            data = json.loads(raw)
            return cls(**data)
        except (ValueError, TypeError):
            return None


_FIELDS = tuple(f.name for f in fields(TurnRecord))


def name_member(name: str, platform: str, user_id: str) -> str:
    """The names index member: searchable by a lowercased prefix, unique per person and name."""
    return f"{name.strip().lower()}{SEP}{platform}{SEP}{user_id}"


def parse_name_member(member: str) -> tuple[str, str, str] | None:
    parts = member.split(SEP)
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 else None


def queue_records(
    pipe: Pipeline, conv: ConversationKey, records: Sequence[TurnRecord], *, names: bool = True
) -> None:
    """Queue ``records`` (oldest first) with the upkeep of the conversation's log and indexes:
    what ``queue_push``, ``queue_upkeep`` and ``queue_names`` do, together."""
    if not records:
        return
    queue_push(pipe, conv, records)
    queue_upkeep(pipe, conv, records[-1].at)
    if names:
        queue_names(pipe, conv.platform, {(r.user_id, r.user_name) for r in records})


def queue_push(pipe: Pipeline, conv: ConversationKey, records: Sequence[TurnRecord]) -> None:
    """The records, newest first, into the conversation's log (1 command). The writer runs
    ``queue_upkeep`` on the first push and then every few seconds, which bounds the list."""
    pipe.lpush(keys.turn_log(conv), *(record.encode() for record in records))


def queue_upkeep(pipe: Pipeline, conv: ConversationKey, at: float) -> None:
    """Cap the log and set its TTL; mark the conversation active at ``at`` (4 commands)."""
    log_key = keys.turn_log(conv)
    pipe.ltrim(log_key, 0, TURN_LOG_MAX - 1)
    pipe.expire(log_key, TURN_LOG_SECONDS)
    recent = keys.recent_conversations(conv.platform)
    pipe.zadd(recent, {str(conv): int(at)})
    pipe.zremrangebyrank(recent, 0, -(CONVERSATIONS_MAX + 1))


def queue_names(pipe: Pipeline, platform: str, people: Iterable[tuple[str, str]]) -> None:
    """Index each (user id, display name) by name and by id (1 command), and remember each
    person's names under their own key (2 commands each), so ``/forget`` finds every name they
    went by, not only today's."""
    members: dict[str, int] = {}
    for user_id, name in people:
        if not user_id:
            continue
        members |= {name_member(text, platform, user_id): 0 for text in {name or user_id, user_id}}
        if name:
            pipe.sadd(keys.user(platform, user_id, "names"), name)
            pipe.expire(keys.user(platform, user_id, "names"), keys.USER_TTL_SECONDS)
    if members:
        pipe.zadd(keys.user_names(), members)


async def names_of(redis: Redis, platform: str, user_id: str) -> set[str]:
    """Every display name the names index holds for this person (for ``forget_names``)."""
    return {str(n) for n in await redis.smembers(keys.user(platform, user_id, "names"))}


def forget_names(pipe: Pipeline, platform: str, user_id: str, names: Iterable[str]) -> None:
    """Queue the removal of a person's entries from the names index (their id and ``names``:
    pass ``names_of`` and the name they use now) and of their own list of names."""
    members = [name_member(n, platform, user_id) for n in {*names, user_id} if n]
    pipe.zrem(keys.user_names(), *members)
    pipe.delete(keys.user(platform, user_id, "names"))


async def went_by(redis: Redis, platform: str, user_id: str, name: str) -> bool:
    """Whether the names index holds ``name`` for this person."""
    member = name_member(name, platform, user_id)
    return await redis.zscore(keys.user_names(), member) is not None


async def read_logs(
    redis: Redis, convs: Sequence[ConversationKey], limit: int = 50
) -> list[list[TurnRecord]]:
    """The newest ``limit`` records of each conversation, newest first: one round trip."""
    async with redis.pipeline(transaction=False) as pipe:
        for conv in convs:
            pipe.lrange(keys.turn_log(conv), 0, limit - 1)
        found = await pipe.execute()
    return [[r for r in map(TurnRecord.decode, raw) if r is not None] for raw in found]


async def read_log(redis: Redis, conv: ConversationKey, limit: int = 50) -> list[TurnRecord]:
    """The newest ``limit`` records of one conversation, newest first."""
    raw = await redis.lrange(keys.turn_log(conv), 0, limit - 1)
    return [r for r in map(TurnRecord.decode, cast("list[str]", raw)) if r is not None]


async def recent(
    redis: Redis, platforms: Sequence[str] = PLATFORMS, limit: int = 50
) -> dict[str, list[tuple[ConversationKey, float]]]:
    """Each platform's ``limit`` most recently active conversations: one round trip."""
    async with redis.pipeline(transaction=False) as pipe:
        for platform in platforms:
            pipe.zrevrange(keys.recent_conversations(platform), 0, limit - 1, withscores=True)
        found = await pipe.execute()
    out: dict[str, list[tuple[ConversationKey, float]]] = {}
    for platform, rows in zip(platforms, found, strict=True):
        convs = []
        for member, score in rows:
            try:
                convs.append((ConversationKey.parse(str(member)), float(score)))
            except ValueError:
                continue
        out[platform] = convs
    return out


async def find_people(
    redis: Redis, query: str, platform: str | None = None, limit: int = 50
) -> list[tuple[str, str, str]]:
    """People whose lowercased name or id starts with ``query``: (name, platform, user id),
    each person once. ``ZRANGEBYLEX`` on the prefix: O(log N + limit), never a scan."""
    prefix = query.strip().lower()
    if not prefix:
        return []
    start = b"[" + prefix.encode()
    end = b"(" + prefix.encode() + b"\xff"  # past every member with this byte prefix
    rows = await redis.zrangebylex(keys.user_names(), start, end, start=0, num=limit * 4)
    seen: dict[tuple[str, str], str] = {}
    for member in rows:
        parsed = parse_name_member(str(member))
        if parsed is None or (platform and parsed[1] != platform):
            continue
        name, where, user_id = parsed
        current = seen.get((where, user_id))
        if current is None or (current == user_id.lower() and name != current):
            seen[(where, user_id)] = name  # a real name is better than the id
        if len(seen) >= limit:
            break
    return [(name, where, uid) for (where, uid), name in seen.items()]


class TurnLog:
    """Writes what the router's observer held: records, indexes and timeline counts."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def write(
        self,
        records: Mapping[ConversationKey, Sequence[TurnRecord]],
        *,
        upkeep: Collection[ConversationKey] = (),
        names: Mapping[str, Collection[tuple[str, str]]] | None = None,
        counts: Mapping[str, int] | None = None,
        now: datetime,
    ) -> None:
        """One pipeline: each conversation's ``records`` (oldest first), the log's cap, TTL
        and activity for the conversations in ``upkeep``, each platform's ``names`` indexed,
        and the timeline's ``counts`` added to the buckets of ``now``."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for conv, held in records.items():
                if held:
                    queue_push(pipe, conv, held)
                if held and conv in upkeep:
                    queue_upkeep(pipe, conv, held[-1].at)
            for platform, people in (names or {}).items():
                if people:
                    queue_names(pipe, platform, people)
            if counts:
                _queue_counts(pipe, counts, now)
            await pipe.execute()


# -- the timeline --------------------------------------------------------------------------
MINUTE_SECONDS = 26 * 3600  # a minute bucket outlives the day it belongs to
HOUR_SECONDS = 8 * 24 * 3600  # an hour bucket outlives the week the 7-day chart shows
DAY_SECONDS = 8 * 24 * 3600
COST_SCALE = 1_000_000  # cost is counted in micro-USD (HINCRBY takes integers)


def minute_bucket(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y%m%d%H%M")


def hour_bucket(moment: datetime) -> str:
    return "h" + moment.astimezone(UTC).strftime("%Y%m%d%H")


def day_bucket(moment: datetime) -> str:
    return "d" + moment.astimezone(UTC).strftime("%Y%m%d")


class Timeline:
    """Counts since the last flush: ``in:<platform>``, ``out:<platform>``, ``replies``,
    ``tokens_in``, ``tokens_out``, ``cache_read``, ``cost_micro``, ``errors``, and the
    answers' latency histogram ``lat:<upper bound ms>`` (bot/state/rollups.py)."""

    def __init__(self) -> None:
        self.pending: Counter[str] = Counter()

    def count(self, field: str, amount: int = 1) -> None:
        self.pending[field] += amount

    def cost(self, usd: float | None) -> None:
        if usd:
            self.pending["cost_micro"] += round(usd * COST_SCALE)

    def take(self) -> dict[str, int]:
        """What was counted since the last ``take`` (and forget it here)."""
        taken = {field: n for field, n in self.pending.items() if n}
        self.pending.clear()
        return taken

    def put_back(self, counts: Mapping[str, int]) -> None:
        """Counts ``take`` gave that could not be written: counted again."""
        self.pending.update(counts)

    async def flush(self, log: TurnLog, now: datetime) -> None:
        """Send what was counted, alone. A failure puts the counts back."""
        counts = self.take()
        if not counts:
            return
        try:
            await log.write({}, counts=counts, now=now)
        except BaseException:
            self.put_back(counts)
            raise


async def read_minutes(
    redis: Redis, now: datetime, minutes: int = 60
) -> list[tuple[datetime, dict[str, int]]]:
    """The last ``minutes`` minute buckets, oldest first (empty ones as ``{}``): one round trip."""
    moments = [now - timedelta(minutes=minutes - 1 - i) for i in range(minutes)]
    async with redis.pipeline(transaction=False) as pipe:
        for moment in moments:
            pipe.hgetall(keys.timeline(minute_bucket(moment)))
        found = await pipe.execute()
    return [(m, _ints(raw)) for m, raw in zip(moments, found, strict=True)]


async def read_day(redis: Redis, now: datetime) -> dict[str, int]:
    """Today's (UTC) counters."""
    return _ints(await redis.hgetall(keys.timeline(day_bucket(now))))


def _ints(raw: object) -> dict[str, int]:
    if not isinstance(raw, dict):
        return {}
    return {str(k): int(v) for k, v in raw.items()}


def total(row: dict[str, int], prefix: str) -> int:
    """The sum of every field starting with ``prefix`` (``in:`` over every platform)."""
    return sum(n for field, n in row.items() if field.startswith(prefix))


def series(rows: Sequence[tuple[datetime, dict[str, int]]], prefix: str) -> list[int]:
    return [total(row, prefix) for _, row in rows]


def _queue_counts(pipe: Pipeline, counts: Mapping[str, int], now: datetime) -> None:
    for key, ttl in (
        (keys.timeline(minute_bucket(now)), MINUTE_SECONDS),
        (keys.timeline(hour_bucket(now)), HOUR_SECONDS),
        (keys.timeline(day_bucket(now)), DAY_SECONDS),
    ):
        for field, amount in counts.items():
            pipe.hincrby(key, field, amount)
        pipe.expire(key, ttl)
