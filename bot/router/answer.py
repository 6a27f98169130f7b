"""Stage five, answer: the prompt, the model's tool loop, and the outbound check of its text.

The prompt (``bot.agent.prompting``) is the scope's persona and tools (the cached prefix), the
conversation's history, then the volatile tail: the author's notes, the conversation's summaries
and community notes (``bot.memory.enrichment``) and knowledge excerpts (``context_for``), and
what the plugins' ``before_turn`` hooks add. ``prepare`` builds it without the hooks, before the
safety gate's look (``bot.router.decide``: a daily cost cap reserves what that request may
cost); the hooks run only for a turn the model answers, and rebuild it when they add text. The agent (``bot.agent.loop``) runs the scope's model chain;
where the conversation streams answers, its drafts go out as it writes (``bot.router.drafts``),
each through the same outbound check; where the channel speaks on its stream overlay, the same
stream is spoken sentence by sentence (``bot.voice.speaker``, ``tee``). The final text passes the safety gate's outbound check
(block lists, the system prompt's canary, the moderation model): what it returns is what is
sent, and the turn's usage waits for the commit (quotas).

A model that cannot answer (every model of the chain failed) is ``Failed``: its cost reservation
is given back, and the router apologises and releases the claim, so a later delivery may try
again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from bot.agent.loop import AgentResult, ReplySink
from bot.agent.reasoning import decide
from bot.events import ChatMessage, utcnow
from bot.llm.errors import LLMError
from bot.llm.types import LLMRequest
from bot.memory.buffers import MemoryStore
from bot.memory.enrichment import render_context
from bot.ops.metrics import MetricsSink
from bot.plugins.runtime import TurnHooks
from bot.router.drafts import Drafts
from bot.router.items import Item
from bot.router.observe import TurnObserver
from bot.router.read import TurnRead
from bot.router.scoping import Profile
from bot.safety.gate import SafetyGate
from bot.tools.base import ToolContext
from bot.tools.toolbox import Toolbox

if TYPE_CHECKING:  # the overlay's voice is imported only where it is on (bot.app)
    from bot.voice.speaker import Speaker, SpeechSink


@dataclass(frozen=True)
class Answered:
    """The text to send (the safe line if the model's broke a rule) and how it was made."""

    text: str
    result: AgentResult
    request: LLMRequest


@dataclass(frozen=True)
class Failed:
    """No model of the chain answered."""

    error: LLMError


class Answer:
    """The answers of one router's turns."""

    def __init__(
        self,
        *,
        drafts: Drafts,
        safety: SafetyGate,
        observer: TurnObserver,
        metrics: MetricsSink,
        hooks: TurnHooks | None = None,
        memory: MemoryStore | None = None,
        tools: Toolbox | None = None,
        speaker: Speaker | None = None,
    ) -> None:
        self.drafts = drafts
        self.speaker = speaker
        self.safety = safety
        self.observer = observer
        self.metrics = metrics
        self.hooks = hooks if hooks is not None else TurnHooks()
        self.memory = memory
        self.tools = tools

    def prepare(self, item: Item, read: TurnRead, profile: Profile) -> LLMRequest:
        """The turn's request, as the model will read it but for the plugins' hooks."""
        return self._build(item, read, profile, self._context(item, read))

    def _context(self, item: Item, read: TurnRead) -> str:
        context = context_for(read, item.message, self.memory, utcnow())
        if item.context:
            context = f"{item.context}\n{context}" if context else item.context
        return context

    def _build(self, item: Item, read: TurnRead, profile: Profile, context: str) -> LLMRequest:
        message = item.message
        ctx = ToolContext(message=message, tools=profile.tools)
        return profile.assembler.build(
            message,
            read.history,
            tools=self.tools.specs_for(ctx) if self.tools else (),
            context=context,
            reasoning=decide(message.text, profile.reasoning, profile.reasoning_max),
        )

    async def __call__(
        self, item: Item, read: TurnRead, profile: Profile, request: LLMRequest | None = None
    ) -> Answered | Failed:
        """Answer with ``request`` (``prepare``'s; built here when None), with what the
        plugins' hooks add."""
        message = item.message
        if request is None or self.hooks:
            context = self._context(item, read)
            hooked = await self.hooks.before_turn(message, context)
            if request is None or hooked != context:
                request = self._build(item, read, profile, hooked)
        ctx = ToolContext(message=message, tools=profile.tools)
        drafts = self.drafts.open(message, item.reply_to_id, item.addressed)  # None: not streamed
        speech = self.speaker.open(message) if self.speaker is not None else None
        try:
            result = await profile.agent.run(request, ctx, tee(drafts, speech))
        except LLMError as exc:
            self.observer.llm_failed(self.metrics, message, request.model, exc)
            await self.safety.release(message)
            return Failed(exc)
        text = await self.safety.answer(message, result.text)
        if speech is not None:
            await speech.finish(text)
        self.safety.hold_usage(message, result.usage, request.model, item.delivery is not None)
        self.observer.answered(item, result, request, item.received)
        return Answered(text, result, request)


def context_for(
    read: TurnRead, message: ChatMessage, memory: MemoryStore | None, now: datetime
) -> str:
    """The volatile tail's data: the speaker's notes (``<context>``) and the knowledge block."""
    context = ""
    if memory is not None and read.buffer is not None:
        context = render_context(
            read.buffer, message, memory.settings, now, read.recall, read.channel_memory
        )
    knowledge = read.recall.knowledge if read.recall is not None else ""
    return f"{context}\n{knowledge}" if context and knowledge else context or knowledge


class _Tee:
    """Two sinks fed the same stream: the drafts a platform shows and the overlay's speech."""

    def __init__(self, first: ReplySink, second: ReplySink) -> None:
        self.sinks = (first, second)

    async def text(self, delta: str) -> None:
        for sink in self.sinks:
            await sink.text(delta)

    async def reset(self) -> None:
        for sink in self.sinks:
            await sink.reset()

    async def working(self, tools: Sequence[str]) -> None:
        for sink in self.sinks:
            await sink.working(tools)


def tee(drafts: ReplySink | None, speech: SpeechSink | None) -> ReplySink | None:
    """The sink of a turn: the drafts, the speech, both, or None (not streamed)."""
    if drafts is None or speech is None:
        return drafts or speech
    return _Tee(drafts, speech)
