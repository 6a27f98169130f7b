"""Stage four, decide: whether the model answers a claimed turn, and if not, what happens.

In order, each able to end the turn before the model is called:

1. the reply budget (``bot.quota.gate``, where replies cost platform quota): a turn it cannot pay
   for is ``Unpaid`` (its mentions are declined ``quota``; nothing is sent);
2. a fixed answer the turn already carries (a refusal from the screen, a live-chat pause
   acknowledgement);
3. a message longer than ``max_message_chars`` (refused, without the model);
4. a text command (``/help``, ``/pins``, ``/forget``...: ``bot.router.text_commands``);
5. the safety gate's look before the model (``bot.safety``): a blocked author, a quota reached
   (its notice once, then ``Silent``), a flag from the moderation model. Under a daily cost cap
   the gate reserves what the turn's request may cost, so the request is prepared first
   (``Answer.prepare``) and travels on in ``Ask``.

``Ask`` means the model answers (``bot.router.answer``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bot.engagement.turns import LiveChat
from bot.llm.types import LLMRequest
from bot.router.items import Item
from bot.router.observe import TurnObserver
from bot.router.text_commands import Commands
from bot.router.texts import too_long
from bot.safety.gate import SafetyGate
from bot.state.turnlog import Decision as Recorded


@dataclass(frozen=True, slots=True)
class Fixed:
    """Answered without the model: ``text`` is the reply."""

    text: str
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class Silent:
    """Settled without a reply (the author already has this period's quota notice)."""


@dataclass(frozen=True, slots=True)
class Unpaid:
    """The reply budget could not pay for the turn: nothing is sent or recorded."""


@dataclass(frozen=True, slots=True)
class Ask:
    """The model answers ``request`` (None: the answer stage builds it)."""

    request: LLMRequest | None = None


Decision = Fixed | Silent | Unpaid | Ask


class Decide:
    """The decisions of one router's turns."""

    def __init__(
        self,
        *,
        commands: Commands,
        safety: SafetyGate,
        observer: TurnObserver,
        engagement: LiveChat | None = None,
        max_message_chars: int = 8000,
    ) -> None:
        self.commands = commands
        self.safety = safety
        self.observer = observer
        self.engagement = engagement
        self.max_message_chars = max_message_chars

    async def __call__(
        self, item: Item, prepare: Callable[[], LLMRequest] | None = None
    ) -> Decision:
        """The turn's decision; ``prepare`` builds its request, for the model gate."""
        message = item.message
        if self.engagement is not None:  # where replies cost quota, reserve before the model
            paid, item.progress.hold = await self.engagement.pay(message, item.kind, item.mentions)
            if not paid:  # declined or held back (logged and counted); nothing to send
                self.observer.note(message, "over_quota", "reply budget")
                return Unpaid()
        if item.forced is not None:
            return Fixed(item.forced)
        if len(message.text) > self.max_message_chars:
            return Fixed(too_long(len(message.text), self.max_message_chars), is_error=True)
        command_reply = await self.commands.handle(message)
        if command_reply is not None:
            return Fixed(command_reply)
        request = prepare() if prepare is not None else None
        stop = await self.safety.before_model(
            message, person=item.delivery is not None, request=request
        )
        if stop is None:
            return Ask(request)
        recorded: Recorded = "over_quota" if stop.why.startswith("quota") else "moderated"
        self.observer.decided(item, recorded, stop.why)
        return Fixed(stop.text) if stop.text is not None else Silent()
