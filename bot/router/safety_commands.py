"""The safety commands: ``/usage`` for everyone, and the moderators' ``/block``, ``/unblock``,
``/allow`` and ``/disallow``.

``/usage`` shows the speaker their own use this hour and today (UTC) and their limits (their
scope's); nobody can read another person's. Under a daily cost cap it also shows the
deployment's spend today and what is reserved for answers being written. The list commands act on the channel they are said
in and only for its moderators (the platform's owner or moderator role); each change is audited.
Why the channel and not a wider scope: the channel is the narrowest scope, the one where a
moderator's authority is certain (a Discord moderator of one channel is not one of the whole
server, a Twitch moderator is one of one channel). The lists a wider scope holds are
``chorus.toml``'s (``[scope.safety] blocked_users``/``allowed_users``): the listing shows them
beside the channel's, and a user blocked there stays blocked whatever a command says (the reply
says so). Identity is always the id: a display name only finds it. A person is
named the way moderators see them: ``@name``, a platform mention, or ``id:<platform user id>``.

Why a name that fits two ids is refused: anyone can take a display name, so "the newest user
called Bob" may be an impostor who renamed just before the moderator typed ``/allow @bob``.
``@name`` is looked up among everyone who went by that name here -- this process's recent
speakers (``SafetyGate.recent_ids``), the conversation's turn log (every worker's decisions,
``bot.state.turnlog``) and its history -- and a name that maps to more than one id is refused
with each id and when it was last seen, so the moderator picks one with ``id:``. Every reply
names the id it acted on.

Why in the router: commands are the router's (``text_commands``); the lists, quotas and the
audit they act on are ``bot.safety``'s. Every sentence is ``prompts/safety/*``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime

import prompts
from bot.events import ChatMessage, utcnow
from bot.router.text_commands import Command, Commands
from bot.safety import texts
from bot.safety.audit import AuditEntry
from bot.safety.gate import SafetyGate
from bot.safety.users import Status
from bot.state import turnlog
from bot.state.cost import MICRO
from bot.state.history import HistoryStore
from bot.state.outages import until_redis_answers

Clock = Callable[[], datetime]

_MENTION = re.compile(r"^<@!?([A-Za-z0-9_.-]+)(?:\|[^>]*)?>$")

ACTIONS: dict[str, tuple[Status | None, str, str]] = {
    # command -> (the status it sets, its summary, the reply when done)
    "block": ("block", "safety/summary_block", "safety/block_done"),
    "unblock": (None, "safety/summary_unblock", "safety/unblock_done"),
    "allow": ("allow", "safety/summary_allow", "safety/allow_done"),
    "disallow": (None, "safety/summary_disallow", "safety/disallow_done"),
}


def register(
    commands: Commands, gate: SafetyGate, history: HistoryStore, *, clock: Clock = utcnow
) -> None:
    """Add ``/usage`` and the four list commands to ``commands``."""
    handlers = _Handlers(gate, history, clock)
    commands.add(Command("usage", prompts.render("safety/summary_usage"), handlers.usage))
    for name, (status, summary, done) in ACTIONS.items():
        commands.add(Command(name, prompts.render(summary), handlers.change(name, status, done)))


class _Handlers:
    def __init__(self, gate: SafetyGate, history: HistoryStore, clock: Clock) -> None:
        self.gate = gate
        self.history = history
        self.clock = clock

    async def usage(self, message: ChatMessage, args: str) -> str:
        policy = self.gate.policy(message)
        exempt = self.gate.exempt(message, policy)
        used, spend = {}, None
        quotas = self.gate.quotas
        if quotas is not None and policy.quota.enabled:
            used = await until_redis_answers(
                "read a usage", lambda: quotas.usage(message, utcnow())
            )
        if quotas is not None and policy.quota.cost_usd_per_day is not None:
            today = await until_redis_answers("read the spend", lambda: quotas.cost.today(utcnow()))
            spend = (today.spent / MICRO, today.held / MICRO)
        return texts.usage(used, policy.quota, exempt=exempt, spend=spend)

    def change(self, name: str, status: Status | None, done: str) -> _Change:
        return _Change(self, name, status, done)

    async def resolve(self, message: ChatMessage, who: str) -> dict[str, datetime | None]:
        """Every user id ``who`` may name in this conversation, with when each was last seen
        here (None: named exactly, by ``id:`` or a mention). More than one: ambiguous."""
        if who.startswith("id:") and who[3:].strip():
            return {who[3:].strip(): None}
        mention = _MENTION.match(who)
        if mention:
            return {mention[1]: None}
        name = who.removeprefix("@").strip().casefold()
        seen: dict[str, datetime] = {}

        def saw(user_id: str | None, named: str, at: datetime) -> None:
            if user_id and name in {named.casefold(), user_id.casefold()}:
                seen[user_id] = max(at, seen.get(user_id, at))

        for user_id, at in self.gate.recent_ids(message.conversation, name).items():
            saw(user_id, name, at)
        redis = self.gate.users.redis
        if redis is not None:
            limit = turnlog.TURN_LOG_MAX
            for record in await turnlog.read_log(redis, message.conversation, limit):
                saw(record.user_id, record.user_name, datetime.fromtimestamp(record.at, UTC))
        for entry in await self.history.load(message.conversation):
            saw(entry.author_id, entry.author_name, entry.at)
        return dict(seen)

    def ambiguous(self, who: str, command: str, seen: dict[str, datetime | None]) -> str:
        """The refusal of a name that fits several ids: each, least recently seen first."""
        now = self.clock()
        ordered = sorted(seen.items(), key=lambda item: item[1] or now)[-MAX_CANDIDATES:]
        listed = ", ".join(
            prompts.render("safety/user_candidate", id=user_id, ago=_ago(at or now, now))
            for user_id, at in ordered
        )
        return prompts.render("safety/user_ambiguous", name=who, candidates=listed, command=command)


MAX_CANDIDATES = 10  # ids listed when a name is ambiguous (the most recently seen)


def _ago(at: datetime, now: datetime) -> str:
    seconds = max((now - at).total_seconds(), 0)
    if seconds < 60:
        return prompts.render("safety/ago_now")
    if seconds < 3600:
        return prompts.render("safety/ago_minutes", count=int(seconds // 60))
    if seconds < 48 * 3600:
        return prompts.render("safety/ago_hours", count=int(seconds // 3600))
    return prompts.render("safety/ago_days", count=int(seconds // 86400))


class _Change:
    """One list command (``/block`` ...), bound to the status it sets."""

    def __init__(self, handlers: _Handlers, name: str, status: Status | None, done: str) -> None:
        self.handlers, self.name, self.status, self.done = handlers, name, status, done

    async def __call__(self, message: ChatMessage, args: str) -> str:
        gate = self.handlers.gate
        if not message.author.is_moderator:
            return prompts.render("safety/only_moderators")
        if not args:
            return await self._listing(message)
        who = args.split()[0]
        seen = await self.handlers.resolve(message, who)
        if not seen:
            return prompts.render("safety/user_unknown", name=who, command=self.name)
        if len(seen) > 1:
            return self.handlers.ambiguous(who, self.name, seen)
        [(user_id, at)] = seen.items()
        named = f"id:{user_id}"
        if at is not None:  # found by a name: say whom it found
            named = prompts.render("safety/user_named", name=who, id=user_id)
        users = gate.users
        current = users.status(message.conversation, user_id)
        wanted = self.status
        if wanted is None and current != ("block" if self.name == "unblock" else "allow"):
            wanted = current  # /unblock of someone not blocked changes nothing
        await until_redis_answers(
            "change a user list", lambda: users.set(message.conversation, user_id, wanted)
        )
        gate.audit.record(
            AuditEntry.about(
                message, direction="command", rule=f"user_{self.name}:{user_id}", action="set"
            )
        )
        if wanted != "block" and user_id in gate.policy(message).blocked_users:
            return prompts.render("safety/config_blocked", name=named)
        return prompts.render(self.done, name=named)

    async def _listing(self, message: ChatMessage) -> str:
        users = self.handlers.gate.users
        entries = await until_redis_answers(
            "read the user lists", lambda: users.entries(message.conversation)
        )
        blocked = sorted(u for u, s in entries.items() if s == "block")
        allowed = sorted(u for u, s in entries.items() if s == "allow")
        policy = self.handlers.gate.policy(message)
        none = prompts.render("safety/users_nobody")
        configured = ""
        if policy.blocked_users or policy.allowed_users:
            configured = prompts.render(
                "safety/users_config",
                blocked=", ".join(sorted(policy.blocked_users)) or none,
                allowed=", ".join(sorted(policy.allowed_users)) or none,
            )
        if not blocked and not allowed:
            listed = prompts.render("safety/users_none", command=self.name)
        else:
            listed = prompts.render(
                "safety/users_list",
                blocked=", ".join(blocked) or none,
                allowed=", ".join(allowed) or none,
            )
        return f"{listed}\n{configured}" if configured else listed
