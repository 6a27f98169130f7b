"""Moderation actions: what a platform lets the bot do to a message or a chatter, one interface.

The ``moderation`` plugin decides *whether* to act (its escalation ladder, ``!permit``); this
module says *how* an action is asked of a platform, so the plugin never knows which one it
talks to. Each adapter implements ``ModerationActions`` through its platform's own API and rate
limits (``adapters/<platform>/moderation.py``); ``MemoryModeration`` is the in-memory twin with
the same contract, for tests.

Every call answers an ``ActionResult`` instead of raising, because a moderation action is
advisory to the chat it runs in: the message that triggered it is answered (or not) whatever
happened. ``Outcome`` tells the caller what to do next:

- ``done``: the platform did it (``ref`` is the platform's id of what was created, when any);
- ``not_allowed``: the platform never lets a bot do this (Slack: anything but deleting its own
  messages); ``capabilities()`` says so up front, with the reason;
- ``missing_permission``: the bot could, but this channel has not granted it (a scope, a role,
  moderator status); ``PermissionGaps`` logs it once per channel, with what is missing and
  where to grant it, and later calls answer the same at once without asking the platform again
  until ``recheck`` seconds have passed (someone may have granted it meanwhile);
- ``not_found``: the message or the ban is already gone (deleted, expired, never there);
- ``failed``: anything else (the platform is down, a quota is spent); ``detail`` says what.

``AuditedActions`` wraps any implementation so that every call, whatever its outcome, is
handed to an ``ActionAudit`` (the safety audit trail's ``Audit.record_action``): who acted, on
whom, what, why, and what came of it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from cachetools import TTLCache

from bot.events import ConversationKey, ModerationRequest

log = logging.getLogger("chorus.platform.moderation")

RECHECK_SECONDS = 3600.0  # a missing permission is asked about again after this long
_REMEMBERED = 4096  # (channel, permission) gaps kept at most


class Action(StrEnum):
    DELETE = "delete"
    TIMEOUT = "timeout"
    UNTIMEOUT = "untimeout"
    BAN = "ban"
    UNBAN = "unban"


class Outcome(StrEnum):
    DONE = "done"
    NOT_ALLOWED = "not_allowed"
    MISSING_PERMISSION = "missing_permission"
    NOT_FOUND = "not_found"
    FAILED = "failed"


@dataclass(frozen=True)
class ActionResult:
    """What came of one action; ``detail`` is for logs and moderators, ``ref`` the platform's id
    of what the action created (a YouTube ban), when there is one."""

    action: Action
    outcome: Outcome
    detail: str = ""
    ref: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.DONE


@dataclass(frozen=True)
class Capabilities:
    """What a platform lets the bot do. ``refused`` gives, per action it never allows, the
    sentence saying why; ``max_timeout_seconds`` is the longest timeout it takes (None: no
    timeouts); ``own_messages_only``: only the bot's own messages can be deleted."""

    platform: str
    allowed: frozenset[Action]
    refused: Mapping[Action, str] = field(default_factory=dict)
    max_timeout_seconds: int | None = None
    own_messages_only: bool = False

    def allows(self, action: Action) -> bool:
        return action in self.allowed

    def why_not(self, action: Action) -> str:
        """The reason ``action`` is not allowed ("" when it is)."""
        if action in self.allowed:
            return ""
        return self.refused.get(action, f"{action} is not available on {self.platform}")


class ModerationActions(Protocol):
    """One platform's moderation actions, as the bot's own account performs them."""

    platform: str

    def capabilities(self) -> Capabilities: ...

    async def delete_message(
        self, conversation: ConversationKey, message_id: str, *, reason: str = ""
    ) -> ActionResult: ...

    async def timeout(
        self, conversation: ConversationKey, user_id: str, seconds: int, reason: str
    ) -> ActionResult: ...

    async def untimeout(
        self, conversation: ConversationKey, user_id: str, reason: str = ""
    ) -> ActionResult: ...

    async def ban(
        self, conversation: ConversationKey, user_id: str, reason: str
    ) -> ActionResult: ...

    async def unban(
        self, conversation: ConversationKey, user_id: str, reason: str = ""
    ) -> ActionResult: ...


def not_allowed(capabilities: Capabilities, action: Action) -> ActionResult:
    """The answer to an action ``capabilities`` never allows."""
    return ActionResult(action, Outcome.NOT_ALLOWED, capabilities.why_not(action))


class PermissionGaps:
    """Missing permissions per channel: reported once (one log line naming what is missing and
    where to grant it), then answered from memory until ``recheck`` seconds have passed."""

    def __init__(
        self,
        platform: str,
        *,
        recheck: float = RECHECK_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.platform = platform
        self._gaps: TTLCache[tuple[str, str], str] = TTLCache(_REMEMBERED, recheck, timer=clock)
        self.reported = 0  # log lines written, for tests and metrics

    def known(self, channel: str, permission: str, action: Action) -> ActionResult | None:
        """The remembered answer when ``permission`` is known missing in ``channel``."""
        message = self._gaps.get((channel, permission))
        if message is None:
            return None
        return ActionResult(action, Outcome.MISSING_PERMISSION, message)

    def missing(self, channel: str, permission: str, action: Action, message: str) -> ActionResult:
        """``permission`` is missing in ``channel`` (``message`` says what and where to grant
        it): logged the first time, remembered, and answered."""
        key = (channel, permission)
        if key not in self._gaps:
            self.reported += 1
            log.warning(
                "moderation permission missing: %s",
                message,
                extra={"platform": self.platform, "channel": channel, "permission": permission},
            )
        self._gaps[key] = message
        return ActionResult(action, Outcome.MISSING_PERMISSION, message)

    def granted(self, channel: str, permission: str) -> None:
        """An action needing ``permission`` succeeded in ``channel``: forget the gap."""
        self._gaps.pop((channel, permission), None)


class ActionAudit(Protocol):
    """Where each action is recorded (``bot.safety.audit.Audit.record_action`` fits)."""

    def __call__(
        self,
        *,
        platform: str,
        conversation: str,
        action: str,
        outcome: str,
        user_id: str = "",
        message_id: str = "",
        actor: str = "",
        reason: str = "",
    ) -> None: ...


class AuditedActions:
    """``ModerationActions`` that records every call (who, on whom, what, why, the outcome);
    ``actor`` names who asked (a moderator's id, or the rule that fired)."""

    def __init__(self, inner: ModerationActions, audit: ActionAudit) -> None:
        self.inner = inner
        self.platform = inner.platform
        self._audit = audit

    def capabilities(self) -> Capabilities:
        return self.inner.capabilities()

    def _record(
        self,
        conversation: ConversationKey,
        result: ActionResult,
        *,
        user_id: str = "",
        message_id: str = "",
        actor: str,
        reason: str,
    ) -> ActionResult:
        self._audit(
            platform=conversation.platform,
            conversation=str(conversation),
            action=str(result.action),
            outcome=str(result.outcome),
            user_id=user_id,
            message_id=message_id,
            actor=actor,
            reason=reason,
        )
        return result

    async def delete_message(
        self,
        conversation: ConversationKey,
        message_id: str,
        *,
        reason: str = "",
        actor: str = "chorus",
        user_id: str = "",
    ) -> ActionResult:
        result = await self.inner.delete_message(conversation, message_id, reason=reason)
        return self._record(
            conversation, result, user_id=user_id, message_id=message_id, actor=actor, reason=reason
        )

    async def timeout(
        self,
        conversation: ConversationKey,
        user_id: str,
        seconds: int,
        reason: str,
        *,
        actor: str = "chorus",
    ) -> ActionResult:
        result = await self.inner.timeout(conversation, user_id, seconds, reason)
        return self._record(conversation, result, user_id=user_id, actor=actor, reason=reason)

    async def untimeout(
        self,
        conversation: ConversationKey,
        user_id: str,
        reason: str = "",
        *,
        actor: str = "chorus",
    ) -> ActionResult:
        result = await self.inner.untimeout(conversation, user_id, reason)
        return self._record(conversation, result, user_id=user_id, actor=actor, reason=reason)

    async def ban(
        self, conversation: ConversationKey, user_id: str, reason: str, *, actor: str = "chorus"
    ) -> ActionResult:
        result = await self.inner.ban(conversation, user_id, reason)
        return self._record(conversation, result, user_id=user_id, actor=actor, reason=reason)

    async def unban(
        self,
        conversation: ConversationKey,
        user_id: str,
        reason: str = "",
        *,
        actor: str = "chorus",
    ) -> ActionResult:
        result = await self.inner.unban(conversation, user_id, reason)
        return self._record(conversation, result, user_id=user_id, actor=actor, reason=reason)


async def perform(actions: AuditedActions, request: ModerationRequest) -> ActionResult:
    """Carry out ``request`` (from the ``moderation:<platform>`` topic) through ``actions``."""
    where, actor, reason = request.conversation, request.actor or "chorus", request.reason
    user = request.user_id or ""
    if request.action == "delete":
        message_id = request.message_id or ""
        return await actions.delete_message(
            where, message_id, reason=reason, actor=actor, user_id=user
        )
    if request.action == "timeout":
        return await actions.timeout(where, user, request.seconds or 0, reason, actor=actor)
    if request.action == "untimeout":
        return await actions.untimeout(where, user, reason, actor=actor)
    if request.action == "ban":
        return await actions.ban(where, user, reason, actor=actor)
    return await actions.unban(where, user, reason, actor=actor)
