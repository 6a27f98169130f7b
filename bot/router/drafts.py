"""Streamed answers, worker side: the model's text so far as ``ReplyDraft`` events.

While the agent streams a turn (``bot.agent.loop.ReplySink``), a ``DraftStream`` publishes the
whole text so far on ``outbound:<platform>``, the topic and partition of the final ``Reply``, so
a gateway sees the drafts of a turn before its answer, in order, in one process or split (the
gateway turns them into message edits through its platform's chokepoint). The final ``Reply`` is
still the one committed exactly once with the turn's record; it replaces whatever the drafts
showed, so the answer ends identical to an unstreamed one.

Why whole texts and not deltas: a gateway may skip drafts (latest wins, for its rate limits), a
lost or repeated draft changes nothing, and a worker that takes a turn over after a crash just
publishes its own drafts for the same message: the gateway edits the same message, which the
final answer then fills in.

When: the first draft once the model has written for ``first_delay`` seconds (an answer done
sooner goes out whole, as before: short answers are not streamed), then at most one per
``interval`` (the bus traffic of a turn stays bounded whatever the model's chunk rate). A draft
is published inline as text arrives, never by a timer, so none can follow the final reply. Tool
progress ("fetching a page") is published when the agent says tools run long.

Every draft's text goes through ``check`` before it is published: the composition root passes
the outbound safety filter's ``SafetyGate.guard``, the same sync check every reply gets last
(block lists, links, personal data, the canary leak). A draft the check replaces is published
as replaced (the withheld notice) and the stream stops; the final answer gets its own checks.

A draft that cannot be published (the bus closed, Redis away past ``publish_timeout``) stops the
stream for that turn and never fails it: the answer still comes whole.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import prompts
from bot.bus.base import EventBus
from bot.bus.topics import outbound_topic
from bot.events import ChatMessage, ConversationKey, ReplyDraft

log = logging.getLogger("chorus.router.drafts")

Check = Callable[[ChatMessage, str], str]

# What a user reads while a tool runs, per built-in tool (``progress/tool`` for the others).
_ACTIVITIES = {
    "fetch_page": "progress/fetch_page",
    "news_headlines": "progress/news_headlines",
    "current_time": "progress/current_time",
}


def unchecked(message: ChatMessage, text: str) -> str:
    """No check (tests and benchmarks that build ``Drafts`` without the safety gate)."""
    return text


def activity(tools: Sequence[str]) -> str:
    """What the bot is doing while ``tools`` run: "fetching a page", "using weather"."""
    name = tools[0] if tools else ""
    known = _ACTIVITIES.get(name)
    if known is not None:
        return prompts.render(known)
    if not name:
        return prompts.render("progress/thinking")
    return prompts.render("progress/tool", tool=name)


@dataclass(frozen=True)
class DraftPolicy:
    first_delay: float = 0.25  # seconds of writing before the first draft
    interval: float = 0.25  # seconds between drafts of one turn, at least
    publish_timeout: float = 2.0


class Drafts:
    """Opens a ``DraftStream`` for each turn that is streamed (see ``open``)."""

    def __init__(
        self,
        bus: EventBus,
        enabled: Callable[[ConversationKey], bool],
        *,
        check: Check = unchecked,
        policy: DraftPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bus = bus
        self.enabled = enabled
        self.check = check
        self.policy = policy or DraftPolicy()
        self.clock = clock

    def open(
        self, message: ChatMessage, reply_to_id: str | None, addressed: tuple[str, ...]
    ) -> DraftStream | None:
        """A stream for the answer to ``message``, or None when it is not streamed (the
        setting for its conversation is off, or the answer replies to no message)."""
        if reply_to_id is None or not self.enabled(message.conversation):
            return None
        return DraftStream(self, message, reply_to_id, addressed)


class DraftStream:
    """One turn's drafts (a ``ReplySink``)."""

    def __init__(
        self, drafts: Drafts, message: ChatMessage, reply_to_id: str, addressed: tuple[str, ...]
    ) -> None:
        self._drafts = drafts
        self._message = message
        self._reply_to_id = reply_to_id
        self._addressed = addressed
        self._text = ""
        self._first: float | None = None  # when the model's first text came
        self._last: float | None = None  # when the last draft was published
        self._shown: tuple[str, str | None] | None = None
        self.published = 0
        self.stopped = False

    async def text(self, delta: str) -> None:
        self._text += delta
        if self.stopped:
            return
        now = self._drafts.clock()
        policy = self._drafts.policy
        if self._first is None:
            self._first = now
        if self._last is None:
            due = now - self._first >= policy.first_delay
        else:
            due = now - self._last >= policy.interval
        if due and self._text.strip():
            await self._publish(None)

    async def reset(self) -> None:
        self._text = ""

    async def working(self, tools: Sequence[str]) -> None:
        if not self.stopped:
            await self._publish(activity(tools))

    async def _publish(self, status: str | None) -> None:
        text = self._text
        checked = self._drafts.check(self._message, text)
        if checked != text:
            self.stopped = True  # the filter replaced it: show that, then nothing more
        if self._shown == (checked, status):
            return
        self.published += 1
        draft = ReplyDraft(
            conversation=self._message.conversation,
            reply_to_id=self._reply_to_id,
            text=checked,
            status=status,
            addressed_user_ids=self._addressed,
            seq=self.published,
        )
        try:
            async with asyncio.timeout(self._drafts.policy.publish_timeout):
                await self._drafts.bus.publish(outbound_topic(self._message.platform), draft)
        except Exception as exc:  # never the turn's failure: the answer still comes whole
            self.stopped = True
            log.warning(
                "could not publish a draft; the answer comes whole",
                extra={"message_id": self._message.id, "error": type(exc).__name__},
            )
            return
        self._shown = (checked, status)
        self._last = self._drafts.clock()
