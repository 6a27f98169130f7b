"""Gemini through the google-genai SDK (``google.genai``), on the Gemini Developer API.

Requests are written as REST JSON and sent through the SDK's public ``generate_content`` by
``bot.llm.gemini_wire`` (which says why and how); reading answers (responses and stream chunks)
lives in ``bot.llm.gemini_parse``. This module builds the client, runs the calls and classifies
failures.

Only translation lives here; guarding and retries are ``SDKProvider``'s. Quirks of google-genai
3.x that shape it:

- **The SDK must not retry behind our back.** Without ``HttpOptions.retry_options`` its aiohttp
  transport silently re-sends a request after a connection error (sleeping 1-10 s with the real
  clock); with ``HttpRetryOptions(attempts=1)`` it raises instead, so ``RetryPolicy`` governs.
  ``generate_content``'s automatic continuation (re-requests on ``finishReason: CONTINUATION``
  or a dropped stream) and automatic function calling are turned off for each call.
- **Explicit settings beat the environment.** The client reads ``GOOGLE_API_KEY`` (preferred over
  ``GEMINI_API_KEY``), ``GOOGLE_GEMINI_BASE_URL`` and ``GOOGLE_GENAI_USE_VERTEXAI`` itself, so
  ``from_settings`` passes the key, the base URL (the public host when unset) and
  ``vertexai=False``: what ``LLMSettings`` says is what is called.
- **Errors**: ``errors.APIError`` carries ``code``, ``status``, the JSON body in ``details`` and
  the transport's response (aiohttp's) with its headers. A bad key is HTTP 400
  ``INVALID_ARGUMENT`` with reason ``API_KEY_INVALID``, reported here as an auth failure (401).
  A 429 may say how long to wait in a ``google.rpc.RetryInfo`` detail (``"retryDelay": "7s"``).
- **Caching is implicit**: Gemini 2.5+ caches a repeated prompt prefix by itself, so
  ``CachePoint`` is ignored; ``usageMetadata.promptTokenCount`` includes the cached part.
- **Reasoning** is ``thinkingConfig.thinking_budget`` (``gemini_wire.THINKING_BUDGETS``), not
  ``thinking_level``: the Developer API accepts a budget on Gemini 2.5 and 3 alike, a level only
  on 3, and refuses both at once. Thinking tokens count against ``maxOutputTokens``, so the
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
- **Structured output** is ``responseMimeType: application/json`` plus ``responseJsonSchema``
  (full JSON Schema, unlike the OpenAPI subset of ``responseSchema``).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar, Self

import aiohttp
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from bot.llm.base import SDKProvider
from bot.llm.clients import gemini_client_args, refused_answer, trust_store_named
from bot.llm.errors import ProviderAuthError
from bot.llm.gemini_parse import ResponseBuilder
from bot.llm.gemini_wire import generate, generate_stream, request_body
from bot.llm.types import LLMRequest, LLMResponse, StreamEvent, TextDelta
from bot.resilience import Failure, RetryPolicy, Sleep, parse_retry_after
from bot.settings import KEY_URL, ConfigError, LLMSettings

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/"

_AUTH_REASONS = frozenset({"API_KEY_INVALID", "API_KEY_EXPIRED", "API_KEY_SERVICE_BLOCKED"})
_RETRY_DELAY = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")


# Connection and timeout errors of the SDK's transport: aiohttp, which Chorus depends on.
_TRANSPORT_ERRORS = (TimeoutError, ConnectionError, aiohttp.ClientError)


def sdk_client(key: str, base_url: str, timeout: float) -> genai.Client:
    """A ``genai.Client`` as Chorus builds one (chat and embeddings): the Developer API at
    ``base_url`` with this key whatever the environment says, the SDK's own retries off
    (``attempts=1``), and its aiohttp session given ``ALL_PROXY`` (``bot.llm.clients``). Closed
    by ``client.aio.aclose()`` and ``client.close()``."""
    with trust_store_named():
        return genai.Client(
            vertexai=False,
            api_key=key,
            http_options=types.HttpOptions(
                base_url=base_url,
                timeout=max(1, round(timeout * 1000)),
                retry_options=types.HttpRetryOptions(attempts=1),
                async_client_args=gemini_client_args(base_url),
            ),
        )


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
        self.client = client
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
        client = sdk_client(api_key, base_url, settings.llm_timeout)
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
            await self.client.aio.aclose()
            self.client.close()

    def auth_error(self, status: int | None) -> ProviderAuthError:
        error = super().auth_error(status)
        error.args = (str(error).replace(self.key_env, f"{self.key_env} (or GOOGLE_API_KEY)", 1),)
        return error

    # -- calls ------------------------------------------------------------------------------
    async def _complete(self, request: LLMRequest) -> LLMResponse:
        response = await generate(self.client, request.model, request_body(request))
        builder = ResponseBuilder(request.model)
        builder.observe(response)
        return builder.finish()

    async def _stream(self, request: LLMRequest) -> AsyncIterator[StreamEvent]:
        stream = generate_stream(self.client, request.model, request_body(request))
        builder = ResponseBuilder(request.model)
        try:
            async for chunk in stream:
                for text in builder.observe(chunk):
                    yield TextDelta(text=text)
        finally:
            await stream.aclose()
        yield builder.finish()

    def _classify(self, exc: BaseException) -> Failure:
        return classify_error(exc)


def classify_error(exc: BaseException) -> Failure:
    """Whether a google-genai error is worth retrying (also for ``bot.llm.embeddings``)."""
    if isinstance(exc, genai_errors.APIError):
        return _classify_api_error(exc)
    if (refused := refused_answer(exc)) is not None:
        return Failure(retryable=False, reason=f"the answer was refused: {refused}")
    if isinstance(exc, _TRANSPORT_ERRORS):
        return Failure(retryable=True, reason=f"{type(exc).__name__}: {exc}".rstrip(": "))
    return Failure(retryable=False, reason=f"{type(exc).__name__}: {exc}")


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
