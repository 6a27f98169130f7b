"""What a plugin reaches beyond its own handler: sending a message, and asking the model.

``send`` goes the way every reply goes: the deployment's outbound check first (block lists,
links, personal data, the system-text leak check and the moderation model, audited; a text that
breaks a rule is replaced by the withheld line), then ``outbound:<platform>`` on the bus, where
the platform's one sending chokepoint takes it with its rate limits, its sanitiser (a plugin's
message never pings anyone) and, on YouTube, the reply budget of the day's quota. ``ask`` calls
the deployment's model chain (fallbacks included) through the daily cost cap's reservation, so
a plugin's calls are paid from the same budget as everything else and refused with
``CostCapReached`` past it; each call is logged with the plugin's name, its tokens counted in
``chorus_llm_tokens`` like any call of the model, and a call made while handling a message is a
record of that conversation's turn log (the dashboard's), with its tokens, latency and cost.
A call about a message is also paid from its author's and channel's token quotas (the scope's
``quota``): refused with ``QuotaReached`` once one is spent, its tokens counted to both after.

``moderate`` hands a ``ModerationRequest`` (delete, timeout, ban...) to the platform's gateway on
``moderation:<platform>``, which performs it through the platform's own API, once, and audits it
whatever came of it (``bot.platform.moderation``); the first-party ``moderation`` plugin uses it.

The composition root builds the callables (``bot/app.py``); ``bot.plugins`` never imports
the bus or the safety gate.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bot.events import ChatMessage, ConversationKey, ModerationRequest
from bot.llm.base import Provider
from bot.llm.types import LLMRequest, Message, TextPart, Usage

log = logging.getLogger("chorus.plugins")

# (plugin, conversation, text, the message it answers or None) -> None
SendFunction = Callable[[str, ConversationKey, str, ChatMessage | None], Awaitable[None]]
ModerateFunction = Callable[[ModerationRequest], Awaitable[None]]
MAX_SEND_CHARS = 4000


class QuotaReached(Exception):
    """A token quota of the message's author or channel is spent: the model was not called."""

    def __init__(self, rule: str, resets_in: int) -> None:
        super().__init__(f"{rule} is reached; it resets in {resets_in} s")
        self.rule = rule
        self.resets_in = resets_in


# the message a call is about -> the quota it would break (rule, seconds to reset) or None
AdmitAsk = Callable[[ChatMessage], Awaitable[tuple[str, int] | None]]
CountAsk = Callable[[ChatMessage, Usage], Awaitable[None]]  # the tokens it spent


@dataclass
class Reach:
    """Sending and the model, for every plugin of one process."""

    send_function: SendFunction
    provider: Provider | None = None  # with the cost cap's metering when a cap is set
    model: str = ""
    max_tokens: int = 1024
    on_usage: Callable[[str, Usage], None] | None = None  # the metrics' token counts
    # (message, plugin, model, usage, seconds): the turn log of the message's conversation
    on_asked: Callable[[ChatMessage, str, str, Usage, float], None] | None = None
    admit_ask: AdmitAsk | None = None  # the per-user/per-channel token quotas
    count_ask: CountAsk | None = None
    moderate_function: ModerateFunction | None = None  # publishes on moderation:<platform>

    async def moderate(self, plugin: str, request: ModerationRequest) -> None:
        """Ask the platform's gateway to perform ``request`` (it audits the outcome)."""
        if self.moderate_function is None:
            raise RuntimeError("moderate: no moderation actions here")
        await self.moderate_function(request)
        log.info(
            "plugin asked for a moderation action",
            extra={
                "plugin": plugin,
                "action": request.action,
                "conversation": str(request.conversation),
                "user_id": request.user_id,
            },
        )

    async def send(
        self,
        plugin: str,
        conversation: ConversationKey,
        text: str,
        answering: ChatMessage | None = None,
    ) -> None:
        if not isinstance(text, str) or not text.strip():
            raise ValueError("send: the text is empty")
        if len(text) > MAX_SEND_CHARS:
            raise ValueError(f"send: {len(text)} characters; at most {MAX_SEND_CHARS}")
        await self.send_function(plugin, conversation, text, answering)
        log.info(
            "plugin sent a message",
            extra={"plugin": plugin, "conversation": str(conversation), "chars": len(text)},
        )

    async def ask(
        self,
        plugin: str,
        prompt: str,
        *,
        system: str | None = None,
        max_tokens: int | None = None,
        about: ChatMessage | None = None,
    ) -> str:
        """The model's answer to ``prompt`` (one call, no tools, no history)."""
        if self.provider is None:
            raise RuntimeError("ask: no model is configured")
        if about is not None and self.admit_ask is not None:
            refused = await self.admit_ask(about)
            if refused is not None:
                log.info(
                    "plugin's model call refused by a quota",
                    extra={"plugin": plugin, "rule": refused[0]},
                )
                raise QuotaReached(*refused)
        request = LLMRequest(
            model=self.model,
            system=(TextPart(text=system),) if system else (),
            messages=(Message.user(prompt),),
            max_tokens=max_tokens or self.max_tokens,
        )
        started = time.monotonic()
        response = await self.provider.complete(request)
        seconds = time.monotonic() - started
        if self.on_usage is not None:
            self.on_usage(self.model, response.usage)
        if about is not None:
            if self.on_asked is not None:
                self.on_asked(about, plugin, self.model, response.usage, seconds)
            if self.count_ask is not None:
                await self.count_ask(about, response.usage)
        log.info(
            "plugin asked the model",
            extra={
                "plugin": plugin,
                "model": self.model,
                "seconds": round(seconds, 3),
                "input_tokens": response.usage.input_tokens,
                "output_tokens": response.usage.output_tokens,
            },
        )
        return response.text
