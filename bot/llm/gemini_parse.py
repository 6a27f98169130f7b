"""Gemini answers -> neutral ``LLMResponse``: one ``GenerateContentResponse`` or a stream of them.

Why a module of its own: folding the wire (thought parts and signatures, function calls with
deterministic ids, running usage totals, prompt-block and finish reasons) is a separate concern
from building requests and classifying failures in ``bot.llm.gemini``, and both halves together
would not fit one readable module.
"""

from __future__ import annotations

import base64

from google.genai import types

from bot.llm.types import LLMResponse, StopReason, TextPart, ThinkingPart, ToolCallPart, Usage

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


def _signature_text(value: bytes | None) -> str | None:
    return base64.b64encode(value).decode("ascii") if value else None


class ResponseBuilder:
    """Folds one response, or the chunks of a stream, into an ``LLMResponse``.

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
        self.usage: types.GenerateContentResponseUsageMetadata | None = None

    def observe(self, response: types.GenerateContentResponse) -> list[str]:
        """Take in one response or chunk; return the answer text it added, piece by piece."""
        self.model = response.model_version or self.model
        self.usage = response.usage_metadata or self.usage
        if response.prompt_feedback and response.prompt_feedback.block_reason:
            self.block_reason = _enum_value(response.prompt_feedback.block_reason)
        if not response.candidates:
            return []
        candidate = response.candidates[0]
        self.finish_reason = _enum_value(candidate.finish_reason) or self.finish_reason
        parts = (candidate.content.parts if candidate.content else None) or []
        return [text for part in parts if (text := self._add(part))]

    def _add(self, part: types.Part) -> str:
        if part.function_call is not None:
            call = part.function_call
            # Never random: the id is replayed in the next request's cached prefix.
            call_id = call.id or f"call_{self.calls}"
            self.calls += 1
            self.parts.append(
                ToolCallPart(
                    id=call_id,
                    name=call.name or "",
                    arguments=dict(call.args or {}),
                    signature=_signature_text(part.thought_signature),
                )
            )
            return ""
        signature = _signature_text(part.thought_signature)
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


def _enum_value(value: object) -> str | None:
    if value is None:
        return None
    return str(getattr(value, "value", value))


def _usage(meta: types.GenerateContentResponseUsageMetadata | None) -> Usage:
    """Gemini's prompt count includes cached tokens; ``Usage.input_tokens`` must not.

    Results of server-side tools (``toolUsePromptTokenCount``) are billed as input, thoughts as
    output.
    """
    if meta is None:
        return Usage()
    cached = meta.cached_content_token_count or 0
    prompt = (meta.prompt_token_count or 0) + (meta.tool_use_prompt_token_count or 0)
    return Usage(
        input_tokens=max(0, prompt - cached),
        output_tokens=(meta.candidates_token_count or 0) + (meta.thoughts_token_count or 0),
        cache_read_tokens=cached,
        cache_write_tokens=0,  # implicit caching has no write charge
    )
