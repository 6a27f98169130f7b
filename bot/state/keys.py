"""Every Redis key Chorus uses, built in this one module.

One format, one prefix, one place to look: a key built anywhere else is a bug. The version in
the prefix lets a future incompatible format live next to this one during a rolling deploy.
Ids coming from platforms may contain ``:`` (the separator), so each id is escaped the same way
``ConversationKey.__str__`` escapes channel and thread (``%`` -> ``%25``, ``:`` -> ``%3A``):
channel ``a:b`` and channel ``a`` + thread ``b`` can never share a key.

Keys (``{platform}`` is ``[a-z0-9_]+``; every other ``{...}`` part is escaped):

``chorus:v1:hist:{platform}:{channel}[:{thread}]`` -- list of JSON ``HistoryEntry``
    TTL CHORUS_HISTORY_TTL (default 7 days), refreshed by every append.
    Written by ``HistoryStore`` (bot/state/history.py).
``chorus:v1:user:{platform}:{user_id}:{kind}`` -- per-user value (``kind`` is ``[a-z0-9_]+``,
    e.g. ``pins``); TTL ``USER_TTL_SECONDS`` (30 days), refreshed by every write.
    Written by its owner (e.g. the insights worker).
``chorus:v1:dedupe:{platform}:{message_id}`` -- string ``claimed`` then ``done``
    TTL: claim 10 minutes, done 3 days (``RouterLimits``). Written by the router.
``chorus:v1:user:{platform}:{user_id}:memory`` -- string, compact JSON ``UserBuffer`` (pins,
    recommendations, timezone); <= 4 KB. TTL CHORUS_MEMORY_TTL (30 days), set by every write
    and refreshed by every answered turn. Written by ``MemoryStore`` (bot/memory/buffers.py).
``chorus:v1:user:{platform}:{user_id}:convs`` -- zset, conversation key -> last activity (epoch
    seconds); the conversations whose history holds this user's lines, for ``/forget``. Pruned
    and TTL'd to the longer of CHORUS_MEMORY_TTL and CHORUS_HISTORY_TTL. ``MemoryStore``.
``chorus:v1:user:{platform}:{user_id}:forgot`` -- string, epoch ms of the user's last
    ``/forget``; TTL 1 day. An insights analysis that started earlier must not write back.
``chorus:v1:user:{platform}:{user_id}:person`` -- string, the person id a linked identity
    belongs to (``/link``); TTL CHORUS_MEMORY_TTL, refreshed by the identity's activity. When
    set, the identity's memory lives in ``chorus:v1:user:person:{person_id}:memory`` (the pseudo
    platform ``person``; the id is 24 hex digits) and ``...:person:{person_id}:members`` is the
    set of its identities (``{platform}:{escaped user_id}``); both TTL CHORUS_MEMORY_TTL,
    refreshed by any member's activity. bot/memory/aliases.py and bot/memory/people.py.
``chorus:v1:user:{platform}:{user_id}:pinsview`` -- string, the fingerprints of the entries the
    user's last ``/pins`` numbered, so ``/forget <n>`` deletes what was shown; TTL 1 hour.
``chorus:v1:user:{platform}:{user_id}:linkcode`` / ``...:linktries`` -- the one-time code this
    identity issued last (a new one voids it) / its failed ``/link <code>`` attempts; TTL the
    code's life / the attempt window (10 minutes).
``chorus:v1:link:{code}`` -- string, ``{platform}:{escaped user_id}`` of the identity that issued
    the one-time link code; TTL 10 minutes (2 in public chat), deleted when used (``GETDEL``).
``chorus:v1:insights:{queue}:due`` / ``chorus:v1:insights:{queue}:deadline`` -- zsets of
    pending insights jobs, member ``{platform}:{user_id}`` (``insights_member``), score = epoch
    ms when due (debounce) / the latest it may wait (first pending turn +
    CHORUS_INSIGHTS_MAX_DELAY). ``queue`` is ``[a-z0-9_]+``, ``main`` unless a deployment (or a
    test) wants its own. Shared by the queue's users, no TTL: members are removed when their
    job completes. Written by bot/memory/insight_queue.py and insights/jobs.py.
``chorus:v1:insights:{queue}:job:{platform}:{user_id}`` -- hash of one user's pending job:
    ``rev`` (turn counter), ``attempts``, ``name``, ``c:{conversation}`` -> JSON of the last
    turn there. TTL ``insight_jobs.JOB_TTL_SECONDS`` (2 days), refreshed per turn and retry.
``chorus:v1:insights:{queue}:lease:{platform}:{user_id}`` -- string, the token of the worker
    analysing that user (``SET NX PX``), so two workers never analyse one user at once.
``chorus:v1:budget:user:{platform}:{user_id}:{yyyymmdd}`` and
``chorus:v1:budget:chan:{platform}:{channel}:{yyyymmdd}`` -- integer insights tokens used that
    UTC day (``INCRBY``); expire at the end of that day (+1 hour). Written by insights/budget.py.
``chorus:v1:bus:{ns}:stream:{topic}:{partition}`` -- Redis stream, one partition of a bus topic
    (``topic`` is ``[a-z0-9_]+`` parts joined by ``:``, e.g. ``outbound:discord``; the partition
    number is always the last part). Entries hold one field ``e`` (the event's JSON). Capped by
    ``XADD MAXLEN ~`` and trimmed to CHORUS_BUS_RETENTION by a periodic ``XTRIM MINID``
    (bot/bus/retention.py), no TTL; ``/forget`` deletes a user's entries (bot/bus/erasure.py).
    ``ns`` is ``[a-z0-9_]+``, ``main`` unless a deployment (or a
    test) wants its own. Written by ``RedisStreamsBus`` (bot/bus/streams.py).
``chorus:v1:bus:{ns}:members:{group}:{topic}`` -- zset, consumer token -> heartbeat deadline
    (epoch ms) of the live consumers of one group; TTL 3 leases, refreshed by every heartbeat.
``chorus:v1:bus:{ns}:lease:{group}:{topic}:{partition}`` -- string, the token of the consumer
    that reads that partition (``SET NX PX``, renewed by compare-and-set); lapses when it dies.
``chorus:v1:bus:{ns}:retention`` -- string, the token of the process that swept the streams
    last (``SET NX PX`` one sweep interval), so one process per interval trims them.

A history list holds JSON ``HistoryEntry`` values, oldest first, capped by CHORUS_HISTORY_MAX.
A user key belongs to a person, so it must always carry a TTL: whoever writes one sets it in the
same pipeline as the write. A dedupe key is ``SET NX`` by the router when it claims a message
(value ``claimed``) and overwritten with ``done`` after the answer, each with its own expiry.
``chorus:v1:tokens:{platform}:{app_id}`` -- string, JSON of the bot account's OAuth tokens
    (Twitch); no TTL: the bot's own credential, not a user's data. adapters/twitch/tokens.py.
``chorus:v1:ratelimit:{platform}:{bucket}`` -- zset, one member per granted send scored by its
    epoch time; PEXPIRE one window (+1 s). ``...:{bucket}:pause`` -- string, epoch seconds until
    which sends wait; PX = the pause. Shared by every process of a deployment so they stay
    under one platform budget. adapters/twitch/ratelimit.py.
``chorus:v1:quota:{platform}:{project}:{yyyymmdd}`` -- hash ``units``, ``inserts`` and the units by
    kind (``read``, ``reply``, ``lookup``): the API quota spent that quota day (YouTube: Pacific
    time); expires an hour after the day's reset. ``...:{project}:holds`` -- hash, hold id ->
    ``"{units} {expiry epoch}"``: units reserved by replies decided but not yet sent (settled by
    the sender, or lapsed). ``...:{project}:stream`` -- hash ``started``, ``since``, ``reading``,
    ``mentions``, ``unprompted``: the chat being read (its start, stream or poll, mentions seen
    since ``since``) and the latest unprompted turn. Those two: TTL 2 days, refreshed by every
    write. bot/quota/ledger.py (the gateway's YouTube adapter and the workers' reply budget).
``chorus:v1:live:{kind}:{platform}:{channel}[:{thread}]`` -- what of a live channel's engagement
    ledger outlives the process that holds it (``RedisLiveStore``, bot/live/store.py). ``chan``:
    zset, ``paused``/``resumed``/``spoke`` -> epoch seconds of the latest pause, resume and
    decision to speak (``ZADD GT``: the newest wins; paused while ``paused`` > ``resumed``); TTL
    CHORUS_ENGAGE_PAUSE_HOURS (default 12 h), refreshed by every write and while chat goes on in
    a paused channel. ``users``: zset, user id -> epoch seconds last answered (the per-user
    cooldown). ``answered``: zset, message id -> epoch seconds it was answered (no second answer
    after a restart; the newest 1,024 kept). Those two: TTL ``LIVE_LEDGER_SECONDS`` (30 minutes),
    refreshed and pruned by score by every write.
``chorus:v1:usage:{user|chan}:{platform}:{id}:{period}`` -- hash ``m`` (messages answered) and
    ``t`` (tokens: all input plus output) of one user or channel (threads count to their channel)
    in one UTC hour (``hYYYYMMDDHH``) or day (``dYYYYMMDD``); expires an hour after the period.
    ``...:usage:cost:{ns}:{yyyymmdd}`` -- integer, the deployment's estimated spend that UTC day in
    micro-USD; same expiry. ``...:usage:notice:{kind}:{platform}:{id}:{period}`` -- string, set
    (``SET NX``) when the one "over the limit" notice of that period was sent; expires with it.
    Checked and counted atomically by one Lua script (bot/safety/quota.py), so every worker
    shares the limits.
``chorus:v1:summ:{kind}:{platform}:{channel}[:{thread}]`` -- what a conversation keeps past its
    history (bot/memory/summaries.py). ``sum``: string, JSON list of daily summaries; ``notes``:
    string, JSON community notes and mood; both TTL the scope's CHORUS_SUMMARY_TTL_DAYS. ``job``:
    hash of the summariser's settings (``ttl`` days, ``community``) and ``mark``, the last line
    summarised; TTL CHORUS_HISTORY_TTL. ``lease``: the summarising worker's token (``SET NX PX``).
    (The lines awaiting a summary stay in the ``hist`` list, past its window.)
``chorus:v1:summ:{queue}:due`` -- zset, conversation -> epoch ms when its summary is due (``ZADD
    LT``: now when lines wait, else after its UTC day); removed when nothing waits.
``chorus:v1:user:{platform}:{user_id}:summ`` -- zset, conversation -> epoch seconds: the
    summaries and notes that cite the user, for ``/forget``; TTL as ``sum``.
``chorus:v1:safety:users:{platform}:{channel}`` -- hash, user id -> ``block`` or ``allow``, set
    by moderators' ``/block`` and ``/allow`` (bot/safety/users.py). No TTL: a moderator's
    decision, not a user's data; removed by ``/unblock`` and ``/disallow``.
``chorus:v1:safety:audit:{ns}`` -- Redis stream of moderation and quota decisions (who, where, which
    rule, what happened; never the text), capped by ``XADD MAXLEN ~`` CHORUS_AUDIT_MAX_ENTRIES.
    bot/safety/audit.py.
"""

from __future__ import annotations

import re

from bot.events import ConversationKey
from bot.events import escape_key_part as _escape_part  # the one escaping rule

PREFIX = "chorus:v1"

# A per-user key (pins, recommendations...) outlives inactivity by this much, then Redis forgets it.
USER_TTL_SECONDS = 30 * 24 * 3600
# A live channel's cooldowns and answered messages outlive its last write by this much.
LIVE_LEDGER_SECONDS = 30 * 60

_TOKEN = re.compile(r"^[a-z0-9_]+$")


def history(conv: ConversationKey) -> str:
    """The list of one conversation's history (a thread is its own conversation)."""
    return f"{PREFIX}:hist:{conv}"


def user(platform: str, user_id: str, kind: str) -> str:
    """A per-user value of ``kind`` (e.g. ``pins``); identity is the platform's user id."""
    _check_token("platform", platform)
    _check_token("kind", kind)
    _check_id("user_id", user_id)
    return f"{PREFIX}:user:{platform}:{_escape_part(user_id)}:{kind}"


def dedupe(platform: str, message_id: str) -> str:
    """The claim/done marker of one platform message, for at-least-once delivery."""
    _check_token("platform", platform)
    _check_id("message_id", message_id)
    return f"{PREFIX}:dedupe:{platform}:{_escape_part(message_id)}"


def _check_token(name: str, value: str) -> None:
    if not _TOKEN.match(value):
        raise ValueError(f"{name} must match [a-z0-9_]+, got {value!r}")


def _check_id(name: str, value: str) -> None:
    if not value:
        raise ValueError(f"{name} must not be empty")


# -- per-user memory and the insights agent ------------------------------------------------------
def memory(platform: str, user_id: str) -> str:
    """One user's buffer: pins, recommendations and timezone in one compact JSON string."""
    return user(platform, user_id, "memory")


# -- one person across platforms (/link) ----------------------------------------------------------
PERSON = "person"  # the pseudo platform of a linked person's keys


def person_of(platform: str, user_id: str) -> str:
    """The alias of a linked identity: the person id it belongs to."""
    return user(platform, user_id, "person")


def person_prefix() -> str:
    """What every key of a person starts with; the person id and ``:{kind}`` follow (for the Lua
    scripts that follow an alias: they build ``person_prefix() + person_id + ":memory"``)."""
    return f"{PREFIX}:user:{PERSON}:"


def person_memory(person_id: str) -> str:
    """A linked person's buffer (``memory`` under the pseudo platform ``person``)."""
    return memory(PERSON, person_id)


def person_members(person_id: str) -> str:
    """The set of identities (``identity_member``) linked into one person."""
    return user(PERSON, person_id, "members")


def identity_member(platform: str, user_id: str) -> str:
    """One identity as a set member or a value: ``{platform}:{escaped user_id}``."""
    _check_token("platform", platform)
    _check_id("user_id", user_id)
    return f"{platform}:{_escape_part(user_id)}"


def parse_identity_member(value: str) -> tuple[str, str]:
    """``identity_member``'s inverse: ``(platform, user_id)``."""
    platform, sep, escaped = value.partition(":")
    if not sep or not _TOKEN.match(platform) or not escaped:
        raise ValueError(f"not an identity: {value[:40]!r}")
    return platform, escaped.replace("%3A", ":").replace("%25", "%")


def link_code(code: str) -> str:
    """A one-time ``/link`` code, naming the identity that issued it."""
    _check_token("code", code.lower())
    return f"{PREFIX}:link:{code}"


def user_conversations(platform: str, user_id: str) -> str:
    """The zset of conversations a user spoke in (for ``/forget``)."""
    return user(platform, user_id, "convs")


def forgotten(platform: str, user_id: str) -> str:
    """When the user last said ``/forget`` (blocks the write-back of an older analysis)."""
    return user(platform, user_id, "forgot")


def insights_due(queue: str = "main") -> str:
    """Zset of pending insights jobs by debounced due time (epoch ms)."""
    _check_token("queue", queue)
    return f"{PREFIX}:insights:{queue}:due"


def insights_deadline(queue: str = "main") -> str:
    """Zset of pending insights jobs by the latest time they may wait (epoch ms)."""
    _check_token("queue", queue)
    return f"{PREFIX}:insights:{queue}:deadline"


def insights_member(platform: str, user_id: str) -> str:
    """The deterministic job id of one user: at most one pending job per user."""
    _check_token("platform", platform)
    _check_id("user_id", user_id)
    return f"{platform}:{_escape_part(user_id)}"


def parse_insights_member(member: str) -> tuple[str, str]:
    """Inverse of ``insights_member``: ``(platform, user_id)``."""
    platform, sep, escaped = member.partition(":")
    if not sep or ":" in escaped or not escaped:
        raise ValueError(f"not an insights job id: {member!r}")
    _check_token("platform", platform)
    return platform, escaped.replace("%3A", ":").replace("%25", "%")


def insights_job(platform: str, user_id: str, queue: str = "main") -> str:
    """The hash holding one user's pending insights job."""
    _check_token("queue", queue)
    return f"{PREFIX}:insights:{queue}:job:{insights_member(platform, user_id)}"


def insights_lease(platform: str, user_id: str, queue: str = "main") -> str:
    """The ``SET NX PX`` lease of the worker analysing one user."""
    _check_token("queue", queue)
    return f"{PREFIX}:insights:{queue}:lease:{insights_member(platform, user_id)}"


def budget_user(platform: str, user_id: str, day: str) -> str:
    """Insights tokens one user used on one UTC day (``day`` is ``YYYYMMDD``)."""
    _check_day(day)
    return f"{PREFIX}:budget:user:{insights_member(platform, user_id)}:{day}"


def budget_channel(platform: str, channel: str, day: str) -> str:
    """Insights tokens one channel (all its threads) used on one UTC day."""
    _check_token("platform", platform)
    _check_id("channel", channel)
    _check_day(day)
    return f"{PREFIX}:budget:chan:{platform}:{_escape_part(channel)}:{day}"


_DAY = re.compile(r"^[0-9]{8}$")


def _check_day(day: str) -> None:
    if not _DAY.match(day):
        raise ValueError(f"day must be YYYYMMDD, got {day!r}")


# -- the Redis Streams event bus -----------------------------------------------------------------
_TOPIC = re.compile(r"^[a-z0-9_]+(:[a-z0-9_]+)*$")


def bus_stream(topic: str, partition: int, namespace: str = "main") -> str:
    """One partition of a bus topic's stream (events of one conversation share a partition)."""
    return f"{_bus(namespace)}:stream:{_bus_topic(topic)}:{_partition(partition)}"


def bus_members(topic: str, group: str, namespace: str = "main") -> str:
    """The heartbeat zset of the live consumers of ``group`` on ``topic``."""
    _check_token("group", group)
    return f"{_bus(namespace)}:members:{group}:{_bus_topic(topic)}"


def bus_lease(topic: str, group: str, partition: int, namespace: str = "main") -> str:
    """The lease naming the one consumer of ``group`` that reads a partition of ``topic``."""
    _check_token("group", group)
    return f"{_bus(namespace)}:lease:{group}:{_bus_topic(topic)}:{_partition(partition)}"


def bus_streams_pattern(namespace: str = "main") -> str:
    """A ``SCAN MATCH`` pattern for every stream of the bus namespace (the retention sweep)."""
    return f"{_bus(namespace)}:stream:*"


def bus_retention(namespace: str = "main") -> str:
    """The sweep lease of the bus namespace: one process per interval trims the streams."""
    return f"{_bus(namespace)}:retention"


def _bus(namespace: str) -> str:
    _check_token("namespace", namespace)
    return f"{PREFIX}:bus:{namespace}"


def _bus_topic(topic: str) -> str:
    if not _TOPIC.match(topic):
        raise ValueError(f"topic must be [a-z0-9_]+ parts joined by ':', got {topic!r}")
    return topic


def _partition(partition: int) -> int:
    if partition < 0:
        raise ValueError(f"partition must be >= 0, got {partition}")
    return partition


def platform_tokens(platform: str, app_id: str) -> str:
    """The bot account's stored OAuth tokens for one platform application."""
    _check_token("platform", platform)
    _check_id("app_id", app_id)
    return f"{PREFIX}:tokens:{platform}:{_escape_part(app_id)}"


def ratelimit(platform: str, bucket: str) -> str:
    """A send budget shared by every process (sliding window of granted sends)."""
    _check_token("platform", platform)
    _check_id("bucket", bucket)
    return f"{PREFIX}:ratelimit:{platform}:{_escape_part(bucket)}"


def quota(platform: str, project: str, day: str) -> str:
    """The API quota a platform project spent on one quota day (``yyyymmdd``)."""
    _check_token("platform", platform)
    _check_id("project", project)
    _check_token("day", day)
    return f"{PREFIX}:quota:{platform}:{_escape_part(project)}:{day}"


def quota_holds(platform: str, project: str) -> str:
    """The units a platform project holds for replies decided but not yet sent."""
    return f"{_quota_project(platform, project)}:holds"


def quota_stream(platform: str, project: str) -> str:
    """The chat a platform project reads now: its start, reading mode and mention count."""
    return f"{_quota_project(platform, project)}:stream"


def _quota_project(platform: str, project: str) -> str:
    _check_token("platform", platform)
    _check_id("project", project)
    return f"{PREFIX}:quota:{platform}:{_escape_part(project)}"


# -- live chat -----------------------------------------------------------------------------------
LIVE_KINDS = ("chan", "users", "answered")


def live(kind: str, conv: ConversationKey) -> str:
    """One durable part (``LIVE_KINDS``) of a live channel's engagement state."""
    if kind not in LIVE_KINDS:
        raise ValueError(f"kind must be one of {LIVE_KINDS}, got {kind!r}")
    return f"{PREFIX}:live:{kind}:{conv}"


# -- summaries and community notes --------------------------------------------------------------
SUMMARY_KINDS = ("sum", "notes", "job", "lease")


def summary(kind: str, conv: ConversationKey) -> str:
    """One part (``SUMMARY_KINDS``) of what a conversation keeps past its history."""
    if kind not in SUMMARY_KINDS:
        raise ValueError(f"kind must be one of {SUMMARY_KINDS}, got {kind!r}")
    return f"{PREFIX}:summ:{kind}:{conv}"


def summary_queue(queue: str = "main") -> str:
    """The summariser's zset of due conversations."""
    _check_token("queue", queue)
    return f"{PREFIX}:summ:{queue}:due"


# -- safety: quotas, user lists, the audit trail -------------------------------------------------
USAGE_SCOPES = ("user", "chan")
_PERIOD = re.compile(r"^(?:h[0-9]{10}|d[0-9]{8})$")


def usage(scope: str, platform: str, ident: str, period: str) -> str:
    """One user's or channel's use in one hour (``hYYYYMMDDHH``) or day (``dYYYYMMDD``)."""
    if scope not in USAGE_SCOPES:
        raise ValueError(f"scope must be one of {USAGE_SCOPES}, got {scope!r}")
    _check_token("platform", platform)
    _check_id("ident", ident)
    if not _PERIOD.match(period):
        raise ValueError(f"period must be hYYYYMMDDHH or dYYYYMMDD, got {period!r}")
    return f"{PREFIX}:usage:{scope}:{platform}:{_escape_part(ident)}:{period}"


def usage_cost(day: str, namespace: str = "main") -> str:
    """The deployment's (its bus namespace's) estimated spend in micro-USD on one UTC day."""
    _check_day(day)
    _check_token("namespace", namespace)
    return f"{PREFIX}:usage:cost:{namespace}:{day}"


def usage_notice(kind: str, platform: str, ident: str, period: str) -> str:
    """Set once the "over the limit" notice of ``kind`` was sent for that period."""
    _check_token("kind", kind)
    return usage("user", platform, ident, period).replace(
        f"{PREFIX}:usage:user:", f"{PREFIX}:usage:notice:{kind}:", 1
    )


def safety_users(platform: str, channel: str) -> str:
    """Moderators' block and allow entries of one channel."""
    _check_token("platform", platform)
    _check_id("channel", channel)
    return f"{PREFIX}:safety:users:{platform}:{_escape_part(channel)}"


def safety_audit(namespace: str = "main") -> str:
    """The bounded stream of a deployment's (its bus namespace's) moderation and quota
    decisions."""
    _check_token("namespace", namespace)
    return f"{PREFIX}:safety:audit:{namespace}"
