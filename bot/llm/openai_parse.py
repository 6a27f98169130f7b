"""Chat Completions answers -> neutral ``LLMResponse``: whole completions and streamed chunks,
both read off their JSON (not the SDK's pydantic types).

Why a module of its own: reading the wire (choices, refusals, tool calls accumulated by index,
usage with cached and reasoning tokens) is a separate concern from building requests and
classifying failures in ``bot.llm.openai``, and both halves together would not fit one readable
module. A streamed answer is only complete once a ``finish_reason`` arrived
(``StreamState.finish``); tool-call arguments that are not valid JSON are kept raw, not fatal.

Why it reads the JSON, not the SDK's ``ChatCompletion`` and ``ChatCompletionChunk``: building
those costs more than the reading, per answer and per streamed chunk (``python -m
bench.vendor_call``: the SDK's types against this module on the same request; figures in
BENCHMARKS.md). Every field read is held to the SDK's own types for the same body
(``tests/test_llm_answers.py``, ``tests/test_llm_streams.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from bot.llm.errors import MalformedAnswer, answer_object
from bot.llm.types import LLMResponse, Part, StopReason, TextPart, ToolCallPart, Usage


def parse_completion(body: bytes, model: str = "") -> LLMResponse:
    """A whole completion's JSON body, read straight off the wire: only the fields read below
    matter to Chorus. A tool call without a ``type`` counts as a function call (some
    OpenAI-compatible servers omit it).
    """
    completion, choices = answer_object(body, "choices")
    usage = _usage_of(completion.get("usage"))
    answered_by = str(completion.get("model") or "")
    if not choices:
        return LLMResponse(parts=(), stop_reason="other", usage=usage, model=answered_by)
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise MalformedAnswer(f"the first choice has no message: {choice!r:.120}")
    parts: list[Part] = []
    refusal = message.get("refusal") or ""
    text = (message.get("content") or "") + refusal
    if text:
        parts.append(TextPart(text=text))
    for i, call in enumerate(message.get("tool_calls") or ()):
        if not isinstance(call, dict):
            raise MalformedAnswer(f"a tool call that is not an object: {call!r:.120}")
        if call.get("type", "function") != "function":
            continue  # a custom tool's call: Chorus declares function tools only
        function = call.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise MalformedAnswer(f"a tool call without a function name: {call!r:.120}")
        parts.append(
            ToolCallPart(
                id=call.get("id") or f"call_{i}",
                name=function["name"],
                arguments=_arguments(function.get("arguments")),
            )
        )
    finish = choice.get("finish_reason")
    finish = finish if isinstance(finish, str) else None
    return LLMResponse(
        parts=tuple(parts),
        stop_reason=_stop_reason(
            finish, bool(refusal), any(isinstance(p, ToolCallPart) for p in parts)
        ),
        usage=usage,
        model=answered_by or model,
        raw_stop_reason=finish,
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


def _usage_of(usage: object) -> Usage:
    """An answer's usage, as JSON (a whole completion's, or a stream's last chunk's)."""
    if not isinstance(usage, dict):  # some local servers send none
        return Usage()
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return _counts(usage.get("prompt_tokens"), usage.get("completion_tokens"), cached)


def _counts(prompt: int | None, completion: int | None, cached: int | None) -> Usage:
    """OpenAI counts cached tokens inside the prompt's; Chorus counts them apart."""
    return Usage(
        input_tokens=max(0, (prompt or 0) - (cached or 0)),
        output_tokens=completion or 0,
        cache_read_tokens=cached or 0,
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

    def feed(self, chunk: dict[str, Any]) -> str:
        """One chunk's JSON object (``bot.llm.sse``); only the first choice is the answer."""
        usage = chunk.get("usage")
        if usage is not None:
            self.usage = _usage_of(usage)
        self.model = str(chunk.get("model") or self.model)
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            raise MalformedAnswer(f"a chunk without choices: {chunk!r:.120}")
        new: list[str] = []
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            delta = delta if isinstance(delta, dict) else {}
            for key in ("content", "refusal"):
                piece = delta.get(key)
                if piece:
                    new.append(str(piece))
            self.refused = self.refused or bool(delta.get("refusal"))
            for call in delta.get("tool_calls") or ():
                self._take_call(call)
            finish = choice.get("finish_reason")
            if finish:
                self.finish = str(finish)
        self.text.extend(new)
        return "".join(new)

    def _take_call(self, call: object) -> None:
        if not isinstance(call, dict):
            raise MalformedAnswer(f"a tool call that is not an object: {call!r:.120}")
        index = call.get("index")
        slot = self.calls.setdefault(index if isinstance(index, int) else len(self.calls), _Call())
        slot.id = str(call.get("id") or slot.id)
        function = call.get("function")
        if isinstance(function, dict):
            slot.name = str(function.get("name") or slot.name)
            if function.get("arguments"):
                slot.arguments.append(str(function["arguments"]))

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
