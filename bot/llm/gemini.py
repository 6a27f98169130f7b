"""Gemini through the google-genai SDK (``google.genai``), on the Gemini Developer API.

Reading answers (responses and stream chunks) lives in ``bot.llm.gemini_parse``; this
module builds requests, runs the calls and classifies failures.

Only translation lives here; guarding and retries are ``SDKProvider``'s. Quirks of google-genai
3.x that shape this module (read in ``google/genai/_api_client.py`` and ``models.py``):

- **The SDK must not retry behind our back.** Without ``HttpOptions.retry_options`` its aiohttp
  transport silently re-sends a request after a connection error (sleeping 1-10 s with the real
  clock); with ``HttpRetryOptions(attempts=1)`` it raises instead, so ``RetryPolicy`` governs.
  Automatic continuation (re-requests on ``finishReason: CONTINUATION`` or a dropped stream) and
  automatic function calling are switched off per request for the same reason.
- **Explicit settings beat the environment.** The client reads ``GOOGLE_API_KEY`` (preferred over
  ``GEMINI_API_KEY``), ``GOOGLE_GEMINI_BASE_URL`` and ``GOOGLE_GENAI_USE_VERTEXAI`` itself, so
  ``from_settings`` passes the key, the base URL (the public host when unset) and
  ``vertexai=False``: what ``LLMSettings`` says is what is called.
- **Errors**: ``errors.APIError`` carries ``code``, ``status``, the JSON body in ``details`` and
  the transport's response (aiohttp or httpx2) with its headers. A bad key is HTTP 400
  ``INVALID_ARGUMENT`` with reason ``API_KEY_INVALID``, reported here as an auth failure (401).
  A 429 may say how long to wait in a ``google.rpc.RetryInfo`` detail (``"retryDelay": "7s"``).
- **Caching is implicit**: Gemini 2.5+ caches a repeated prompt prefix by itself, so
  ``CachePoint`` is ignored; ``usageMetadata.promptTokenCount`` includes the cached part.
- **Reasoning** is ``thinking_config.thinking_budget`` (``THINKING_BUDGETS``), not
  ``thinking_level``: the Developer API accepts a budget on Gemini 2.5 and 3 alike, a level only
  on 3, and refuses both at once. Thinking tokens count against ``max_output_tokens``, so the
  budget is added to ``request.max_tokens`` (the answer's own allowance). ``off`` leaves the
  model's default. Thought summaries (``include_thoughts``) are not asked for.
- **Thought signatures** (https://ai.google.dev/gemini-api/docs/thought-signatures): Gemini 3
  rejects a replayed function call whose signature is missing; the signature sits on the first
  call of a turn. It is kept (base64, as on the wire) in ``ToolCallPart.signature`` and sent back
  on that call; a model turn whose first call has none (older models, other vendors, history)
  gets Google's documented placeholder ``skip_thought_signature_validator`` there instead. A
  thought part (text and signature) becomes a ``ThinkingPart(vendor="gemini")`` and goes back as
  a thought part; a signature on a text part (not validated, but it helps the model) becomes a
  text-less ``ThinkingPart`` after that text and goes back on the text part before it.
- **Structured output** is ``response_mime_type="application/json"`` plus
  ``response_json_schema`` (full JSON Schema, unlike the OpenAPI subset of ``response_schema``).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import importlib
import re
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any, ClassVar, Self

from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from bot.llm.base import SDKProvider
from bot.llm.errors import ProviderAuthError
from bot.llm.gemini_parse import ResponseBuilder
from bot.llm.types import (
    REASONING_BUDGETS,
    ImagePart,
    LLMRequest,
    LLMResponse,
    Message,
    Part,
    StreamEvent,
    TextDelta,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
)
from bot.resilience import Failure, RetryPolicy, Sleep, parse_retry_after
from bot.settings import KEY_URL, ConfigError, LLMSettings

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/"
# https://ai.google.dev/gemini-api/docs/thought-signatures (FAQ: dummy signatures)
_PLACEHOLDER_SIGNATURE = b"skip_thought_signature_validator"
# Thinking budget per reasoning level (tokens), the same as Anthropic's.
THINKING_BUDGETS = REASONING_BUDGETS

_AUTH_REASONS = frozenset({"API_KEY_INVALID", "API_KEY_EXPIRED", "API_KEY_SERVICE_BLOCKED"})
_RETRY_DELAY = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")


def _transport_errors() -> tuple[type[BaseException], ...]:
    """Connection and timeout errors of whichever transport the SDK picked.

    With aiohttp installed (it is here) the async client uses aiohttp, else httpx2 or httpx.
    """
    found: list[type[BaseException]] = [TimeoutError, ConnectionError]
    for module, name in (
        ("aiohttp", "ClientError"),
        ("httpx2", "TransportError"),
        ("httpx", "TransportError"),
    ):
        with contextlib.suppress(ImportError):
            found.append(getattr(importlib.import_module(module), name))
    return tuple(found)


_TRANSPORT_ERRORS = _transport_errors()


class GeminiProvider(SDKProvider):
    """``Provider`` over an injected ``genai.Client``; ``from_settings`` builds and owns one."""

    name: ClassVar[str] = "gemini"
    key_env: ClassVar[str] = "GEMINI_API_KEY"
    key_url: ClassVar[str] = KEY_URL["gemini"]

    def __init__(
        self,
        client: genai.Client,
        *,
        base_url: str | None,
        retry: RetryPolicy | None = None,
        sleep: Sleep | None = None,
    ) -> None:
        super().__init__(base_url=base_url, retry=retry, sleep=sleep)
        self._client = client
        self._owns_client = False

    @classmethod
    def from_settings(
        cls, settings: LLMSettings, *, retry: RetryPolicy | None = None, sleep: Sleep | None = None
    ) -> Self:
        """A provider that owns a client built from ``settings`` (the SDK's own retries off)."""
        api_key = settings.api_key("gemini")
        if api_key is None:
            raise ConfigError(
                f"GEMINI_API_KEY (or GOOGLE_API_KEY) is not set; get a key at {cls.key_url}"
            )
        base_url = settings.base_url("gemini") or DEFAULT_BASE_URL
        client = genai.Client(
            vertexai=False,
            api_key=api_key,
            http_options=types.HttpOptions(
                base_url=base_url,
                timeout=max(1, round(settings.llm_timeout * 1000)),
                retry_options=types.HttpRetryOptions(attempts=1),
            ),
        )
        provider = cls(
            client,
            base_url=base_url,
            retry=retry or RetryPolicy(max_retries=settings.llm_max_retries),
            sleep=sleep,
        )
        provider._owns_client = True
        return provider

    async def aclose(self) -> None:
        """Close the client's connection pools, but only if this provider created the client."""
        if self._owns_client:
            self._owns_client = False
            await self._client.aio.aclose()
            self._client.close()

    def auth_error(self, status: int | None) -> ProviderAuthError:
        error = super().auth_error(status)
        error.args = (str(error).replace(self.key_env, f"{self.key_env} (or GOOGLE_API_KEY)", 1),)
        return error

    # -- calls ------------------------------------------------------------------------------
    async def _complete(self, request: LLMRequest) -> LLMResponse:
        response = await self._client.aio.models.generate_content(
            model=request.model, contents=_contents(request.messages), config=_config(request)
        )
        builder = ResponseBuilder(request.model)
        builder.observe(response)
        return builder.finish()

    async def _stream(self, request: LLMRequest) -> AsyncIterator[StreamEvent]:
        stream = await self._client.aio.models.generate_content_stream(
            model=request.model, contents=_contents(request.messages), config=_config(request)
        )
        builder = ResponseBuilder(request.model)
        try:
            async for chunk in stream:
                for text in builder.observe(chunk):
                    yield TextDelta(text=text)
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()
        yield builder.finish()

    def _classify(self, exc: BaseException) -> Failure:
        return classify_error(exc)


def classify_error(exc: BaseException) -> Failure:
    """Whether a google-genai error is worth retrying (also for ``bot.llm.embeddings``)."""
    if isinstance(exc, genai_errors.APIError):
        return _classify_api_error(exc)
    if isinstance(exc, _TRANSPORT_ERRORS):
        return Failure(retryable=True, reason=f"{type(exc).__name__}: {exc}".rstrip(": "))
    return Failure(retryable=False, reason=f"{type(exc).__name__}: {exc}")


# -- request mapping ------------------------------------------------------------------------
def _config(request: LLMRequest) -> types.GenerateContentConfig:
    system = [types.Part(text=p.text) for p in request.system if isinstance(p, TextPart)]
    tools: types.ToolListUnion | None = None
    if request.tools:
        declarations = [
            types.FunctionDeclaration(
                name=t.name, description=t.description, parameters_json_schema=t.parameters
            )
            for t in request.tools
        ]
        tools = [types.Tool(function_declarations=declarations)]
    thinking: types.ThinkingConfig | None = None
    limit = request.max_tokens
    if request.reasoning != "off":
        budget = THINKING_BUDGETS[request.reasoning]
        thinking = types.ThinkingConfig(thinking_budget=budget)
        limit += budget
    structured = request.response_schema is not None
    return types.GenerateContentConfig(
        system_instruction=types.Content(parts=system) if system else None,
        tools=tools,
        max_output_tokens=limit,
        temperature=request.temperature,
        thinking_config=thinking,
        response_mime_type="application/json" if structured else None,
        response_json_schema=request.response_schema,
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        automatic_continuation=False,
    )


def _contents(messages: Iterable[Message]) -> list[types.Content]:
    contents = []
    for message in messages:
        role = "model" if message.role == "assistant" else "user"
        parts = _parts(message.parts, signed=role == "model")
        if parts:  # Gemini rejects a content without parts
            contents.append(types.Content(role=role, parts=parts))
    return contents


def _parts(parts: Iterable[Part], *, signed: bool) -> list[types.Part]:
    """Wire parts of one message; ``signed``: a model turn, whose signatures go back."""
    out: list[types.Part] = []
    for part in parts:
        if isinstance(part, TextPart):
            out.append(types.Part(text=part.text))
        elif isinstance(part, ToolCallPart):
            signature = _signature(part.signature) if signed else None
            if signed and signature is None and not any(p.function_call for p in out):
                signature = _PLACEHOLDER_SIGNATURE  # the first call of a turn must be signed
            out.append(
                types.Part(
                    function_call=types.FunctionCall(
                        id=part.id, name=part.name, args=dict(part.arguments)
                    ),
                    thought_signature=signature,
                )
            )
        elif isinstance(part, ThinkingPart):
            if signed and part.vendor == "gemini":
                _add_thought(out, part)
        elif isinstance(part, ToolResultPart):
            key = "error" if part.is_error else "result"
            out.append(
                types.Part(
                    function_response=types.FunctionResponse(
                        id=part.call_id, name=part.name, response={key: part.content}
                    )
                )
            )
        elif isinstance(part, ImagePart):
            out.append(_image(part))
        # CachePoint: Gemini caches a stable prefix implicitly.
    return out


def _add_thought(out: list[types.Part], part: ThinkingPart) -> None:
    """A thought part goes back as sent; a bare signature returns to the text part before it."""
    signature = _signature(part.signature)
    if part.text:
        out.append(types.Part(text=part.text, thought=True, thought_signature=signature))
    elif signature is not None:
        previous = out[-1] if out else None
        if previous is not None and previous.text is not None and not previous.thought_signature:
            out[-1] = previous.model_copy(update={"thought_signature": signature})
        else:
            out.append(types.Part(text="", thought_signature=signature))


def _signature(value: str | None) -> bytes | None:
    """The bytes of a signature kept as base64 (the wire's own spelling); None if unusable.

    The SDK re-encodes bytes as URL-safe base64 on the way out; Google's JSON parser takes either.
    """
    if not value:
        return None
    try:
        return base64.b64decode(value.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        return None


def _image(part: ImagePart) -> types.Part:
    if part.data is not None:
        return types.Part(inline_data=types.Blob(mime_type=part.mime, data=part.data))
    if part.url:
        # The Gemini API fetches public and signed HTTPS URLs given as file data.
        return types.Part(file_data=types.FileData(file_uri=part.url, mime_type=part.mime))
    return types.Part(text="[an image that could not be attached]")


# -- error classification -------------------------------------------------------------------
def _classify_api_error(exc: genai_errors.APIError) -> Failure:
    code = exc.code
    error = _error_object(exc.details)
    details = [d for d in error.get("details") or [] if isinstance(d, dict)]
    reason = f"{exc.status or code}: {exc.message or ''}".strip(": ")
    if code in (401, 403):
        return Failure(retryable=False, status=code, reason=reason)
    if code == 400 and any(d.get("reason") in _AUTH_REASONS for d in details):
        return Failure(retryable=False, status=401, reason=reason)
    if code in (408, 429) or code >= 500:
        headers = getattr(exc.response, "headers", None)
        retry_after = parse_retry_after(headers if isinstance(headers, Mapping) else None)
        if retry_after is None:
            retry_after = _retry_delay(details)
        return Failure(retryable=True, status=code, retry_after=retry_after, reason=reason)
    return Failure(retryable=False, status=code, reason=reason)


def _error_object(body: Any) -> dict[str, Any]:
    if isinstance(body, list) and body:
        body = body[0]
    if not isinstance(body, dict):
        return {}
    inner = body.get("error", body)
    return inner if isinstance(inner, dict) else {}


def _retry_delay(details: list[dict[str, Any]]) -> float | None:
    """Seconds from a ``google.rpc.RetryInfo`` detail, e.g. ``"retryDelay": "7s"``."""
    for detail in details:
        if str(detail.get("@type", "")).endswith("google.rpc.RetryInfo"):
            match = _RETRY_DELAY.match(str(detail.get("retryDelay", "")))
            if match:
                return float(match.group(1))
    return None
