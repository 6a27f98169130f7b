"""Anthropic Messages API answers -> neutral ``LLMResponse``: whole messages and raw SSE events.

Why a module of its own: reading the wire (content blocks, usage with cache counts, the event
sequence of a stream) is a separate concern from building requests and classifying failures in
``bot.llm.anthropic``, and both halves together would not fit one readable module. Thinking and
redacted-thinking blocks become ``ThinkingPart(vendor="anthropic")`` here, never text; a streamed
answer is only complete once ``message_stop`` arrived (``StreamState.stopped``).

Why it reads the JSON, not the SDK's ``Message`` and event types: building those costs more
than the reading, per answer and per streamed event (``python -m bench.vendor_call``: the SDK's
types against this module on the same request; figures in BENCHMARKS.md). Every field read is
held to the SDK's own types for the same body (``tests/test_llm_answers.py``,
``tests/test_llm_streams.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from bot.llm.errors import MalformedAnswer, answer_object
from bot.llm.types import LLMResponse, Part, StopReason, TextPart, ThinkingPart, ToolCallPart, Usage

THINKING_BLOCKS = frozenset({"thinking", "redacted_thinking"})
_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "refusal": "refusal",
    "stop_sequence": "stop_sequence",
}


def parse_message(body: bytes) -> LLMResponse:
    """A whole answer's JSON body, read straight off the wire: only the fields read below
    matter to Chorus."""
    message, content = answer_object(body, "content")
    parts: list[Part] = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and block.get("text"):
            parts.append(TextPart(text=str(block["text"])))
        elif kind == "tool_use":
            call_id, name = block.get("id"), block.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise MalformedAnswer(f"a tool_use block without id or name: {block!r:.120}")
            parts.append(ToolCallPart(id=call_id, name=name, arguments=_args(block.get("input"))))
        elif kind == "thinking":
            parts.append(_thinking(block.get("thinking") or "", block.get("signature") or ""))
        elif kind == "redacted_thinking":
            parts.append(_thinking("", block.get("data") or "", redacted=True))
    usage = message.get("usage")
    counts = usage if isinstance(usage, dict) else {}
    raw_stop = message.get("stop_reason")
    raw_stop = raw_stop if isinstance(raw_stop, str) else None
    return LLMResponse(
        parts=tuple(parts),
        stop_reason=_stop_reason(raw_stop),
        usage=_usage(
            counts.get("input_tokens"),
            counts.get("output_tokens"),
            counts.get("cache_creation_input_tokens"),
            counts.get("cache_read_input_tokens"),
        ),
        model=str(message.get("model") or ""),
        raw_stop_reason=raw_stop,
    )


def _stop_reason(raw: str | None) -> StopReason:
    return _STOP_REASONS.get(raw or "", "other")


def _usage(
    input_tokens: int | None, output_tokens: int | None, write: int | None, read: int | None
) -> Usage:
    return Usage(
        input_tokens=input_tokens or 0,
        output_tokens=output_tokens or 0,
        cache_write_tokens=write or 0,
        cache_read_tokens=read or 0,
    )


def _thinking(text: str, signature: str, *, redacted: bool = False) -> ThinkingPart:
    return ThinkingPart(
        text=text, signature=signature or None, redacted=redacted, vendor="anthropic"
    )


def _args(value: object) -> dict[str, Any]:
    if isinstance(value, dict):
        return {str(k): v for k, v in value.items()}
    return {"_raw": value if isinstance(value, str) else json.dumps(value)}


@dataclass
class _Block:
    kind: str
    text: list[str] = field(default_factory=list)
    id: str = ""
    name: str = ""
    json: list[str] = field(default_factory=list)
    signature: list[str] = field(default_factory=list)  # or a redacted block's data

    def part(self) -> Part | None:
        if self.kind == "text":
            text = "".join(self.text)
            return TextPart(text=text) if text else None
        if self.kind in THINKING_BLOCKS:
            redacted = self.kind == "redacted_thinking"
            return _thinking("".join(self.text), "".join(self.signature), redacted=redacted)
        if self.kind == "tool_use":
            raw = "".join(self.json)
            try:
                arguments: object = json.loads(raw) if raw.strip() else {}
            except ValueError:
                arguments = raw
            return ToolCallPart(id=self.id, name=self.name, arguments=_args(arguments))
        return None


@dataclass
class StreamState:
    """Folds a stream's events (their JSON objects, ``bot.llm.sse``) into the final response; ``feed``
    returns new text, if any. Events of kinds it does not know (``content_block_stop``, and any
    the API adds) change nothing, as the SDK's stream passes them on unread."""

    model: str
    blocks: dict[int, _Block] = field(default_factory=dict)
    usage: dict[str, int | None] = field(default_factory=dict)
    raw_stop: str | None = None
    stopped: bool = False

    def feed(self, event: dict[str, Any]) -> str:
        kind = event.get("type")
        if kind == "content_block_delta":
            current = self.blocks.setdefault(_index(event), _Block(kind="text"))
            delta = _part_of(event, "delta")
            piece = delta.get("type")
            if piece == "text_delta":
                text = str(delta.get("text") or "")
                current.text.append(text)
                return text
            if piece == "input_json_delta":
                current.json.append(str(delta.get("partial_json") or ""))
            elif piece == "thinking_delta":  # kept for the replay, never shown
                current.text.append(str(delta.get("thinking") or ""))
            elif piece == "signature_delta":
                current.signature.append(str(delta.get("signature") or ""))
        elif kind == "content_block_start":
            return self._start(_index(event), _part_of(event, "content_block"))
        elif kind == "message_start":
            message = _part_of(event, "message")
            self.model = str(message.get("model") or self.model)
            self._take_usage(message.get("usage"))
        elif kind == "message_delta":
            stop = _part_of(event, "delta").get("stop_reason")
            self.raw_stop = stop if isinstance(stop, str) else self.raw_stop
            self._take_usage(event.get("usage"))  # cumulative counts: later values win
        elif kind == "message_stop":
            self.stopped = True
        return ""

    def _start(self, index: int, block: dict[str, Any]) -> str:
        kind = str(block.get("type") or "")
        current = self.blocks[index] = _Block(
            kind=kind, id=str(block.get("id") or ""), name=str(block.get("name") or "")
        )
        if kind == "text":
            text = str(block.get("text") or "")
            if text:
                current.text.append(text)
            return text
        if kind == "thinking":  # text and signature usually follow as deltas
            current.text.append(str(block.get("thinking") or ""))
            current.signature.append(str(block.get("signature") or ""))
        elif kind == "redacted_thinking":
            current.signature.append(str(block.get("data") or ""))
        return ""

    def _take_usage(self, usage: object) -> None:
        if not isinstance(usage, dict):
            return
        for name in (
            "input_tokens",
            "output_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
        ):
            value = usage.get(name)
            if isinstance(value, int):
                self.usage[name] = value

    def response(self) -> LLMResponse:
        parts = [p for _, b in sorted(self.blocks.items()) if (p := b.part()) is not None]
        return LLMResponse(
            parts=tuple(parts),
            stop_reason=_stop_reason(self.raw_stop),
            usage=_usage(
                self.usage.get("input_tokens"),
                self.usage.get("output_tokens"),
                self.usage.get("cache_creation_input_tokens"),
                self.usage.get("cache_read_input_tokens"),
            ),
            model=self.model,
            raw_stop_reason=self.raw_stop,
        )


def _part_of(event: dict[str, Any], key: str) -> dict[str, Any]:
    value = event.get(key)
    if not isinstance(value, dict):
        raise MalformedAnswer(f"a {event.get('type')} event without its {key}: {event!r:.120}")
    return value


def _index(event: dict[str, Any]) -> int:
    index = event.get("index")
    if not isinstance(index, int):
        raise MalformedAnswer(f"a {event.get('type')} event without an index: {event!r:.120}")
    return index
