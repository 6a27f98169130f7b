"""Vendor-neutral message types that every provider translates to and from its wire format.

The agent builds one ``LLMRequest`` and never sees a vendor's shapes. ``CachePoint`` marks the end
of a cacheable prefix: Anthropic turns it into ``cache_control`` on the preceding block, OpenAI and
Gemini ignore it (their caching is automatic on a stable prefix).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Part(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TextPart(_Part):
    type: Literal["text"] = "text"
    text: str


class ImagePart(_Part):
    """An image, inline (``data``) or by URL. Providers that cannot take URLs describe it."""

    type: Literal["image"] = "image"
    mime: str = "image/png"
    data: bytes | None = None
    url: str | None = None


class ToolCallPart(_Part):
    type: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    signature: str | None = Field(
        default=None, description="an opaque vendor token to send back with the call (Gemini)"
    )


class ThinkingPart(_Part):
    """A model's reasoning block. Kept only to be sent back unchanged within one tool loop
    (Anthropic requires the signed block before the tool results); never shown to users and
    never stored in history."""

    type: Literal["thinking"] = "thinking"
    text: str = ""
    signature: str | None = None
    redacted: bool = False
    vendor: str = ""


class ToolResultPart(_Part):
    type: Literal["tool_result"] = "tool_result"
    call_id: str
    name: str
    content: str
    is_error: bool = False


class CachePoint(_Part):
    """Everything before this marker is a stable prefix worth caching."""

    type: Literal["cache_point"] = "cache_point"


Part = Annotated[
    TextPart | ImagePart | ToolCallPart | ToolResultPart | CachePoint | ThinkingPart,
    Field(discriminator="type"),
]
SystemPart = Annotated[TextPart | CachePoint, Field(discriminator="type")]


def _joined_text(parts: tuple[Part, ...]) -> str:
    """The text of the text parts, joined. Most messages are one part, read many times a turn
    (history, token estimates): that case needs no generator."""
    if len(parts) == 1:
        part = parts[0]
        return part.text if isinstance(part, TextPart) else ""
    return "".join(p.text for p in parts if isinstance(p, TextPart))


class Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Literal["user", "assistant"]
    parts: tuple[Part, ...]

    @classmethod
    def user(cls, text: str) -> Message:
        return cls(role="user", parts=(TextPart(text=text),))

    @classmethod
    def assistant(cls, text: str) -> Message:
        return cls(role="assistant", parts=(TextPart(text=text),))

    @property
    def text(self) -> str:
        return _joined_text(self.parts)


class ToolSpec(BaseModel):
    """A tool as the model sees it: name, description and a JSON schema for the arguments."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str
    parameters: dict[str, Any]


class LLMRequest(BaseModel):
    """One model call. ``model`` is the vendor's model name, without the ``provider:`` prefix."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    system: tuple[SystemPart, ...] = ()
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    cache_tools: bool = False
    max_tokens: int = Field(default=1024, ge=1)
    temperature: float | None = None
    cache_key: str | None = Field(
        default=None, description="OpenAI prompt_cache_key: routes one conversation to one cache"
    )
    response_schema: dict[str, Any] | None = Field(
        default=None,
        description="a JSON schema the answer's text must match (structured output); each "
        "provider maps it to its vendor's native structured-output option",
    )
    reasoning: Literal["off", "low", "medium", "high"] = Field(
        default="off",
        description="extended thinking (Anthropic budget) or reasoning effort (OpenAI, Gemini)",
    )


# Tokens of thinking per reasoning level: Anthropic's and Gemini's thinking budget, and the
# output headroom added for OpenAI's reasoning tokens (all count against the output limit).
REASONING_BUDGETS: dict[str, int] = {"low": 1024, "medium": 4096, "high": 16384}


StopReason = Literal["end_turn", "tool_use", "max_tokens", "refusal", "stop_sequence", "other"]


class Usage(BaseModel):
    """Token counts of one call, normalised across vendors.

    ``input_tokens`` counts only *uncached* input: Anthropic reports it that way, and for OpenAI
    and Gemini (whose prompt count includes cached tokens) the provider subtracts the cached part.
    ``total_input_tokens`` is what the prompt was in all.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0

    @property
    def total_input_tokens(self) -> int:
        return self.input_tokens + self.cache_write_tokens + self.cache_read_tokens

    @property
    def cache_read_share(self) -> float:
        total = self.total_input_tokens
        return self.cache_read_tokens / total if total else 0.0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
        )


class LLMResponse(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    parts: tuple[Part, ...]
    stop_reason: StopReason
    usage: Usage = Usage()
    model: str = ""
    raw_stop_reason: str | None = None

    @property
    def text(self) -> str:
        return _joined_text(self.parts)

    @property
    def tool_calls(self) -> list[ToolCallPart]:
        return [p for p in self.parts if isinstance(p, ToolCallPart)]

    def as_message(self) -> Message:
        return Message(role="assistant", parts=self.parts)


class TextDelta(BaseModel):
    """A piece of streamed text. A stream ends with the complete ``LLMResponse``."""

    model_config = ConfigDict(frozen=True)

    text: str


StreamEvent = TextDelta | LLMResponse
