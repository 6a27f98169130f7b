"""OpenAI Chat Completions provider: neutral types <-> the ``openai`` SDK (3.x).

Reading answers (completions and streamed chunks) lives in ``bot.llm.openai_parse``; this
module builds requests, runs the calls and classifies failures.

Chat Completions (not the Responses API) because every OpenAI-compatible local server speaks it:
Ollama, vLLM, llama.cpp and LM Studio work by setting OPENAI_BASE_URL, and need no key (the SDK
insists on one, so ``from_settings`` passes a placeholder).

Why it is built this way:

- The client is injected; ``from_settings`` builds one with ``max_retries=0`` (``bot.resilience``
  governs) and an explicit key and URL, so the SDK never falls back to OPENAI_API_KEY /
  OPENAI_BASE_URL from the environment behind the settings' back.
- Caching is automatic on OpenAI (a stable prefix is cached), so ``CachePoint`` is ignored;
  ``cache_key`` becomes ``prompt_cache_key``, which routes one conversation to one cache.
- The output limit is ``max_completion_tokens`` on OpenAI's own hosts (``max_tokens`` is
  deprecated there and rejected by reasoning models) and ``max_tokens`` elsewhere, because that is
  the field every local server has always understood.
- The wire has no error flag on tool results, so an error result is prefixed ``ERROR: ``.
  Tool results must directly follow the assistant's ``tool_calls``, so a user message's tool
  results are emitted as ``tool`` messages before the rest of its content.
- A non-empty ``message.refusal`` is a refusal: its text becomes the response text so the user
  sees why, and ``stop_reason`` is ``refusal``. Some local servers report ``stop`` for a turn that
  called tools; tool calls win.
- ``usage.prompt_tokens`` includes cached tokens; ``Usage.input_tokens`` is uncached only.
  ``completion_tokens`` already includes the hidden reasoning tokens
  (``completion_tokens_details.reasoning_tokens`` is a breakdown, not an addition), so
  ``Usage.output_tokens`` is what is billed as output.
- Reasoning is ``reasoning_effort`` (low/medium/high), sent only to models that reason (o1, o3,
  o4-*, gpt-5*; ``REASONING_MODELS``, replaceable per provider): other models, local servers
  included, answer it with HTTP 400. Reasoning tokens count against the output limit, so the
  same budget Anthropic gets for thinking (``REASONING_HEADROOM``) is added to it, keeping
  ``request.max_tokens`` the answer's own allowance. Reasoning models accept only the default
  ``temperature``, so it is not sent to them. Chat Completions returns no reasoning text.
- Structured output is ``response_format: json_schema`` with ``strict: false``: strict mode
  demands ``additionalProperties: false`` and every property required, which a caller's schema
  need not satisfy; the answer's text is the JSON.
- A stream is read off the response's bytes (``bot.llm.sse``) and each chunk's JSON, not
  built into the SDK's ``ChatCompletionChunk`` per token. As the SDK's stream does, a chunk
  carrying ``error`` raises ``openai.APIError`` (classified by its type and code), and
  ``[DONE]`` ends the answer; the body is still read to its end, so that the connection is
  kept for the next call. Whole answers are read off their JSON too (``openai_parse``, which
  says why).
- HTTP runs on the SDK's ``DefaultAioHttpClient`` (``bot.llm.clients``): chat, embeddings and
  moderation build their client with ``sdk_client``.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from collections.abc import AsyncIterator
from typing import Any, ClassVar, Self
from urllib.parse import urlsplit

import httpx2
import openai

from bot.llm import sse
from bot.llm.base import SDKProvider
from bot.llm.clients import refused_answer, sdk_http_client, transport_reason
from bot.llm.errors import event_object
from bot.llm.openai_parse import StreamState, parse_completion
from bot.llm.types import (
    REASONING_BUDGETS,
    ImagePart,
    LLMRequest,
    LLMResponse,
    Message,
    StreamEvent,
    TextDelta,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from bot.resilience import Failure, RetryPolicy, Sleep, parse_retry_after
from bot.settings import KEY_ENV, KEY_URL, ConfigError, LLMSettings

log = logging.getLogger("chorus.llm.openai")

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Models that take `reasoning_effort` (and refuse a non-default temperature). An optional
# `vendor/` prefix covers routers; gpt-5 "chat" variants are not reasoning models.
REASONING_MODELS = re.compile(r"^(?:[\w.-]+/)?(?:o[134]|gpt-5(?![\w.]*-chat))(?:$|[-.])", re.I)
# Extra output allowance per reasoning level (the same budgets Anthropic thinks with).
REASONING_HEADROOM = REASONING_BUDGETS
# Local OpenAI-compatible servers ignore the key, but the SDK refuses to start without one.
NO_KEY_PLACEHOLDER = "not-needed"

_RETRY_STATUSES = frozenset({408, 409, 429})
# What ``create`` passes for its endpoint: the API key as a Bearer token (``_create``)
_REQUEST_OPTIONS: Any = {"security": {"bearer_auth": True}}
# `type`/`code` values of an error sent inside a stream (`data: {"error": ...}`), where no
# HTTP status tells us whether a retry could help.
_RETRY_ERROR_KINDS = frozenset(
    {"server_error", "rate_limit_exceeded", "rate_limit_error", "overloaded_error", "timeout"}
)


class _StreamCut(Exception):
    """The stream ended without a ``finish_reason``: the answer was cut off in transit."""


def sdk_client(key: str, base_url: str, timeout: float) -> openai.AsyncOpenAI:
    """An ``openai`` client as every part of Chorus builds one (chat, embeddings, moderation):
    the SDK's own retries off, ``bot.resilience`` being the only policy, and HTTP on the SDK's
    ``DefaultAioHttpClient`` (``bot.llm.clients``), which ``client.close()`` closes with it."""
    return openai.AsyncOpenAI(
        api_key=key,
        base_url=base_url,
        timeout=timeout,
        max_retries=0,
        http_client=sdk_http_client(openai.DefaultAioHttpClient),
    )


class OpenAIProvider(SDKProvider):
    name: ClassVar[str] = "openai"
    key_env: ClassVar[str] = KEY_ENV["openai"]
    key_url: ClassVar[str] = KEY_URL["openai"]

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        *,
        base_url: str | None,
        retry: RetryPolicy | None = None,
        sleep: Sleep | None = None,
        reasoning_models: re.Pattern[str] | str | None = None,
    ) -> None:
        """``reasoning_models`` (searched in the model name) replaces ``REASONING_MODELS``."""
        # The guard checks where requests really go: default to the client's own URL.
        super().__init__(
            base_url=base_url if base_url is not None else str(client.base_url),
            retry=retry,
            sleep=sleep,
        )
        self.client = client
        self._owns_client = False
        self.reasoning_models = re.compile(reasoning_models or REASONING_MODELS)
        self._told: set[tuple[str, str]] = set()  # (model, what) already logged at debug
        self._limit_field = (
            "max_completion_tokens" if _is_openai_host(str(client.base_url)) else "max_tokens"
        )

    @classmethod
    def from_settings(cls, settings: LLMSettings, *, retry: RetryPolicy | None = None) -> Self:
        """A provider with its own client (closed by ``aclose``), configured only by ``settings``."""
        base_url = settings.base_url(cls.name)
        key = settings.api_key(cls.name)
        if key is None:
            if not base_url:
                settings.require_credentials(cls.name)  # raises ConfigError naming the variable
                raise ConfigError(f"{cls.key_env} is not set; get a key at {cls.key_url}")
            key = NO_KEY_PLACEHOLDER
        base_url = base_url or DEFAULT_BASE_URL
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
    def request_body(self, request: LLMRequest) -> dict[str, Any]:
        """The Chat Completions body for ``request`` on this provider's host (without
        ``stream``): ``build_params`` with the output limit and reasoning options set."""
        params = build_params(request)
        limit = request.max_tokens
        if self.reasoning_models.search(request.model):
            if request.reasoning != "off":
                params["reasoning_effort"] = request.reasoning
                limit += REASONING_HEADROOM[request.reasoning]
            if params.pop("temperature", None) is not None:
                self._tell(request.model, "temperature", "reasoning models take no temperature")
        elif request.reasoning != "off":
            self._tell(request.model, "reasoning", "not a reasoning model: reasoning_effort off")
        params[self._limit_field] = limit
        return params

    def _tell(self, model: str, what: str, message: str) -> None:
        """Log a dropped option once per model, not on every call."""
        if (model, what) not in self._told:
            self._told.add((model, what))
            log.debug("%s: %s", model, message)

    async def _complete(self, request: LLMRequest) -> LLMResponse:
        response = await self._create(self.request_body(request), stream=False)
        return parse_completion(response.content, request.model)

    async def _create(self, params: dict[str, Any], *, stream: bool) -> httpx2.Response:
        """``chat.completions.create`` minus its parameter transform: the request goes through
        the client's own ``post`` (auth, headers, timeout, errors) exactly as ``create`` sends
        it, the answer coming back as the HTTP response, its JSON or its SSE unread; but without
        ``create`` first walking every message, content part and tool schema against its
        TypedDict annotations for aliases and formats that Chat Completions' parameters do not
        have, which costs more CPU than all of Chorus's own work in a turn at the history limit
        (``python -m bench.vendor_call``, ``create`` against the provider; ``python -m
        bench.turn_ratio`` measures the whole turn). ``build_params`` already writes the wire's
        JSON, and the contract suite checks that wire against the loopback server
        (tests/test_provider_contract*.py)."""
        if stream:
            params = {**params, "stream": True, "stream_options": {"include_usage": True}}
        response: httpx2.Response = await self.client.post(
            "/chat/completions",
            body=params,
            cast_to=httpx2.Response,
            options=_REQUEST_OPTIONS,
            stream=stream,
        )
        return response

    async def _stream(self, request: LLMRequest) -> AsyncIterator[StreamEvent]:
        response = await self._create(self.request_body(request), stream=True)
        state = StreamState(model=request.model)
        done = False
        try:
            async for event in sse.events(response.aiter_bytes()):
                if done or not event.data:
                    continue  # read to the end after [DONE], so the connection is kept
                if event.data.startswith("[DONE]"):
                    done = True
                    continue
                chunk = event_object(event.data)
                error = chunk.get("error")
                if error:  # an error sent inside the stream, as the SDK's stream raises it
                    raise _stream_error(error, response.request)
                delta = state.feed(chunk)
                if delta:
                    yield TextDelta(text=delta)
        finally:
            await response.aclose()
        if state.finish is None:
            raise _StreamCut("the openai stream ended without a finish_reason")
        yield state.response()

    def _classify(self, exc: BaseException) -> Failure:
        return classify_error(exc)


def classify_error(exc: BaseException) -> Failure:
    """Whether an OpenAI SDK error is worth retrying (also for ``bot.llm.embeddings``)."""
    if (refused := refused_answer(exc)) is not None:
        return Failure(retryable=False, reason=f"the answer was refused: {refused}")
    if isinstance(exc, openai.APIStatusError):
        return _classify_status(exc)
    if isinstance(exc, openai.APITimeoutError):
        return Failure(retryable=True, reason=transport_reason(exc, "request timed out"))
    if isinstance(exc, openai.APIConnectionError):
        reason = transport_reason(exc, f"connection error: {exc.__cause__ or exc}")
        return Failure(retryable=True, reason=reason)
    if isinstance(exc, openai.APIError):  # an error event inside a stream
        kinds = {str(exc.type), str(exc.code)}
        return Failure(retryable=bool(kinds & _RETRY_ERROR_KINDS), reason=exc.message)
    if isinstance(exc, httpx2.TransportError | _StreamCut):
        return Failure(retryable=True, reason=f"{type(exc).__name__}: {exc}")
    return Failure(retryable=False, reason=f"{type(exc).__name__}: {exc}")


def _stream_error(error: object, request: httpx2.Request) -> openai.APIError:
    message = error.get("message") if isinstance(error, dict) else None
    if not isinstance(message, str) or not message:
        message = "An error occurred during streaming"
    return openai.APIError(message, request, body=error)


def _classify_status(exc: openai.APIStatusError) -> Failure:
    status = exc.status_code
    body = exc.body if isinstance(exc.body, dict) else {}
    reason = str(body.get("message") or exc.message)
    if status in (401, 403):
        return Failure(retryable=False, status=status, reason=reason)
    retryable = status in _RETRY_STATUSES or status >= 500
    # The API says explicitly when a retry can (not) help; the SDK honours it, so do we.
    should_retry = exc.response.headers.get("x-should-retry")
    if should_retry in ("true", "false"):
        retryable = should_retry == "true"
    if not retryable:
        return Failure(retryable=False, status=status, reason=reason)
    return Failure(
        retryable=True,
        status=status,
        retry_after=parse_retry_after(exc.response.headers),
        reason=reason,
    )


def _is_openai_host(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return host == "openai.com" or host.endswith((".openai.com", ".openai.azure.com"))


# -- neutral request -> wire -----------------------------------------------------------------
def build_params(request: LLMRequest) -> dict[str, Any]:
    """``chat.completions.create`` arguments, without the output limit (it depends on the host)."""
    messages: list[dict[str, Any]] = []
    system = "\n\n".join(p.text for p in request.system if isinstance(p, TextPart) and p.text)
    if system:
        messages.append({"role": "system", "content": system})
    for message in request.messages:
        if message.role == "assistant":
            messages.extend(_assistant(message))
        else:
            messages.extend(_user(message))
    params: dict[str, Any] = {"model": request.model, "messages": messages}
    if request.tools:
        params["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": dict(t.parameters),
                },
            }
            for t in request.tools
        ]
    if request.temperature is not None:
        params["temperature"] = request.temperature
    if request.cache_key:
        params["prompt_cache_key"] = request.cache_key
    if request.response_schema is not None:
        params["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "response", "schema": request.response_schema, "strict": False},
        }
    return params


def _assistant(message: Message) -> list[dict[str, Any]]:
    text = "".join(p.text for p in message.parts if isinstance(p, TextPart))
    calls = [
        {
            "id": p.id,
            "type": "function",
            "function": {"name": p.name, "arguments": json.dumps(p.arguments)},
        }
        for p in message.parts
        if isinstance(p, ToolCallPart)
    ]
    if not text and not calls:
        return []
    wire: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        wire["tool_calls"] = calls
    return [wire]


def _user(message: Message) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {
            "role": "tool",
            "tool_call_id": p.call_id,
            "content": f"ERROR: {p.content}" if p.is_error else p.content,
        }
        for p in message.parts
        if isinstance(p, ToolResultPart)
    ]
    content: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart) and part.text:
            content.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            content.append({"type": "image_url", "image_url": {"url": _image_url(part)}})
    if len(content) == 1 and content[0]["type"] == "text":
        out.append({"role": "user", "content": content[0]["text"]})
    elif content:
        out.append({"role": "user", "content": content})
    return out


def _image_url(part: ImagePart) -> str:
    if part.data is not None:
        return f"data:{part.mime};base64,{base64.b64encode(part.data).decode('ascii')}"
    if part.url:
        return part.url
    raise ValueError("an ImagePart needs data or a url")
