"""``MemoryModeration``: the in-memory twin of a platform's moderation actions.

It keeps what a platform keeps (live messages, timeouts, bans) and answers as the real adapters
do, so the moderation plugin's tests run without a platform and the contract suite
(``tests/test_moderation_contract.py``) holds the twin and every adapter to the same rules.
``deny`` takes a permission away in a channel, as a channel owner who never granted it would.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from bot.events import ConversationKey
from bot.platform.moderation import (
    Action,
    ActionResult,
    Capabilities,
    Outcome,
    PermissionGaps,
    not_allowed,
)

MODERATE = "moderate"  # the one permission the twin knows: every action needs it
EVERYTHING = frozenset(Action)


@dataclass
class MemoryModeration:
    """A platform in memory; ``calls`` counts what reached it (a remembered gap never does)."""

    platform: str = "console"
    allowed: frozenset[Action] = EVERYTHING
    max_timeout_seconds: int = 1_209_600
    messages: dict[str, set[str]] = field(default_factory=dict)  # channel -> live message ids
    timeouts: dict[tuple[str, str], int] = field(default_factory=dict)  # (channel, user) -> s
    bans: dict[tuple[str, str], str] = field(default_factory=dict)  # (channel, user) -> ban id
    denied: set[str] = field(default_factory=set)  # channels where MODERATE is missing
    calls: int = 0
    gaps: PermissionGaps = field(init=False)

    def __post_init__(self) -> None:
        self.gaps = PermissionGaps(self.platform)
        self._ids = itertools.count(1)

    def post(self, channel: str, message_id: str) -> None:
        """A chatter wrote ``message_id`` in ``channel``."""
        self.messages.setdefault(channel, set()).add(message_id)

    def deny(self, channel: str) -> None:
        self.denied.add(channel)

    def grant(self, channel: str) -> None:
        self.denied.discard(channel)

    def capabilities(self) -> Capabilities:
        timeouts = Action.TIMEOUT in self.allowed
        return Capabilities(
            self.platform,
            self.allowed,
            refused={a: f"{a} is not allowed here" for a in EVERYTHING - self.allowed},
            max_timeout_seconds=self.max_timeout_seconds if timeouts else None,
        )

    def _gate(self, channel: str, action: Action) -> ActionResult | None:
        if action not in self.allowed:
            return not_allowed(self.capabilities(), action)
        known = self.gaps.known(channel, MODERATE, action)
        if known is not None:
            return known
        self.calls += 1
        if channel in self.denied:
            message = f"the bot is not a moderator of {channel}; make it one"
            return self.gaps.missing(channel, MODERATE, action, message)
        return None

    async def delete_message(
        self, conversation: ConversationKey, message_id: str, *, reason: str = ""
    ) -> ActionResult:
        channel = conversation.channel
        refused = self._gate(channel, Action.DELETE)
        if refused is not None:
            return refused
        live = self.messages.get(channel, set())
        if message_id not in live:
            return ActionResult(Action.DELETE, Outcome.NOT_FOUND, "no such message")
        live.discard(message_id)
        return ActionResult(Action.DELETE, Outcome.DONE)

    async def timeout(
        self, conversation: ConversationKey, user_id: str, seconds: int, reason: str
    ) -> ActionResult:
        channel = conversation.channel
        if not 1 <= seconds <= self.max_timeout_seconds:
            detail = f"a timeout lasts 1 to {self.max_timeout_seconds} seconds, not {seconds}"
            return ActionResult(Action.TIMEOUT, Outcome.FAILED, detail)
        refused = self._gate(channel, Action.TIMEOUT)
        if refused is not None:
            return refused
        self.timeouts[channel, user_id] = seconds
        return ActionResult(Action.TIMEOUT, Outcome.DONE)

    async def untimeout(
        self, conversation: ConversationKey, user_id: str, reason: str = ""
    ) -> ActionResult:
        channel = conversation.channel
        refused = self._gate(channel, Action.UNTIMEOUT)
        if refused is not None:
            return refused
        if self.timeouts.pop((channel, user_id), None) is None:
            return ActionResult(Action.UNTIMEOUT, Outcome.NOT_FOUND, "not timed out")
        return ActionResult(Action.UNTIMEOUT, Outcome.DONE)

    async def ban(self, conversation: ConversationKey, user_id: str, reason: str) -> ActionResult:
        channel = conversation.channel
        refused = self._gate(channel, Action.BAN)
        if refused is not None:
            return refused
        ban_id = f"ban-{next(self._ids)}"
        self.bans[channel, user_id] = ban_id
        self.timeouts.pop((channel, user_id), None)
        return ActionResult(Action.BAN, Outcome.DONE, ref=ban_id)

    async def unban(
        self, conversation: ConversationKey, user_id: str, reason: str = ""
    ) -> ActionResult:
        channel = conversation.channel
        refused = self._gate(channel, Action.UNBAN)
        if refused is not None:
            return refused
        if self.bans.pop((channel, user_id), None) is None:
            return ActionResult(Action.UNBAN, Outcome.NOT_FOUND, "not banned")
        return ActionResult(Action.UNBAN, Outcome.DONE)
