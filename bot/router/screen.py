"""Stage two, screen: the safety gate's first look at a message, before anything is read.

A message that breaks a rule of its scope (``bot.safety``: block lists, links, personal data,
injection phrases, blocked users) is taken out of the normal path here: dropped (acked, nothing
said; a live-chat line never reaches the ledger) or answered with the refusal, a fixed answer
that never calls the model. Everything else passes unchanged. Pure and cheap: it runs on every
message, in the consume loop.
"""

from __future__ import annotations

import dataclasses

from bot.router.items import Drop, Item
from bot.router.observe import TurnObserver
from bot.safety.gate import SafetyGate


class Screen:
    """The screen of one router."""

    def __init__(self, safety: SafetyGate, observer: TurnObserver) -> None:
        self.safety = safety
        self.observer = observer

    def __call__(self, item: Item) -> Item | Drop | None:
        """None: the message passes. A ``Drop``: acked unanswered. An ``Item``: the turn that
        answers it with the refusal (``forced``)."""
        screened = self.safety.screen(item.message)
        if screened.action == "pass":
            return None
        if screened.text is None:
            self.observer.note(item.message, "moderated", "dropped")
            return Drop()
        self.observer.decided(item, "moderated", "refused")
        return dataclasses.replace(item, forced=screened.text)
