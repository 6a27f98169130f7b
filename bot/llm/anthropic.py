"""Anthropic Messages API provider: neutral types <-> the ``anthropic`` SDK (2.x).

Reading answers (whole messages and SSE events) lives in ``bot.llm.anthropic_parse``;
this module builds requests, runs the calls and classifies failures.

Why it is built this way:

- The SDK client is injected (tests point it at ``tests/loopback``); ``from_settings`` builds one
  with the SDK's own retries off (``max_retries=0``) so ``bot.resilience`` is the only policy, and
  passes the key and URL explicitly: an explicit ``api_key`` stops the SDK from reading
  ANTHROPIC_API_KEY / ANTHROPIC_AUTH_TOKEN / credential profiles from the environment, and an
  explicit ``base_url`` stops it reading ANTHROPIC_BASE_URL behind the settings' back.
- Prompt caching: a ``CachePoint`` puts ``cache_control`` on the block before it in prompt order
  (tools -> system -> messages); ``cache_tools`` marks the last tool. The API rejects a request
  with more than 4 breakpoints (HTTP 400), so only the LAST four are kept: a cache read matches
  the longest cached prefix, and every later breakpoint's prefix contains the earlier ones, so
  dropping the earliest markers costs the least (at worst a separate write of a short prefix).
- Consecutive same-role messages are merged into one wire message. The API would combine them
  anyway, so the rendered prompt (and its cache) is identical, and merging keeps ``tool_result``
  blocks inside the user turn that directly follows the ``tool_use`` turn, as the API requires.
- SDK 2.12 dropped ``temperature`` from ``messages.create``'s signature; the API still takes it,
  so it travels in ``extra_body`` (only when set).
- The request is ``messages.create``'s, sent through the client's own ``post`` with the body
  already encoded (``_create``): ``create`` first deep-copies every message, block and tool
  schema of the body, for files and iterators that Chorus never sends (``python -m
  bench.vendor_call``, ``create`` against the provider). The bytes on the wire are the ones
  ``create`` sends, key order included (``tests/test_llm_anthropic_wire.py``); auth, headers,
  timeout and errors stay the client's. Two things of ``create`` go: the request attributes of
  its OpenTelemetry span, which it reads off the body (the span keeps its name and route), and
  its warning for a model the API is retiring. A whole answer is read off its JSON
  (``anthropic_parse``, which says why), not built into the SDK's ``Message`` type.
- Streaming reads the raw SSE events (``create``'s ``stream=True``) instead of the
  ``messages.stream()`` helper, so tool-input JSON, usage and a mid-stream ``error`` event are
  each handled explicitly; a stream that ends before ``message_stop`` raises (it was cut off).
  The events are read off the response's bytes (``bot.llm.sse``) and their JSON, as the SDK's
  ``AsyncStream`` would pass them on (named events only, pings skipped), without building its
  pydantic event type for each. An ``event: error`` raises ``StreamErrorEvent``, classified by
  its error type as the SDK's status error for it is.
- HTTP runs on the SDK's ``DefaultAioHttpClient`` (``bot.llm.clients``). A response aiohttp's
  parser refuses arrives wrapped in the SDK's connection error and is not retried.
- Reasoning is extended thinking with a token budget (``THINKING_BUDGETS``). ``budget_tokens``
  counts inside ``max_tokens`` and must be below it, so the budget is added on top of
  ``request.max_tokens`` (which stays the answer's own allowance); the API refuses a
  ``temperature`` other than 1 with thinking, so it is dropped. ``from_settings`` always sets a
  timeout (``CHORUS_LLM_TIMEOUT``), so ``create``'s check of a non-streaming call's
  ``max_tokens`` against the SDK's default 10 minutes never applied, and is not missed.
- ``thinking`` / ``redacted_thinking`` blocks become ``ThinkingPart(vendor="anthropic")`` (the
  redacted block's opaque ``data`` travels in ``signature``) and go back byte-for-byte: with
  thinking on, the API rejects a final assistant turn with ``tool_use`` that does not start with
  its signed thinking block. Other vendors' thinking is dropped, and a thinking block never ends
  a cache prefix (the API rejects ``cache_control`` on one). Thinking never reaches the text.
- Structured output is ``output_config.format`` (``json_schema``); the schema goes through the
  SDK's own ``transform_schema`` (as ``messages.parse`` does), which sets
  ``additionalProperties: false`` and moves keywords the API does not enforce into descriptions.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator
from typing import Any, ClassVar, Self

import anthropic
import httpx2

from bot.llm import sse
from bot.llm.anthropic_parse import THINKING_BLOCKS, StreamState, parse_message
from bot.llm.base import SDKProvider
from bot.llm.clients import refused_answer, sdk_http_client, transport_reason
from bot.llm.errors import event_object
from bot.llm.types import (
    REASONING_BUDGETS,
    CachePoint,
    ImagePart,
    LLMRequest,
    LLMResponse,
    Part,
    StopReason,
    StreamEvent,
    TextDelta,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
)
from bot.resilience import Failure, RetryPolicy, Sleep, parse_retry_after
from bot.settings import KEY_ENV, KEY_URL, ConfigError, LLMSettings

log = logging.getLogger("chorus.llm.anthropic")

DEFAULT_BASE_URL = "https://api.anthropic.com"
MAX_CACHE_MARKERS = 4  # the API's limit of cache_control breakpoints per request
# Extended-thinking budget per reasoning level; the API's minimum is 1024.
THINKING_BUDGETS = REASONING_BUDGETS

_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "refusal": "refusal",
    "stop_sequence": "stop_sequence",
}
_RETRY_STATUSES = frozenset({408, 409, 429})
# Error types the API also sends inside a 200 SSE stream (`event: error`), where the HTTP status
# says nothing; see https://docs.anthropic.com/en/api/errors
_RETRY_ERROR_TYPES = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}
)


# What ``create`` passes besides the body: the name and route of the SDK's OpenTelemetry span.
_REQUEST_OPTIONS: Any = {"span_name": "anthropic.messages.create", "span_route": "/v1/messages"}
# ``create``'s body keys in the order it writes them; ``extra_body`` is merged in after them.
_BODY_ORDER = (
    "max_tokens",
    "messages",
    "model",
    "cache_control",
    "container",
    "diagnostics",
    "inference_geo",
    "metadata",
    "output_config",
    "service_tier",
    "speed",
    "stop_sequences",
    "stream",
    "system",
    "thinking",
    "tool_choice",
    "tools",
)
# The SDK's own JSON encoding of a body: compact, non-ASCII kept, no NaN.
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


class _StreamCut(Exception):
    """The SSE stream ended before ``message_stop``: the answer was cut off in transit."""


def sdk_client(key: str, base_url: str, timeout: float) -> anthropic.AsyncAnthropic:
    """An ``anthropic`` client as Chorus builds one: the SDK's own retries off
    (``bot.resilience`` is the only policy) and HTTP on the SDK's ``DefaultAioHttpClient``
    (``bot.llm.clients``), which ``client.close()`` closes with it."""
    return anthropic.AsyncAnthropic(
        api_key=key,
        base_url=base_url,
        timeout=timeout,
        max_retries=0,
        http_client=sdk_http_client(anthropic.DefaultAioHttpClient),
    )


class AnthropicProvider(SDKProvider):
    name: ClassVar[str] = "anthropic"
    key_env: ClassVar[str] = KEY_ENV["anthropic"]
    key_url: ClassVar[str] = KEY_URL["anthropic"]

    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        *,
        base_url: str | None,
        retry: RetryPolicy | None = None,
        sleep: Sleep | None = None,
    ) -> None:
        # The guard checks where requests really go: default to the client's own URL.
        super().__init__(
            base_url=base_url if base_url is not None else str(client.base_url),
            retry=retry,
            sleep=sleep,
        )
        self.client = client
        self._owns_client = False

    @classmethod
    def from_settings(cls, settings: LLMSettings, *, retry: RetryPolicy | None = None) -> Self:
        """A provider with its own client (closed by ``aclose``), configured only by ``settings``."""
        key = settings.api_key(cls.name)
        if key is None:
            settings.require_credentials(cls.name)  # raises ConfigError naming the variable
            raise ConfigError(f"{cls.key_env} is not set; get a key at {cls.key_url}")
        base_url = settings.base_url(cls.name) or DEFAULT_BASE_URL
        client = sdk_client(key, base_url, settings.llm_timeout)
        provider = cls(
            client,
            base_url=base_url,
            retry=retry or RetryPolicy(max_retries=settings.llm_max_retries),
        )
        provider._owns_client = True
        return provider

    async def aclose(self) -> None:
        if self._owns_client:
            await self.client.close()

    # -- calls -----------------------------------------------------------------------------
    async def _complete(self, request: LLMRequest) -> LLMResponse:
        response = await self._create(build_params(request), stream=False)
        return parse_message(response.content)

    async def _create(self, params: dict[str, Any], *, stream: bool) -> httpx2.Response:
        """``messages.create(**params)`` (with ``stream=True`` when ``stream``) without its copy
        of the body; the answer comes back as the HTTP response, its JSON or its SSE unread."""
        response: httpx2.Response = await self.client.post(
            "/v1/messages",
            content=encode_body(params, stream=stream),
            cast_to=httpx2.Response,
            options=_REQUEST_OPTIONS,
            stream=stream,
        )
        return response

    async def _stream(self, request: LLMRequest) -> AsyncIterator[StreamEvent]:
        response = await self._create(build_params(request), stream=True)
        state = StreamState(model=request.model)
        try:
            async for event in sse.events(response.aiter_bytes()):
                if event.name is None or event.name == "ping":
                    continue  # the SDK's stream passes on only named events, and never a ping
                if event.name == "error":
                    raise StreamErrorEvent.read(event.data, response.headers)
                if event.data:
                    delta = state.feed(event_object(event.data))
                    if delta:
                        yield TextDelta(text=delta)
        finally:
            await response.aclose()
        if not state.stopped:
            raise _StreamCut("the anthropic stream ended before message_stop")
        yield state.response()

    def _classify(self, exc: BaseException) -> Failure:
        if (refused := refused_answer(exc)) is not None:  # wrapped as a connection error
            return Failure(retryable=False, reason=f"the answer was refused: {refused}")
        if isinstance(exc, anthropic.APIStatusError):
            message = exc.api_message or exc.message
            return _failure(exc.status_code, exc.type, message, exc.response.headers)
        if isinstance(exc, StreamErrorEvent):
            return _failure(200, exc.kind, exc.message, exc.headers)
        if isinstance(exc, anthropic.APITimeoutError):
            return Failure(retryable=True, reason=transport_reason(exc, "request timed out"))
        if isinstance(exc, anthropic.APIConnectionError):
            reason = transport_reason(exc, f"connection error: {exc.__cause__ or exc}")
            return Failure(retryable=True, reason=reason)
        if isinstance(exc, httpx2.TransportError | _StreamCut):
            return Failure(retryable=True, reason=f"{type(exc).__name__}: {exc}")
        return Failure(retryable=False, reason=f"{type(exc).__name__}: {exc}")


class StreamErrorEvent(Exception):
    """An ``event: error`` inside a stream: the answer failed after its 200 was sent."""

    def __init__(self, kind: str | None, message: str, headers: httpx2.Headers) -> None:
        super().__init__(message)
        self.kind, self.message, self.headers = kind, message, headers

    @classmethod
    def read(cls, data: str, headers: httpx2.Headers) -> StreamErrorEvent:
        """The event's ``{"type": "error", "error": {"type": ..., "message": ...}}``, or its
        text as the message when it is not that."""
        try:
            body = json.loads(data)
        except ValueError:
            return cls(None, data or "an error event with no data", headers)
        error = body.get("error") if isinstance(body, dict) else None
        if not isinstance(error, dict):
            return cls(None, data, headers)
        kind, message = error.get("type"), error.get("message")
        return cls(
            kind if isinstance(kind, str) else None,
            message if isinstance(message, str) and message else data,
            headers,
        )


def _failure(status: int, kind: str | None, message: str, headers: httpx2.Headers) -> Failure:
    # An `event: error` inside a stream arrives on a 200 response: only its type means anything.
    http_status = status if status >= 400 else None
    reason = f"{kind}: {message}" if kind else message
    if status in (401, 403):
        return Failure(retryable=False, status=status, reason=reason)
    retryable = status in _RETRY_STATUSES or status >= 500 or kind in _RETRY_ERROR_TYPES
    # The API says explicitly when a retry can (not) help; the SDK honours it, so do we.
    should_retry = headers.get("x-should-retry")
    if should_retry in ("true", "false"):
        retryable = should_retry == "true"
    if not retryable:
        return Failure(retryable=False, status=http_status, reason=reason)
    return Failure(
        retryable=True,
        status=http_status,
        retry_after=parse_retry_after(headers),
        reason=reason,
    )


# -- neutral request -> wire -----------------------------------------------------------------
def build_params(request: LLMRequest) -> dict[str, Any]:
    """The keyword arguments of ``messages.create`` for ``request`` (without ``stream``)."""
    marked: list[dict[str, Any]] = []  # blocks asked to carry cache_control, in prompt order
    last: dict[str, Any] | None = None  # the block a CachePoint would mark

    def mark() -> None:
        if last is not None and all(block is not last for block in marked):
            marked.append(last)

    tools: list[dict[str, Any]] = [
        {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
        for t in request.tools
    ]
    if tools:
        last = tools[-1]
        if request.cache_tools:
            mark()

    system: list[dict[str, Any]] = []
    for part in request.system:
        if isinstance(part, CachePoint):
            mark()
        elif part.text:  # the API rejects empty text blocks
            last = {"type": "text", "text": part.text}
            system.append(last)

    messages: list[dict[str, Any]] = []
    for message in request.messages:
        blocks: list[dict[str, Any]] = []
        for item in message.parts:
            if isinstance(item, CachePoint):
                mark()
                continue
            block = _block(item)
            if block is not None:
                blocks.append(block)
                if block["type"] not in THINKING_BLOCKS:
                    last = block
        if not blocks:
            continue
        if messages and messages[-1]["role"] == message.role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": message.role, "content": blocks})

    if len(marked) > MAX_CACHE_MARKERS:
        log.debug(
            "dropping %d early cache breakpoints over the API limit of %d",
            len(marked) - MAX_CACHE_MARKERS,
            MAX_CACHE_MARKERS,
        )
    for block in marked[-MAX_CACHE_MARKERS:]:
        block["cache_control"] = {"type": "ephemeral"}

    params: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": messages,
    }
    if system:
        params["system"] = system
    if tools:
        params["tools"] = tools
    temperature = request.temperature
    if request.reasoning != "off":
        budget = THINKING_BUDGETS[request.reasoning]
        params["thinking"] = {"type": "enabled", "budget_tokens": budget}
        params["max_tokens"] = request.max_tokens + budget
        if temperature is not None:
            log.debug("not sending temperature=%s: the API refuses it with thinking", temperature)
            temperature = None
    if temperature is not None:
        params["extra_body"] = {"temperature": temperature}
    if request.response_schema is not None:
        schema = anthropic.transform_schema(request.response_schema)
        params["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
    return params


def encode_body(params: dict[str, Any], *, stream: bool) -> bytes:
    """The body ``messages.create(**params)`` sends, byte for byte (``stream=True`` added when
    streaming, as the provider called ``create`` with it only then)."""
    source = {**params, "stream": True} if stream else params
    body = {key: source[key] for key in _BODY_ORDER if key in source}
    unknown = set(source) - set(body) - {"extra_body"}
    if unknown:  # build_params writes only create's parameters
        raise TypeError(f"not a messages.create body parameter: {sorted(unknown)}")
    body.update(source.get("extra_body") or {})
    return _encode(body).encode()


def _block(part: Part) -> dict[str, Any] | None:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text} if part.text else None
    if isinstance(part, ImagePart):
        return {"type": "image", "source": _image_source(part)}
    if isinstance(part, ToolCallPart):
        return {"type": "tool_use", "id": part.id, "name": part.name, "input": dict(part.arguments)}
    if isinstance(part, ToolResultPart):
        return {
            "type": "tool_result",
            "tool_use_id": part.call_id,
            "content": part.content,
            "is_error": part.is_error,
        }
    if isinstance(part, ThinkingPart):
        return _thinking_block(part)
    return None


def _thinking_block(part: ThinkingPart) -> dict[str, Any] | None:
    """The wire block of our own thinking; anything the API could not verify is dropped."""
    if part.vendor != "anthropic" or part.signature is None:
        return None
    if part.redacted:
        return {"type": "redacted_thinking", "data": part.signature}
    return {"type": "thinking", "thinking": part.text, "signature": part.signature}


def _image_source(part: ImagePart) -> dict[str, Any]:
    if part.data is not None:
        data = base64.b64encode(part.data).decode("ascii")
        return {"type": "base64", "media_type": part.mime, "data": data}
    if part.url:
        return {"type": "url", "url": part.url}
    raise ValueError("an ImagePart needs data or a url")
