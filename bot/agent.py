"""The agent: one model turn over a Provider, shaped so the bounded tool loop slots in.

``run`` takes a fully assembled ``LLMRequest`` and returns an ``AgentResult`` that always has a
reason for how the turn ended. Today a turn is one model call; the tool loop extends ``run``
with iterations (tool calls -> tool results -> next call) without changing its signature.
"""

from __future__ import annotations

import logging
import time
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from bot.llm.base import Provider
from bot.llm.types import LLMRequest, StopReason, Usage

log = logging.getLogger("chorus.agent")


class ExitReason(StrEnum):
    ANSWERED = "answered"
    REFUSED = "refused"
    MAX_TOKENS = "max_tokens"
    EMPTY = "empty"


class AgentResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    text: str
    exit_reason: ExitReason
    stop_reason: StopReason
    usage: Usage
    iterations: int
    llm_seconds: float


REFUSAL_FALLBACK = "Sorry, I can't help with that."
EMPTY_FALLBACK = "Sorry, I don't have an answer to that."


class Agent:
    def __init__(self, provider: Provider) -> None:
        self.provider = provider

    async def run(self, request: LLMRequest) -> AgentResult:
        started = time.perf_counter()
        response = await self.provider.complete(request)
        elapsed = time.perf_counter() - started
        text = response.text.strip()
        if response.stop_reason == "refusal":
            reason, text = ExitReason.REFUSED, text or REFUSAL_FALLBACK
        elif not text:
            reason, text = ExitReason.EMPTY, EMPTY_FALLBACK
        elif response.stop_reason == "max_tokens":
            reason = ExitReason.MAX_TOKENS
        else:
            reason = ExitReason.ANSWERED
        usage = response.usage
        log.info(
            "turn finished",
            extra={
                "exit": reason.value,
                "stop_reason": response.stop_reason,
                "iterations": 1,
                "model": request.model,
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cache_read_tokens": usage.cache_read_tokens,
                "cache_write_tokens": usage.cache_write_tokens,
                "llm_ms": round(elapsed * 1000, 1),
            },
        )
        return AgentResult(
            text=text,
            exit_reason=reason,
            stop_reason=response.stop_reason,
            usage=usage,
            iterations=1,
            llm_seconds=elapsed,
        )
