"""Chat Completions answers -> neutral ``LLMResponse``: whole completions and streamed chunks.

Why a module of its own: reading the wire (choices, refusals, tool calls accumulated by index,
usage with cached and reasoning tokens) is a separate concern from building requests and
classifying failures in ``bot.llm.openai``, and both halves together would not fit one readable
module. A streamed answer is only complete once a ``finish_reason`` arrived
(``StreamState.finish``); tool-call arguments that are not valid JSON are kept raw, not fatal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from openai.types import CompletionUsage
from openai.types.chat import ChatCompletion, ChatCompletionMessageFunctionToolCall

from bot.llm.types import LLMResponse, Part, StopReason, TextPart, ToolCallPart, Usage


def parse_completion(completion: ChatCompletion, model: str = "") -> LLMResponse:
    usage = _usage(completion.usage)
    if not completion.choices:
        return LLMResponse(parts=(), stop_reason="other", usage=usage, model=completion.model)
    choice = completion.choices[0]
    message = choice.message
    parts: list[Part] = []
    text = (message.content or "") + (message.refusal or "")
    if text:
        parts.append(TextPart(text=text))
    for i, call in enumerate(message.tool_calls or []):
        if isinstance(call, ChatCompletionMessageFunctionToolCall):
            parts.append(
                ToolCallPart(
                    id=call.id or f"call_{i}",
                    name=call.function.name,
                    arguments=_arguments(call.function.arguments),
                )
            )
    return LLMResponse(
        parts=tuple(parts),
        stop_reason=_stop_reason(
            choice.finish_reason,
            bool(message.refusal),
            any(isinstance(p, ToolCallPart) for p in parts),
        ),
        usage=usage,
        model=completion.model or model,
        raw_stop_reason=choice.finish_reason,
    )


def _stop_reason(finish: str | None, refused: bool, called_tools: bool) -> StopReason:
    if refused or finish == "content_filter":
        return "refusal"
    if finish in ("tool_calls", "function_call") or (called_tools and finish == "stop"):
        return "tool_use"
    if finish == "length":
        return "max_tokens"
    if finish == "stop":
        return "end_turn"
    return "other"


def _usage(usage: CompletionUsage | None) -> Usage:
    if usage is None:  # some local servers send none
        return Usage()
    details = usage.prompt_tokens_details
    cached = (details.cached_tokens if details else None) or 0
    return Usage(
        input_tokens=max(0, (usage.prompt_tokens or 0) - cached),
        output_tokens=usage.completion_tokens or 0,
        cache_read_tokens=cached,
    )


def _arguments(raw: str | None) -> dict[str, Any]:
    """Decode tool-call arguments; the model may emit broken JSON, which is kept, not fatal."""
    if not raw or not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_raw": raw}


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class StreamState:
    """Folds chunks into the final response; ``feed`` returns new text, if any."""

    model: str
    text: list[str] = field(default_factory=list)
    calls: dict[int, _Call] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    finish: str | None = None
    refused: bool = False

    def feed(self, chunk: Any) -> str:
        if chunk.usage is not None:
            self.usage = _usage(chunk.usage)
        self.model = chunk.model or self.model
        new: list[str] = []
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            for piece in (delta.content, delta.refusal):
                if piece:
                    new.append(piece)
            self.refused = self.refused or bool(delta.refusal)
            for call in delta.tool_calls or ():
                index = getattr(call, "index", None)
                slot = self.calls.setdefault(len(self.calls) if index is None else index, _Call())
                slot.id = call.id or slot.id
                if call.function is not None:
                    slot.name = call.function.name or slot.name
                    if call.function.arguments:
                        slot.arguments.append(call.function.arguments)
            if choice.finish_reason:
                self.finish = choice.finish_reason
        self.text.extend(new)
        return "".join(new)

    def response(self) -> LLMResponse:
        parts: list[Part] = []
        text = "".join(self.text)
        if text:
            parts.append(TextPart(text=text))
        for index, call in sorted(self.calls.items()):
            parts.append(
                ToolCallPart(
                    id=call.id or f"call_{index}",
                    name=call.name,
                    arguments=_arguments("".join(call.arguments)),
                )
            )
        return LLMResponse(
            parts=tuple(parts),
            stop_reason=_stop_reason(self.finish, self.refused, bool(self.calls)),
            usage=self.usage,
            model=self.model,
            raw_stop_reason=self.finish,
        )
