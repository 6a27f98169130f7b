"""The safety gate: the few calls the router makes, in the order a message meets them.

1. ``screen`` (at dispatch, sync, every message, live-chat lines included): a blocked author is
   ignored; the block lists, patterns, links, personal data and injection phrases decide
   ``pass``, ``ignore`` or ``refuse`` (a short refusal, only to someone who addressed the bot;
   never repeating the text). A flagged line never enters a live-chat batch. A channel whose
   user lists are not fresh has them read in the background (dispatch never waits on Redis).
2. ``before_model`` (in the turn, async): the author's block entry once more, now with the
   channel's lists surely read (a process that just started may have let a blocked author's
   first line through dispatch); the quota (one atomic Redis step, only when a limit is set),
   which under a daily cost cap also reserves the turn's estimated cost (the request's prompt
   at list price plus its output budget: ``PriceTable.estimate``); then the moderation model
   when one is configured. Returns a ``Stop`` (a notice or a refusal, or silence) when the model
   must not be called.
3. ``answer`` (after the model, async): the canary and verbatim-system-text check, the lists
   and the moderation model; a flagged answer becomes the safe line, and that is what the
   history keeps.
4. ``guard`` (every reply the router publishes, sync): the lists and the leak check once more,
   for replies that did not come from the model (commands that echo stored text). This is the
   one outbound chokepoint every platform's replies pass.
5. ``usage_of`` and ``cost_of`` (in the commit): the turn's tokens, and its reservation settled
   at its real cost, the moderation model's calls for the turn included (released, at 0, when
   no model was called after all); ``release`` gives the reservation back at once when the
   turn fails instead.

Every decision is audited (``bot.safety.audit``). A moderation model that fails or times out is
counted and the policy decides: fail open (the lists decided) or closed (flagged).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, TypeVar

from bot.events import ChatMessage, ConversationKey, utcnow
from bot.llm.pricing import PriceTable
from bot.llm.types import LLMRequest, Usage
from bot.quota.users import Quotas
from bot.safety import texts
from bot.safety.audit import Audit, AuditEntry, fingerprint_key
from bot.safety.canary import LeakCheck
from bot.safety.moderator import ModelVerdict, ModerationModel
from bot.safety.policy import Policies, SafetyPolicy, ScopedSafety
from bot.safety.rules import Flag
from bot.safety.users import Status, UserLists
from bot.state.connect import Client, StoreError
from bot.state.cost import Reservation, micro
from bot.state.outages import until_redis_answers
from bot.state.turn import CostSettle, CounterAdd

log = logging.getLogger("chorus.safety")

ScopeOf = Callable[[ChatMessage], ScopedSafety | None]
RECENT_NAMES = 20_000  # (channel, name) -> user ids, for moderators' commands
IDS_PER_NAME = 16
HELD_USAGE = 4096  # turns answered and not yet committed, at most
T = TypeVar("T")


def hold_of(message: ChatMessage) -> str:
    """A turn's reservation id: its message's (a redelivery holds the same, not a second)."""
    return f"turn:{message.platform}:{message.id}"


@dataclass(frozen=True)
class Screened:
    action: Literal["pass", "ignore", "refuse"]
    text: str | None = None


PASS = Screened("pass")


@dataclass(frozen=True)
class Stop:
    """Do not call the model: answer ``text`` (a notice or refusal) or nothing at all."""

    text: str | None
    why: str = ""  # for the turn log: "blocked", "quota:<rule>" or "moderation"


class SafetyGate:
    def __init__(
        self,
        policies: Policies | None = None,
        *,
        audit: Audit | None = None,
        users: UserLists | None = None,
        quotas: Quotas | None = None,
        model: ModerationModel | None = None,
        leak: LeakCheck | None = None,
        prices: PriceTable | None = None,
        timeout: float = 3.0,
        scope_of: ScopeOf | None = None,
    ) -> None:
        self.policies = policies or Policies()
        # A message's scope rules: the router's scope profile (``Profile.safety``), set by the
        # composition root; None: the deployment's rules everywhere.
        self.scope_of = scope_of
        self.audit = audit or Audit(None)
        self.users = users or UserLists(None)
        self.quotas = quotas
        self.model = model
        self.leak = leak
        self.prices = prices or PriceTable.default()
        self.timeout = timeout
        # (platform, channel, name) -> {user id: last seen}; insertion order: oldest first
        self.names: dict[tuple[str, str, str], dict[str, datetime]] = {}
        self._passed: str | None = None  # the last reply ``answer`` let through
        # a turn's usage between its answer and its commit: (usage, model, asked by a person)
        self._usage: OrderedDict[tuple[str, str], tuple[Usage, str, bool]] = OrderedDict()
        # a turn's cost reservation between its admission and its commit, and what its
        # moderation model calls cost (USD), which its settlement adds
        self._reserved: OrderedDict[tuple[str, str], Reservation] = OrderedDict()
        self._moderated: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._loading: dict[tuple[str, str], asyncio.Task[None]] = {}

    @classmethod
    def from_parts(
        cls,
        policies: Policies,
        redis: Client,
        *,
        namespace: str,
        model: ModerationModel | None,
        leak: LeakCheck | None,
        prices: PriceTable | None,
        secret: str = "",
    ) -> SafetyGate:
        """The gate as a deployment runs it; the audit trail's text prints are keyed by
        ``secret``, the deployment's (``bot.safety.canary.deployment_secret``)."""
        settings = policies.settings
        key = fingerprint_key(secret)
        if key is None:
            log.warning(
                "no deployment secret: audit entries carry no text fingerprint; "
                "set CHORUS_SAFETY_CANARY_SECRET"
            )
        audit = Audit(
            redis,
            namespace=namespace,
            max_entries=settings.audit_max_entries,
            fingerprint_key=key,
        )
        return cls(
            policies,
            audit=audit,
            users=UserLists(redis, settings),
            quotas=Quotas(redis, namespace=namespace),
            model=model,
            leak=leak,
            prices=prices,
            timeout=settings.timeout,
        )

    def safety_for(self, conversation: ConversationKey) -> SafetyPolicy:
        """The deployment's policy for ``conversation`` (no scope: use ``policy``)."""
        return self.policies.safety_for(conversation)

    def policy(self, message: ChatMessage) -> SafetyPolicy:
        """The policy of ``message``'s scope (one cached lookup of its scope profile)."""
        scoped = self.scope_of(message) if self.scope_of is not None else None
        return self.policies.safety_for(message.conversation, scoped)

    def status(self, message: ChatMessage, user_id: str, policy: SafetyPolicy) -> Status | None:
        """``block``, ``allow`` or None for ``user_id`` where ``message`` was said: the scope's
        block list (chorus.toml), then the deployment's and the channel's moderators' lists
        (``UserLists``), then the scope's allow list."""
        if user_id in policy.blocked_users:
            return "block"
        found = self.users.status(message.conversation, user_id)
        if found is None and user_id in policy.allowed_users:
            return "allow"
        return found

    # -- dispatch -------------------------------------------------------------------------------
    def screen(self, message: ChatMessage) -> Screened:
        """What dispatch does with ``message``: pass it on, drop it, or refuse it."""
        self._remember_name(message)
        self._refresh_soon(message.conversation)
        author, policy = message.author, self.policy(message)
        status = self.status(message, author.id, policy)
        if status == "block":
            self._record(message, "user", "user_blocked", "ignored")
            return Screened("ignore")
        flag = policy.screen(message.text, trusted=status == "allow")
        if flag is None:
            return PASS
        return self._inbound(message, policy, flag)

    def _inbound(self, message: ChatMessage, policy: SafetyPolicy, flag: Flag) -> Screened:
        action = policy.action_for(flag)
        if action == "log":
            self._record(message, "in", str(flag), "logged", message.text)
            return PASS
        if action == "refuse" and message.addressed:
            self._record(message, "in", str(flag), "refused", message.text)
            return Screened("refuse", texts.refusal())
        self._record(message, "in", str(flag), "ignored", message.text)
        return Screened("ignore")

    def _refresh_soon(self, conversation: ConversationKey) -> None:
        """Read the channel's user lists in the background when they are not fresh."""
        where = (conversation.platform, conversation.channel)
        if where in self._loading or not self.users.needs_load(conversation):
            return
        task = asyncio.create_task(self.users.prepare(conversation))
        self._loading[where] = task
        task.add_done_callback(lambda _: self._loading.pop(where, None))

    def _remember_name(self, message: ChatMessage) -> None:
        """Who went by this name here, and when last: every id, since anyone can take a
        display name (an impostor renamed "Bob" is a second id under "bob", not a new Bob)."""
        author, conv = message.author, message.conversation
        key = (conv.platform, conv.channel, (author.display_name or author.id).casefold())
        seen = self.names.get(key)
        if seen is None:
            seen = self.names[key] = {}
            if len(self.names) > RECENT_NAMES:  # the oldest names go first
                for old in list(self.names)[: RECENT_NAMES // 4]:
                    del self.names[old]
        seen[author.id] = message.sent_at
        if len(seen) > IDS_PER_NAME:  # the id seen longest ago goes
            del seen[min(seen, key=seen.__getitem__)]

    def recent_ids(self, conversation: ConversationKey, name: str) -> dict[str, datetime]:
        """Every id that wrote in this channel as ``name`` lately (this process), with when it
        last did."""
        key = (conversation.platform, conversation.channel, name.casefold())
        return dict(self.names.get(key, {}))

    # -- the turn -------------------------------------------------------------------------------
    def exempt(self, message: ChatMessage, policy: SafetyPolicy) -> bool:
        """Skips the per-user and per-channel limits: moderators (by default) and trusted users."""
        if policy.quota.exempt_moderators and message.author.is_moderator:
            return True
        return self.status(message, message.author.id, policy) == "allow"

    async def before_model(
        self, message: ChatMessage, *, person: bool = True, request: LLMRequest | None = None
    ) -> Stop | None:
        """The author's block entry, the quota (reserving ``request``'s estimated cost under a
        cost cap), then the moderation model; a ``Stop`` when the model must not be called."""
        policy = self.policy(message)
        if person:
            await self.users.prepare(message.conversation)  # a no-op when fresh
            if self.status(message, message.author.id, policy) == "block":
                self._record(message, "user", "user_blocked", "ignored")
                return Stop(None, "blocked")
        if self.quotas is not None and policy.quota.enabled:
            quotas, exempt, now = self.quotas, self.exempt(message, policy), utcnow()
            reserve = None
            if policy.quota.cost_usd_per_day is not None:
                usd = self.prices.estimate(request) if request is not None else None
                reserve = quotas.cost.reservation(hold_of(message), micro(usd), now)
            refused = await until_redis_answers(  # an outage is waited out, like every step
                "check a quota",
                lambda: quotas.admit(
                    policy.quota, message, now, exempt=exempt, person=person, reserve=reserve
                ),
            )
            if refused is not None:
                action = "noticed" if refused.notice else "silenced"
                self._record(message, "quota", refused.rule, action)
                notice = texts.quota_notice(refused) if refused.notice else None
                return Stop(notice, f"quota:{refused.rule}")
            if reserve is not None:
                self._keep(self._reserved, (message.platform, message.id), reserve)
        if self.model is None or not policy.enabled or not policy.use_model:
            return None
        flag = await self._model_flag(message, message.text, policy)
        if flag is None:
            return None
        screened = self._inbound(message, policy, flag)
        return None if screened.action == "pass" else Stop(screened.text, "moderation")

    async def answer(self, message: ChatMessage, text: str) -> str:
        """``text``, or the safe line when the answer breaks a rule (audited)."""
        policy = self.policy(message)
        flag = self._outbound_flag(policy, text)
        if flag is None and self.model is not None and policy.enabled and policy.use_model and text:
            flag = await self._model_flag(message, text, policy)
        if flag is None:
            self._passed = text
            return text
        self._record(message, "out", str(flag), "replaced", text)
        return texts.withheld()

    def guard(self, message: ChatMessage, text: str) -> str:
        """The last check of every reply (sync: lists, links, personal data, the leak check)."""
        if text is self._passed:
            return text
        flag = self._outbound_flag(self.policy(message), text)
        if flag is None:
            return text
        self._record(message, "out", str(flag), "replaced", text)
        return texts.withheld()

    def _outbound_flag(self, policy: SafetyPolicy, text: str) -> Flag | None:
        if self.leak is not None:
            leaked = self.leak.find(text)
            if leaked is not None:
                return leaked
        return policy.screen(text, inbound=False)

    def hold_usage(self, message: ChatMessage, usage: Usage, model: str, person: bool) -> None:
        """Keep a turn's usage until its commit (``usage_of``); only when limits are set."""
        if self.quotas is None or not self.policy(message).quota.enabled:
            return
        self._keep(self._usage, (message.platform, message.id), (usage, model, person))

    @staticmethod
    def _keep(kept: OrderedDict[tuple[str, str], T], key: tuple[str, str], value: T) -> None:
        kept[key] = value
        while len(kept) > HELD_USAGE:  # turns that never committed
            kept.popitem(last=False)

    def cost_of(self, message: ChatMessage) -> CostSettle | None:
        """The turn's reservation settled at its real cost (0 when the model was not called),
        as a change of its commit; None without a reservation."""
        reserved = self._reserved.get((message.platform, message.id))
        if reserved is None or self.quotas is None:
            return None
        key = (message.platform, message.id)
        held = self._usage.get(key)
        cost = (self.prices.cost(held[1], held[0]) if held is not None else None) or 0.0
        return self.quotas.cost.settle_change(reserved, micro(cost + self._moderated.get(key, 0)))

    async def release(self, message: ChatMessage) -> None:
        """Give the turn's reservation back now (the model failed; the turn is not recorded).
        A store that fails lets it lapse."""
        reserved = self._reserved.pop((message.platform, message.id), None)
        if reserved is not None and self.quotas is not None:
            try:
                await self.quotas.cost.release(reserved)
            except StoreError:
                log.warning("could not release a cost reservation; it lapses", exc_info=True)

    def usage_of(self, message: ChatMessage) -> tuple[CounterAdd, ...]:
        """The usage held for ``message``, as changes of its commit (none for other replies).
        The commit may be built twice (a lapsed claim taken back); it runs at most once."""
        held = self._usage.get((message.platform, message.id))
        return () if held is None else self.usage_counters(message, *held)

    def usage_counters(
        self,
        message: ChatMessage,
        usage: Usage,
        model: str,
        person: bool = True,
    ) -> tuple[CounterAdd, ...]:
        """The turn's tokens (only when limits are set)."""
        policy = self.policy(message)
        if self.quotas is None or not policy.quota.enabled:
            return ()
        return self.quotas.usage_counters(
            policy.quota,
            message,
            utcnow(),
            tokens=usage.total_input_tokens + usage.output_tokens,
            exempt=self.exempt(message, policy),
            person=person,
        )

    # -- the moderation model -------------------------------------------------------------------
    async def _model_flag(
        self, message: ChatMessage, text: str, policy: SafetyPolicy
    ) -> Flag | None:
        assert self.model is not None
        try:
            async with asyncio.timeout(self.timeout):
                verdict = await self.model.classify(text)
                self._moderation_cost(message, verdict)
        except TimeoutError:
            return self._model_failed("timeout", policy)
        except Exception as exc:
            log.warning(
                "moderation model failed; the block lists decide",
                extra={"model": self.model.name, "error": f"{type(exc).__name__}: {exc}"[:300]},
            )
            return self._model_failed("error", policy)
        return Flag("model", verdict.category) if verdict.flagged else None

    def _moderation_cost(self, message: ChatMessage, verdict: ModelVerdict) -> None:
        """Add what a classifying call cost to its turn's (settled with the turn's reservation:
        the call ran inside the admitted turn, so it is never refused on the cap)."""
        key = (message.platform, message.id)
        if verdict.usage is None or key not in self._reserved:
            return
        cost = self.prices.cost(verdict.model, verdict.usage) or 0.0
        self._keep(self._moderated, key, self._moderated.get(key, 0.0) + cost)

    def _model_failed(self, reason: str, policy: SafetyPolicy) -> Flag | None:
        self.audit.model_failed(reason)
        return Flag("model_unavailable", reason) if policy.fail_closed else None

    def _record(
        self,
        message: ChatMessage,
        direction: str,
        rule: str,
        action: str,
        text: str | None = None,
    ) -> None:
        entry = AuditEntry.about(
            message,
            direction=direction,
            rule=rule,
            action=action,
            text=text,
            key=self.audit.fingerprint_key,
        )
        self.audit.record(entry)

    async def aclose(self) -> None:
        for task in list(self._loading.values()):
            await asyncio.gather(task, return_exceptions=True)
        await self.audit.flush()  # the moderation model is closed by whoever built it
