"""Gemini answers -> neutral ``LLMResponse``: one ``generateContent`` answer or a stream of them.

Why a module of its own: folding the wire (thought parts and signatures, function calls with
deterministic ids, running usage totals, prompt-block and finish reasons) is a separate concern
from building requests and classifying failures in ``bot.llm.gemini``, and both halves together
would not fit one readable module.

Why it reads the JSON, not the SDK's ``GenerateContentResponse``: ``generate_content`` validates
every answer into that pydantic model field by field, and a whole answer read off its JSON
(``should_return_http_response``, ``bot.llm.gemini_wire``) skips that (``python -m
bench.gemini_call``: the SDK's answer type against this module on the same request; figures in
BENCHMARKS.md). A stream's chunks come only as the SDK's type; they are folded here too, by
their REST names, so one fold reads both. The fold reads the REST JSON the SDK would have
validated (camelCase keys, as the API writes them) and refuses what the SDK's validation
refuses: a field of the wrong type, or a ``thoughtSignature`` that is not base64 (either
alphabet, as the SDK accepts), raises ``MalformedAnswer`` (the same request would get the same
answer, so it is not retried). It is stricter on purpose where the SDK's lax validation
converts: a flag or a count written as a word or a number of another kind, and a candidate or
part that is not an object, are refused too; the API writes none of them.
``tests/test_gemini_answers.py`` proves that every answer folds exactly as a fold over the
SDK's objects does.
"""

from __future__ import annotations

import base64
import re
from typing import Any, TypeVar

from bot.llm.errors import MalformedAnswer
from bot.llm.types import LLMResponse, StopReason, TextPart, ThinkingPart, ToolCallPart, Usage

JSON = dict[str, Any]
T = TypeVar("T")
_BASE64URL = re.compile(r"(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-]{2,3})?")

_REFUSALS = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
    }
)
_KINDS: dict[type, str] = {
    str: "a string",
    int: "a whole number",
    bool: "true or false",
    dict: "an object",
    list: "a list",
}
# usageMetadata's counts that the fold reads (the API writes each only when it is not zero).
_COUNTS = (
    "promptTokenCount",
    "cachedContentTokenCount",
    "toolUsePromptTokenCount",
    "candidatesTokenCount",
    "thoughtsTokenCount",
)


class ResponseBuilder:
    """Folds one answer, or the chunks of a stream, into an ``LLMResponse``.

    Adjacent text is merged, thoughts and text-part signatures become ``ThinkingPart``s (never
    text), calls get deterministic ids and keep their signature. In a stream each chunk's usage
    is a running total and ``promptFeedback`` comes only in the first chunk, so the latest usage
    and finish reason win and a block reason is kept once seen.
    """

    def __init__(self, model: str) -> None:
        self.model = model
        self.parts: list[TextPart | ToolCallPart | ThinkingPart] = []
        self.calls = 0
        self.finish_reason: str | None = None
        self.block_reason: str | None = None
        self.usage: dict[str, int] | None = None

    def observe(self, response: JSON) -> list[str]:
        """Take in one answer or chunk (its JSON object); return the answer text it added,
        piece by piece."""
        self.model = _field(response, "modelVersion", str) or self.model
        usage = _field(response, "usageMetadata", dict)
        if usage is not None:
            self.usage = {key: _field(usage, key, int) or 0 for key in _COUNTS}
        feedback = _field(response, "promptFeedback", dict)
        if feedback is not None:
            self.block_reason = _field(feedback, "blockReason", str) or self.block_reason
        candidates = _field(response, "candidates", list)
        if not candidates:
            return []
        candidate = _item(candidates[0], "candidate")
        self.finish_reason = _field(candidate, "finishReason", str) or self.finish_reason
        content = _field(candidate, "content", dict)
        parts = (_field(content, "parts", list) if content is not None else None) or []
        return [text for part in parts if (text := self._add(_item(part, "part")))]

    def _add(self, part: JSON) -> str:
        signature = _signature_text(_field(part, "thoughtSignature", str))
        call = _field(part, "functionCall", dict)
        if call is not None:
            # Never random: the id is replayed in the next request's cached prefix.
            call_id = _field(call, "id", str) or f"call_{self.calls}"
            self.calls += 1
            self.parts.append(
                ToolCallPart(
                    id=call_id,
                    name=_field(call, "name", str) or "",
                    arguments=dict(_field(call, "args", dict) or {}),
                    signature=signature,
                )
            )
            return ""
        text = _field(part, "text", str) or ""
        if _field(part, "thought", bool):
            if text or signature:
                self.parts.append(ThinkingPart(text=text, signature=signature, vendor="gemini"))
            return ""
        if text:
            if self.parts and isinstance(self.parts[-1], TextPart):
                self.parts[-1] = TextPart(text=self.parts[-1].text + text)
            else:
                self.parts.append(TextPart(text=text))
        if signature:
            self.parts.append(ThinkingPart(signature=signature, vendor="gemini"))
        return text

    def finish(self) -> LLMResponse:
        stop, raw = self._stop_reason()
        return LLMResponse(
            parts=tuple(self.parts),
            stop_reason=stop,
            usage=_usage(self.usage),
            model=self.model,
            raw_stop_reason=raw,
        )

    def _stop_reason(self) -> tuple[StopReason, str | None]:
        if self.block_reason:
            return "refusal", f"prompt_blocked:{self.block_reason}"
        reason = self.finish_reason
        if self.calls and reason in (None, "STOP"):
            return "tool_use", reason
        if reason == "STOP":
            return "end_turn", reason
        if reason in ("MAX_TOKENS", "CONTINUATION"):
            return "max_tokens", reason
        if reason in _REFUSALS:
            return "refusal", reason
        return "other", reason


def _field(obj: JSON, key: str, kind: type[T]) -> T | None:
    """``obj[key]`` if it is a ``kind`` (None when absent or null); a value of another type
    is a malformed answer, as the SDK's validation found it."""
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, kind) and (kind is not int or not isinstance(value, bool)):
        return value
    raise MalformedAnswer(f"gemini answer field {key!r} is not {_KINDS[kind]}: {value!r:.80}")


def _item(value: object, what: str) -> JSON:
    if isinstance(value, dict):
        return value
    raise MalformedAnswer(f"a gemini {what} that is not an object: {value!r:.80}")


def _signature_text(value: str | None) -> str | None:
    """A wire signature as standard base64. The SDK's validation reads either alphabet (not
    both in one value), with its padding, part of it or none, and refuses anything else: other
    characters, a wrong length or padding, and unused bits that are not zero."""
    if not value:
        return None
    body = value.rstrip("=").replace("+", "-").replace("/", "_")
    mixed = any(c in value for c in "+/") and any(c in value for c in "-_")
    padding = len(value) - len(body)  # at most what the length needs, possibly less
    if mixed or padding > -len(body) % 4 or not _BASE64URL.fullmatch(body):
        raise MalformedAnswer(f"a gemini thoughtSignature that is not base64: {value:.40}")
    raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    if base64.urlsafe_b64encode(raw).rstrip(b"=") != body.encode():  # unused bits set
        raise MalformedAnswer(f"a gemini thoughtSignature that is not base64: {value:.40}")
    return base64.b64encode(raw).decode("ascii") if raw else None


def _usage(counts: dict[str, int] | None) -> Usage:
    """Gemini's prompt count includes cached tokens; ``Usage.input_tokens`` must not.

    Results of server-side tools (``toolUsePromptTokenCount``) are billed as input, thoughts as
    output.
    """
    if counts is None:
        return Usage()
    cached = counts["cachedContentTokenCount"]
    prompt = counts["promptTokenCount"] + counts["toolUsePromptTokenCount"]
    return Usage(
        input_tokens=max(0, prompt - cached),
        output_tokens=counts["candidatesTokenCount"] + counts["thoughtsTokenCount"],
        cache_read_tokens=cached,
        cache_write_tokens=0,  # implicit caching has no write charge
    )
