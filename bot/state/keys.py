"""Every Redis key Chorus uses, built in this one module.

One format, one prefix, one place to look: a key built anywhere else is a bug. The version in
the prefix lets a future incompatible format live next to this one during a rolling deploy.
Ids coming from platforms may contain ``:`` (the separator), so each id is escaped the same way
``ConversationKey.__str__`` escapes channel and thread (``%`` -> ``%25``, ``:`` -> ``%3A``):
channel ``a:b`` and channel ``a`` + thread ``b`` can never share a key.

The catalogue of every key -- its type, TTL, writer and reader -- is docs/redis-keys.md; a new
key gets its entry there in the same change.
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


# -- the Redis Cluster layout ---------------------------------------------------------------------
# On Redis Cluster a multi-key command, transaction or script must touch one hash slot. The
# cluster layout (``use_cluster_layout``, switched on by ``bot.state.connect`` for a
# ``redis+cluster://`` URL) adds a ``{hash tag}`` to the keys that such operations combine (the
# bus's partitions, the claims, the leases, the quota counters); a single Redis keeps the
# names below unchanged, so its stored data stays where it is. docs/redis-keys.md lists the
# tags ("Redis Cluster") and why each group shares a slot.
_cluster = False


def use_cluster_layout(on: bool) -> None:
    """Build cluster-layout keys (``True``) or single-node ones from now on (one process talks
    to one store, so the layout is the process's)."""
    global _cluster
    _cluster = on


def cluster_layout() -> bool:
    """Whether keys are built in the cluster layout."""
    return _cluster


def _tag(text: str) -> str:
    """``text`` as a hash tag in the cluster layout; as is otherwise."""
    return f"{{{text}}}" if _cluster else text


def slot_tag(key: str) -> str | None:
    """The hash tag of ``key`` (what Redis Cluster hashes), None when it has none."""
    start = key.find("{")
    end = key.find("}", start + 1)
    return key[start + 1 : end] if start >= 0 and end > start + 1 else None


def history(conv: ConversationKey) -> str:
    """The list of one conversation's history (a thread is its own conversation); in the
    cluster layout it shares its conversation's slot with the summaries (the summariser's
    write removes summarised lines and writes the summary in one transaction)."""
    return f"{PREFIX}:hist:{_tag(str(conv))}"


def user(platform: str, user_id: str, kind: str) -> str:
    """A per-user value of ``kind`` (e.g. ``pins``); identity is the platform's user id."""
    _check_token("platform", platform)
    _check_token("kind", kind)
    _check_id("user_id", user_id)
    ident = f"{platform}:{_escape_part(user_id)}"
    # the cluster layout keeps an identity's keys in one slot (its memory is read and written
    # together with its /link alias and /forget mark), and a linked person's in another
    # (``{person:ID}``: its buffer, members and /forget all vote; bot/state/people_cluster.py)
    return f"{PREFIX}:user:{_tag(ident)}:{kind}"


def dedupe(platform: str, message_id: str, near: str | None = None) -> str:
    """The claim/done marker of one platform message, for at-least-once delivery. ``near``:
    the key of the bus stream the message came from; when that key has a hash tag (the
    cluster layout), the claim takes it, so the claim, the ack and the reply of the turn's
    guarded commit share one slot."""
    _check_token("platform", platform)
    _check_id("message_id", message_id)
    tag = slot_tag(near) if near is not None else None
    where = f"{{{tag}}}:" if tag is not None else ""
    return f"{PREFIX}:dedupe:{where}{platform}:{_escape_part(message_id)}"


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
    scripts that follow an alias on one Redis: ``person_prefix() + person_id + ":memory"``)."""
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
    """A one-time ``/link`` code, naming the identity that issued it (and its display name)."""
    _check_token("code", code.lower())
    return f"{PREFIX}:link:{code}"


def link_confirm(platform: str, user_id: str) -> str:
    """The link an identity asked for by typing a code, waiting for its ``/link confirm``."""
    return user(platform, user_id, "linkconfirm")


def link_asked(platform: str, user_id: str) -> str:
    """Set beside ``link_confirm`` and outliving it: tells a confirmation that came too late
    from one that was never asked for."""
    return user(platform, user_id, "linkasked")


def person_forget(person_id: str) -> str:
    """A linked person's ``/forget all``, waiting for each identity's ``/forget confirm``."""
    return user(PERSON, person_id, "forgetall")


def user_vectors(platform: str, user_id: str) -> str:
    """The embedding vectors of a user's pins and recommendations (``bot/memory/recall.py``)."""
    return user(platform, user_id, "vec")


def knowledge(base: str, part: str) -> str:
    """One part (``version``, ``chunks``, ``vec``, ``sources``, ``status``) of knowledge base
    ``base``."""
    _check_token("base", base)
    _check_token("part", part)
    return f"{PREFIX}:kb:{_tag(base)}:{part}"  # a rebuild's transaction: one slot (cluster)


def user_conversations(platform: str, user_id: str) -> str:
    """The zset of conversations a user spoke in (for ``/forget``)."""
    return user(platform, user_id, "convs")


def forgotten(platform: str, user_id: str) -> str:
    """When the user last said ``/forget`` (blocks the write-back of an older analysis)."""
    return user(platform, user_id, "forgot")


def insights_due(queue: str = "main") -> str:
    """Zset of pending insights jobs by debounced due time (epoch ms)."""
    _check_token("queue", queue)
    return f"{_insights(queue)}:due"


def insights_deadline(queue: str = "main") -> str:
    """Zset of pending insights jobs by the latest time they may wait (epoch ms)."""
    _check_token("queue", queue)
    return f"{_insights(queue)}:deadline"


def _insights(queue: str) -> str:
    """The root of an insights queue's keys: its transactions combine the queue's zsets with a
    job and its lease, so in the cluster layout the queue is one slot."""
    return f"{PREFIX}:{_tag(f'insights:{queue}')}"


def _budget() -> str:
    """The root of the insights budgets (a user's and their channels' counters are checked and
    added in one transaction: one slot in the cluster layout)."""
    return f"{PREFIX}:{_tag('budget')}"


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
    return f"{_insights(queue)}:job:{insights_member(platform, user_id)}"


def insights_outcomes(queue: str = "main") -> str:
    """The latest analyses' outcomes (list of JSON, newest first, capped; the admin dashboard)."""
    _check_token("queue", queue)
    return f"{_insights(queue)}:outcomes"


def insights_lease(platform: str, user_id: str, queue: str = "main") -> str:
    """The ``SET NX PX`` lease of the worker analysing one user."""
    _check_token("queue", queue)
    return f"{_insights(queue)}:lease:{insights_member(platform, user_id)}"


def budget_user(platform: str, user_id: str, day: str) -> str:
    """Insights tokens one user used on one UTC day (``day`` is ``YYYYMMDD``)."""
    _check_day(day)
    return f"{_budget()}:user:{insights_member(platform, user_id)}:{day}"


def budget_channel(platform: str, channel: str, day: str) -> str:
    """Insights tokens one channel (all its threads) used on one UTC day."""
    _check_token("platform", platform)
    _check_id("channel", channel)
    _check_day(day)
    return f"{_budget()}:chan:{platform}:{_escape_part(channel)}:{day}"


_DAY = re.compile(r"^[0-9]{8}$")


def _check_day(day: str) -> None:
    if not _DAY.match(day):
        raise ValueError(f"day must be YYYYMMDD, got {day!r}")


# -- the Redis Streams event bus -----------------------------------------------------------------
_TOPIC = re.compile(r"^[a-z0-9_]+(:[a-z0-9_]+)*$")


def bus_stream(topic: str, partition: int, namespace: str = "main") -> str:
    """One partition of a bus topic's stream (events of one conversation share a partition)."""
    name = f"{_bus_topic(topic)}:{_partition(partition)}"
    if _cluster:  # partition p of every topic in one slot (a reply beside its message)
        name = f"{{{namespace}.p{partition}}}:{name}"
    return f"{_bus(namespace)}:stream:{name}"


def bus_members(topic: str, group: str, namespace: str = "main") -> str:
    """The heartbeat zset of the live consumers of ``group`` on ``topic``."""
    _check_token("group", group)
    return f"{_bus(namespace)}:members:{_tag(f'{group}:{_bus_topic(topic)}')}"


def bus_lease(topic: str, group: str, partition: int, namespace: str = "main") -> str:
    """The lease naming the one consumer of ``group`` that reads a partition of ``topic``."""
    _check_token("group", group)
    where = _tag(f"{group}:{_bus_topic(topic)}")  # a group's leases: one slot (read together)
    return f"{_bus(namespace)}:lease:{where}:{_partition(partition)}"


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


def conduit(platform: str, app_id: str) -> str:
    """The id of the EventSub conduit every gateway process of one application shares."""
    _check_token("platform", platform)
    _check_id("app_id", app_id)
    return f"{PREFIX}:conduit:{platform}:{_escape_part(app_id)}"


def conduit_shard(platform: str, conduit_id: str, shard: int) -> str:
    """The lease of one conduit shard: the token of the gateway process holding it."""
    _check_token("platform", platform)
    _check_id("conduit_id", conduit_id)
    if shard < 0:
        raise ValueError(f"shard must be >= 0, got {shard}")
    return f"{PREFIX}:conduit:{_tag(f'{platform}:{_escape_part(conduit_id)}')}:shard:{shard}"


def conduit_members(platform: str, conduit_id: str) -> str:
    """The gateway processes sharing one conduit's shards, each scored by its lease's end."""
    _check_token("platform", platform)
    _check_id("conduit_id", conduit_id)
    return f"{PREFIX}:conduit:{_tag(f'{platform}:{_escape_part(conduit_id)}')}:members"


def joined_channels(platform: str, app_id: str, kind: str) -> str:
    """The channels joined (``kind`` ``in``) or left (``out``) at run time, by login or id, and
    the count of joins and leaves (``gen``)."""
    _check_token("platform", platform)
    _check_id("app_id", app_id)
    if kind not in ("in", "out", "gen"):
        raise ValueError(f"kind must be 'in', 'out' or 'gen', got {kind!r}")
    return f"{PREFIX}:channels:{_tag(f'{platform}:{_escape_part(app_id)}')}:{kind}"


def ratelimit(platform: str, bucket: str) -> str:
    """A send budget shared by every process (sliding window of granted sends)."""
    _check_token("platform", platform)
    _check_id("bucket", bucket)
    return f"{PREFIX}:ratelimit:{_tag(f'{platform}:{_escape_part(bucket)}')}"  # and its :pause


def quota(platform: str, project: str, day: str) -> str:
    """The API quota a platform project spent on one quota day (``yyyymmdd``)."""
    _check_token("platform", platform)
    _check_id("project", project)
    _check_token("day", day)
    return f"{_quota_project(platform, project)}:{day}"


def quota_holds(platform: str, project: str) -> str:
    """The units a platform project holds for replies decided but not yet sent."""
    return f"{_quota_project(platform, project)}:holds"


def quota_stream(platform: str, project: str) -> str:
    """The chat a platform project reads now: its start, reading mode and mention count."""
    return f"{_quota_project(platform, project)}:stream"


def _quota_project(platform: str, project: str) -> str:
    _check_token("platform", platform)
    _check_id("project", project)
    return f"{PREFIX}:quota:{_tag(f'{platform}:{_escape_part(project)}')}"


# -- streamed answers ----------------------------------------------------------------------------
def live_answer(platform: str, conversation: str, reply_to_id: str, namespace: str = "main") -> str:
    """Where one streamed answer's live message is (``conversation``: its key as a string)."""
    _check_token("platform", platform)
    _check_token("namespace", namespace)
    return (
        f"{PREFIX}:liveanswer:{namespace}:{platform}:"
        f"{_escape_part(conversation)}:{_escape_part(reply_to_id)}"
    )


# -- live chat -----------------------------------------------------------------------------------
LIVE_KINDS = ("chan", "users", "answered")


def live(kind: str, conv: ConversationKey) -> str:
    """One durable part (``LIVE_KINDS``) of a live channel's engagement state."""
    if kind not in LIVE_KINDS:
        raise ValueError(f"kind must be one of {LIVE_KINDS}, got {kind!r}")
    return f"{PREFIX}:live:{kind}:{conv}"


def live_pauses() -> str:
    """The stream of pause and resume decisions (which channel), that every worker follows."""
    return f"{PREFIX}:live:pauses"


# -- summaries and community notes --------------------------------------------------------------
SUMMARY_KINDS = ("sum", "notes", "vec", "job", "lease")


def summary(kind: str, conv: ConversationKey) -> str:
    """One part (``SUMMARY_KINDS``) of what a conversation keeps past its history."""
    if kind not in SUMMARY_KINDS:
        raise ValueError(f"kind must be one of {SUMMARY_KINDS}, got {kind!r}")
    return f"{PREFIX}:summ:{kind}:{_tag(str(conv))}"  # with its history: one slot


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
    return f"{_usage()}:{scope}:{platform}:{_escape_part(ident)}:{period}"


def _usage() -> str:
    """The root of the quota counters: the admission script reads a user's, a channel's and
    the cost cap's counters at once, so in the cluster layout they share one slot."""
    return f"{PREFIX}:{_tag('usage')}"


def usage_cost(day: str, namespace: str = "main") -> str:
    """The deployment's (its bus namespace's) estimated spend in micro-USD on one UTC day."""
    _check_day(day)
    _check_token("namespace", namespace)
    return f"{_usage()}:cost:{namespace}:{day}"


def usage_cost_holds(day: str, namespace: str = "main") -> str:
    """The deployment's reservations for model calls in flight on one UTC day (micro-USD)."""
    return f"{usage_cost(day, namespace)}:holds"


def usage_notice(kind: str, platform: str, ident: str, period: str) -> str:
    """Set once the "over the limit" notice of ``kind`` was sent for that period."""
    _check_token("kind", kind)
    return usage("user", platform, ident, period).replace(
        f"{_usage()}:user:", f"{_usage()}:notice:{kind}:", 1
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


# -- the admin dashboard's indexes and timeline (bot/state/turnlog.py) --------------------------
def turn_log(conv: ConversationKey) -> str:
    """The bounded log of the router's decisions in one conversation."""
    return f"{PREFIX}:admin:turns:{conv}"


def recent_conversations(platform: str) -> str:
    """One platform's conversations by last activity."""
    _check_token("platform", platform)
    return f"{PREFIX}:admin:convs:{platform}"


def user_names() -> str:
    """The lexicographic index of people by lowercased name (and by id)."""
    return f"{PREFIX}:admin:names"


def _admin(namespace: str) -> str:
    """A deployment's dashboard keys (accounts, sessions, the token, the login limit) are
    read and written together: one slot per namespace in the cluster layout."""
    return _tag(namespace)


def admin_login_failures(address: str, namespace: str = "main") -> str:
    """A deployment's (its bus namespace's) recent failed dashboard logins from one client
    address: the login rate limit every process serving the dashboard shares."""
    _check_token("namespace", namespace)
    return f"{PREFIX}:admin:login:{_admin(namespace)}:{_escape_part(address)}"


def admin_revoked(session_id: str, namespace: str = "main") -> str:
    """A dashboard session that logged out, refused by every process of the deployment for
    the rest of its life (the key's TTL)."""
    _check_token("namespace", namespace)
    _check_id("session_id", session_id)
    return f"{PREFIX}:admin:revoked:{_admin(namespace)}:{_escape_part(session_id)}"


def admin_token(namespace: str = "main") -> str:
    """Which dashboard token the deployment uses (a fingerprint) and since when: sessions
    issued before a change of token are refused by every process."""
    _check_token("namespace", namespace)
    return f"{PREFIX}:admin:token:{_admin(namespace)}"


def timeline(bucket: str) -> str:
    """Counters of one minute (``yyyymmddHHMM``), hour (``hyyyymmddHH``) or day
    (``dyyyymmdd``)."""
    if not re.fullmatch(r"[0-9]{12}|h[0-9]{10}|d[0-9]{8}", bucket):
        raise ValueError(f"bucket must be yyyymmddHHMM, hyyyymmddHH or dyyyymmdd, got {bucket!r}")
    return f"{PREFIX}:timeline:{bucket}"


# -- plugins' storage (bot/state/plugin_store.py) -------------------------------------------------
PLUGIN_SCOPES = {"all": 0, "server": 2, "chan": 2, "user": 2}  # scope -> how many id parts


def plugin_data(plugin: str, scope: str, parts: tuple[str, ...], key: str) -> str:
    """One value a plugin keeps: ``scope`` ``all`` (no parts), ``server`` (platform, server),
    ``chan`` (platform, channel) or ``user`` (platform, user id); each scope has a fixed number
    of parts, every part and the key escaped, so two places never share a key."""
    if PLUGIN_SCOPES.get(scope) != len(parts):
        raise ValueError(f"plugin scope {scope!r} takes {PLUGIN_SCOPES.get(scope)} parts")
    _check_id("plugin", plugin)
    _check_id("key", key)
    if parts:
        _check_token("platform", parts[0])
    where = "".join(f":{_escape_part(part)}" for part in parts)
    return f"{PREFIX}:plugin:{_escape_part(plugin)}:{scope}{where}:{_escape_part(key)}"


def plugin_owned(platform: str, user_id: str) -> str:
    """The set of plugin values and list entries one user owns, which ``/forget`` erases."""
    return user(platform, user_id, "plugins")


def plugin_timer(plugin: str, timer: str, slot: int, namespace: str = "main") -> str:
    """The claim of one firing of a plugin's timer (``slot``: the firing's epoch seconds): the
    worker that sets it first runs that firing, so a timer fires once per period everywhere."""
    _check_token("namespace", namespace)
    _check_id("plugin", plugin)
    _check_id("timer", timer)
    return f"{PREFIX}:plugintimer:{namespace}:{_escape_part(plugin)}:{_escape_part(timer)}:{slot}"


def config_reloads() -> str:
    """The count of configuration reloads asked for (the dashboard's save and Reload button):
    every process reads it each second and reloads when it moves."""
    return f"{PREFIX}:config:reloads"


def admin_account(name: str, namespace: str = "main") -> str:
    """A named dashboard account of a deployment: its role and its password's hash."""
    _check_token("namespace", namespace)
    _check_id("name", name)
    return f"{PREFIX}:admin:account:{_admin(namespace)}:{name}"


def admin_accounts(namespace: str = "main") -> str:
    """The names of a deployment's dashboard accounts (a set), to list them."""
    _check_token("namespace", namespace)
    return f"{PREFIX}:admin:accounts:{_admin(namespace)}"


def log_lines(namespace: str = "main") -> str:
    """The recent log lines of a deployment's processes (a capped stream), for the dashboard."""
    _check_token("namespace", namespace)
    return f"{PREFIX}:logs:{namespace}"


# -- Slack installed in many workspaces (bot/state/slack_teams.py) ------------------------------
def slack_install(team: str) -> str:
    """A hash of one workspace's installation: ``bot`` and ``installation``, each encrypted.
    ``team`` is the team id, or ``org-{enterprise id}`` for an org-wide installation."""
    _check_id("team", team)
    return f"{PREFIX}:slack:install:{_escape_part(team)}"


def slack_oauth_state(state: str) -> str:
    """A one-time OAuth ``state`` issued by ``/slack/install``, consumed by the redirect."""
    _check_id("state", state)
    return f"{PREFIX}:slack:oauthstate:{_escape_part(state)}"


def slack_channel_teams() -> str:
    """The hash channel id -> team id: whose token answers in a channel."""
    return f"{PREFIX}:slack:channelteams"


def slack_team_seen(team_id: str, kind: str) -> str:
    """A set of what one workspace left in the store: ``convs`` (conversation keys) or
    ``users`` (user ids), for the deletion after an uninstall."""
    _check_id("team_id", team_id)
    _check_token("kind", kind)
    return f"{PREFIX}:slack:team:{_escape_part(team_id)}:{kind}"


def slack_uninstalled() -> str:
    """The zset of uninstalled workspaces (team id) -> when their data is deleted (epoch s)."""
    return f"{PREFIX}:slack:uninstalled"


def voice_overlay_key(conv: ConversationKey) -> str:
    """The secret of one channel's stream overlay (``?key=``), rotatable; no TTL."""
    return f"{PREFIX}:voice:key:{conv}"


def voice_queue(conv: ConversationKey) -> str:
    """One channel's spoken items and controls (skip, pause, volume), a stream the overlay's
    server reads from its last event id (capped by length)."""
    return f"{PREFIX}:voice:queue:{conv}"


def voice_control(conv: ConversationKey) -> str:
    """One channel's speech controls (``paused``, ``volume``), a hash every worker reads."""
    return f"{PREFIX}:voice:control:{conv}"


def voice_watching(conv: ConversationKey) -> str:
    """Set while an overlay of the channel is connected (TTL: a few seconds, refreshed)."""
    return f"{PREFIX}:voice:watching:{conv}"


def voice_chars(conv: ConversationKey, who: str, hour: str) -> str:
    """Characters spoken in one channel (``who`` empty) or for one viewer in it, in one UTC hour
    (``hour``: ``YYYYMMDDHH``); TTL: the hour plus one."""
    return f"{PREFIX}:voice:chars:{_tag(str(conv))}:{_escape_part(who)}:{hour}"


def voice_notice(conv: ConversationKey, who: str) -> str:
    """Set when the speech-limit notice of a channel (or a viewer) was shown (TTL: an hour)."""
    return f"{PREFIX}:voice:notice:{conv}:{_escape_part(who)}"


def voice_channels() -> str:
    """The set of channels that have an overlay key (the dashboard's list); no TTL."""
    return f"{PREFIX}:voice:channels"


# -- Discord sharding (bot/state/identify.py) -----------------------------------------------------
def identify_bucket(platform: str, app_id: str, bucket: int) -> str:
    """The identify bucket ``bucket`` of one bot application: held for one identify window by
    the gateway process whose shard IDENTIFYs now, so no two IDENTIFY in the same bucket at once
    across every gateway process of the bot."""
    _check_token("platform", platform)
    _check_id("app_id", app_id)
    if bucket < 0:
        raise ValueError(f"bucket must be >= 0, got {bucket}")
    return f"{PREFIX}:identify:{platform}:{_escape_part(app_id)}:{bucket}"


def pending_interaction(platform: str, interaction_id: str) -> str:
    """A slash-command interaction some gateway process holds while its answer is made."""
    _check_token("platform", platform)
    _check_id("interaction_id", interaction_id)
    return f"{PREFIX}:interaction:{platform}:{_escape_part(interaction_id)}"
