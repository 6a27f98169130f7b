"""The reference for ``bot.llm.gemini_parse``: google-genai's own reading of an answer
(``sdk_read``, as ``generate_content`` does it) and the fold over the SDK's objects as it was
until issue 20's eighth pass (``ReferenceBuilder``). ``tests/test_gemini_answers.py`` holds the
new fold to them."""

from __future__ import annotations

import base64
import warnings
from typing import Any

from google.genai import types
from google.genai.models import _GenerateContentResponse_from_mldev

from bot.llm.gemini_parse import ResponseBuilder
from bot.llm.types import LLMResponse, StopReason, TextPart, ThinkingPart, ToolCallPart, Usage

JSON = dict[str, Any]
# The old fold's refusals (bot/llm/gemini_parse.py before the eighth pass), written out here so
# that the reference does not read the code it checks.
_REFUSALS = (
    "SAFETY",
    "RECITATION",
    "BLOCKLIST",
    "PROHIBITED_CONTENT",
    "SPII",
    "IMAGE_SAFETY",
    "IMAGE_PROHIBITED_CONTENT",
    "IMAGE_RECITATION",
)


def sdk_read(payload: JSON) -> types.GenerateContentResponse:
    fields = _GenerateContentResponse_from_mldev(payload, None, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an unknown enum value warns, and is kept
        return types.GenerateContentResponse._from_response(response=fields, kwargs={})


class ReferenceBuilder:
    def __init__(self, model: str) -> None:
        self.model = model
        self.parts: list[TextPart | ToolCallPart | ThinkingPart] = []
        self.calls = 0
        self.finish: str | None = None
        self.block: str | None = None
        self.usage: types.GenerateContentResponseUsageMetadata | None = None

    def observe(self, response: types.GenerateContentResponse) -> list[str]:
        self.model = response.model_version or self.model
        self.usage = response.usage_metadata or self.usage
        if response.prompt_feedback and response.prompt_feedback.block_reason:
            self.block = _value(response.prompt_feedback.block_reason)
        if not response.candidates:
            return []
        candidate = response.candidates[0]
        self.finish = _value(candidate.finish_reason) or self.finish
        parts = (candidate.content.parts if candidate.content else None) or []
        return [text for part in parts if (text := self._add(part))]

    def _add(self, part: types.Part) -> str:
        signature = _b64(part.thought_signature)
        if part.function_call is not None:
            call = part.function_call
            self.parts.append(
                ToolCallPart(
                    id=call.id or f"call_{self.calls}",
                    name=call.name or "",
                    arguments=dict(call.args or {}),
                    signature=signature,
                )
            )
            self.calls += 1
            return ""
        if part.thought:
            if part.text or signature:
                self.parts.append(
                    ThinkingPart(text=part.text or "", signature=signature, vendor="gemini")
                )
            return ""
        if part.text:
            if self.parts and isinstance(self.parts[-1], TextPart):
                self.parts[-1] = TextPart(text=self.parts[-1].text + part.text)
            else:
                self.parts.append(TextPart(text=part.text))
        if signature:
            self.parts.append(ThinkingPart(signature=signature, vendor="gemini"))
        return part.text or ""

    def finish_response(self) -> LLMResponse:
        stop: StopReason
        raw = self.finish
        if self.block:
            stop, raw = "refusal", f"prompt_blocked:{self.block}"
        elif self.calls and raw in (None, "STOP"):
            stop = "tool_use"
        elif raw == "STOP":
            stop = "end_turn"
        elif raw in ("MAX_TOKENS", "CONTINUATION"):
            stop = "max_tokens"
        elif raw in _REFUSALS:
            stop = "refusal"
        else:
            stop = "other"
        meta = self.usage
        usage = Usage()
        if meta is not None:
            cached = meta.cached_content_token_count or 0
            prompt = (meta.prompt_token_count or 0) + (meta.tool_use_prompt_token_count or 0)
            usage = Usage(
                input_tokens=max(0, prompt - cached),
                output_tokens=(meta.candidates_token_count or 0) + (meta.thoughts_token_count or 0),
                cache_read_tokens=cached,
            )
        parts = tuple(self.parts)
        return LLMResponse(
            parts=parts, stop_reason=stop, usage=usage, model=self.model, raw_stop_reason=raw
        )


def _value(value: object) -> str | None:
    return None if value is None else str(getattr(value, "value", value))


def _b64(value: bytes | None) -> str | None:
    return base64.b64encode(value).decode("ascii") if value else None


def both(chunks: list[JSON]) -> tuple[LLMResponse, list[str], LLMResponse, list[str]]:
    """The fold of ``chunks`` both ways, with the text pieces each handed on."""
    reference, ours = ReferenceBuilder("asked-model"), ResponseBuilder("asked-model")
    theirs_text = [t for chunk in chunks for t in reference.observe(sdk_read(chunk))]
    ours_text = [t for chunk in chunks for t in ours.observe(chunk)]
    return reference.finish_response(), theirs_text, ours.finish(), ours_text


def candidate(parts: list[JSON], finish: str | None = "STOP") -> JSON:
    candidate: JSON = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    return candidate
