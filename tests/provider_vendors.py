"""The three LLM vendors described once, for the provider contract suite.

Why this exists: every vendor must show the same behaviour (answers, streaming, tool round trips,
usage, errors and retries, guard, settings), and the contract tests state it once over this
table. Each ``Vendor`` says only how that vendor differs: its loopback server, how its real SDK
client is built and closed, where a key and an output limit sit on its wire, and the scripted
replies that mean "refusal" or "error mid-stream" in its server's script language.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import anthropic
import httpx2
import openai
from google import genai
from google.genai import types

from bot.llm.anthropic import AnthropicProvider
from bot.llm.base import SDKProvider
from bot.llm.gemini import GeminiProvider
from bot.llm.openai import OpenAIProvider
from bot.llm.types import Usage
from bot.resilience import RetryPolicy, Sleep
from bot.settings import LLMSettings
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.base import Recorded
from tests.loopback.gemini_server import GeminiServer
from tests.loopback.openai_server import CREATED, OpenAIServer

Closer = Callable[[], Awaitable[None]]
StopCase = tuple[dict[str, Any], str, str]  # (scripted reply, stop_reason, raw_stop_reason)


class VendorServer(Protocol):
    """What the contract needs of a loopback server (all three speak the same script)."""

    @property
    def requests(self) -> list[Recorded]: ...

    @property
    def bodies(self) -> list[Any]: ...

    @property
    def replies(self) -> Any: ...

    @property
    def base_url(self) -> str: ...

    def fail(
        self, status: int, message: str = ..., /, *, headers: dict[str, str] | None = None
    ) -> None: ...

    async def start(self) -> Any: ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class Vendor:
    name: str
    model: str
    key_env: str
    url_env: str
    new_server: Callable[[], VendorServer]
    # (base_url, api_key, retry, sleep) -> the provider over an injected client, and its closer
    new_provider: Callable[[str, str, RetryPolicy, Sleep | None], tuple[SDKProvider, Closer]]
    from_settings: Callable[[LLMSettings, RetryPolicy | None], SDKProvider]
    client_closed: Callable[[SDKProvider], bool]
    # a provider bound for the vendor's real host whose requests land in the returned list
    real_host_provider: Callable[[VendorServer], tuple[SDKProvider, Callable[[], int], Closer]]
    url_for: Callable[[str], str]  # a bare http://127.0.0.1:port -> the value of url_env
    key_sent: Callable[[Recorded], str]
    path: Callable[[str, bool], str]  # (model, streaming) -> the request path
    max_tokens_sent: Callable[[dict[str, Any]], int]
    temperature_sent: Callable[[dict[str, Any]], object]
    reasoning_sent: Callable[[dict[str, Any]], object]  # the reasoning setting, None when off
    turns: Callable[[dict[str, Any]], list[Any]]  # the conversation on the wire
    raw_end_turn: str
    reasoning_model: str  # a model of this vendor that accepts a reasoning setting
    stop_cases: tuple[StopCase, ...]
    cache_reply: dict[str, Any]  # a reply whose usage reports cached prompt tokens
    cache_usage: Usage  # what that usage must read as
    stream_error: Callable[[str], dict[str, Any]]  # a reply failing in-band after ``text``
    stream_error_match: str
    hostile_env: Mapping[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.name


# -- anthropic ------------------------------------------------------------------------------
def _anthropic_provider(
    url: str, key: str, retry: RetryPolicy, sleep: Sleep | None
) -> tuple[SDKProvider, Closer]:
    # Strict validation: the SDK rejects any answer of the loopback server that is off-schema.
    # HTTP on the SDK's aiohttp client, as ``from_settings`` builds it.
    client = anthropic.AsyncAnthropic(
        api_key=key,
        base_url=url,
        max_retries=0,
        _strict_response_validation=True,
        http_client=anthropic.DefaultAioHttpClient(),
    )
    return AnthropicProvider(client, base_url=url, retry=retry, sleep=sleep), client.close


def _anthropic_real_host(
    server: VendorServer,
) -> tuple[SDKProvider, Callable[[], int], Closer]:
    sent: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        sent.append(request)
        return httpx2.Response(500)

    client = anthropic.AsyncAnthropic(
        api_key="k",
        base_url="https://api.anthropic.com",
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)),
    )
    # base_url=None: the guard reads the client's own URL
    return AnthropicProvider(client, base_url=None), lambda: len(sent), client.close


def _anthropic_closed(provider: SDKProvider) -> bool:
    assert isinstance(provider, AnthropicProvider)
    return provider.client.is_closed()


ANTHROPIC = Vendor(
    name="anthropic",
    model="claude-test",
    key_env="ANTHROPIC_API_KEY",
    url_env="ANTHROPIC_BASE_URL",
    new_server=AnthropicServer,
    new_provider=_anthropic_provider,
    from_settings=lambda s, r: AnthropicProvider.from_settings(s, retry=r),
    client_closed=_anthropic_closed,
    real_host_provider=_anthropic_real_host,
    url_for=lambda url: url,
    key_sent=lambda rec: rec.headers["authorization"].removeprefix("Bearer "),
    path=lambda model, streaming: "/v1/messages",
    max_tokens_sent=lambda body: int(body["max_tokens"]),
    temperature_sent=lambda body: body.get("temperature"),
    reasoning_sent=lambda body: body.get("thinking"),
    turns=lambda body: list(body["messages"]),
    raw_end_turn="end_turn",
    reasoning_model="claude-test",
    stop_cases=(
        ({"text": "partial", "stop": "max_tokens"}, "max_tokens", "max_tokens"),
        ({"text": "", "stop": "refusal"}, "refusal", "refusal"),
        ({"text": "partial", "stop": "stop_sequence"}, "stop_sequence", "stop_sequence"),
        ({"text": "partial", "stop": "pause_turn"}, "other", "pause_turn"),
    ),
    cache_reply={
        "text": "cached",
        "usage": {
            "input_tokens": 5,
            "output_tokens": 7,
            "cache_write_tokens": 100,
            "cache_read_tokens": 900,
        },
    },
    cache_usage=Usage(
        input_tokens=5, output_tokens=7, cache_write_tokens=100, cache_read_tokens=900
    ),
    stream_error=lambda text: {
        "text": text,
        "stream_error": {"type": "overloaded_error", "message": "Overloaded"},
    },
    stream_error_match="Overloaded",
)


# -- openai ---------------------------------------------------------------------------------
def _openai_provider(
    url: str, key: str, retry: RetryPolicy, sleep: Sleep | None
) -> tuple[SDKProvider, Closer]:
    client = openai.AsyncOpenAI(
        api_key=key,
        base_url=url,
        max_retries=0,
        _strict_response_validation=True,
        http_client=openai.DefaultAioHttpClient(),
    )
    return OpenAIProvider(client, base_url=url, retry=retry, sleep=sleep), client.close


def _openai_real_host(server: VendorServer) -> tuple[SDKProvider, Callable[[], int], Closer]:
    sent: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        sent.append(request)
        return httpx2.Response(200, json={"id": "x", "created": CREATED, "choices": []})

    client = openai.AsyncOpenAI(
        api_key="k",
        base_url="https://api.openai.com/v1",
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)),
    )
    return OpenAIProvider(client, base_url=None), lambda: len(sent), client.close


def _openai_closed(provider: SDKProvider) -> bool:
    assert isinstance(provider, OpenAIProvider)
    return provider.client.is_closed()


OPENAI = Vendor(
    name="openai",
    model="gpt-test",
    key_env="OPENAI_API_KEY",
    url_env="OPENAI_BASE_URL",
    new_server=OpenAIServer,
    new_provider=_openai_provider,
    from_settings=lambda s, r: OpenAIProvider.from_settings(s, retry=r),
    client_closed=_openai_closed,
    real_host_provider=_openai_real_host,
    url_for=lambda url: url + "/v1",
    key_sent=lambda rec: rec.headers["authorization"].removeprefix("Bearer "),
    path=lambda model, streaming: "/v1/chat/completions",
    max_tokens_sent=lambda body: int(body["max_tokens"]),
    temperature_sent=lambda body: body.get("temperature"),
    reasoning_sent=lambda body: body.get("reasoning_effort"),
    turns=lambda body: list(body["messages"]),
    raw_end_turn="stop",
    reasoning_model="o3",
    stop_cases=(
        ({"text": "cut", "stop": "max_tokens"}, "max_tokens", "length"),
        ({"text": "", "stop": "refusal"}, "refusal", "content_filter"),
        ({"refusal": "I can't help with that."}, "refusal", "stop"),
    ),
    cache_reply={
        # the server reports prompt_tokens = 5 + 900 and cached_tokens = 900
        "text": "cached",
        "usage": {"input_tokens": 5, "output_tokens": 7, "cache_read_tokens": 900},
    },
    cache_usage=Usage(input_tokens=5, output_tokens=7, cache_read_tokens=900),
    stream_error=lambda text: {
        "text": text,
        "stream_error": {"type": "server_error", "message": "boom"},
    },
    stream_error_match="boom",
)


# -- gemini ---------------------------------------------------------------------------------
def gemini_client(url: str, key: str = "test-key") -> genai.Client:
    """A client with the SDK's own retries off (``attempts=1``): ``RetryPolicy`` governs."""
    return genai.Client(
        vertexai=False,
        api_key=key,
        http_options=types.HttpOptions(
            base_url=url, retry_options=types.HttpRetryOptions(attempts=1)
        ),
    )


def _gemini_provider(
    url: str, key: str, retry: RetryPolicy, sleep: Sleep | None
) -> tuple[SDKProvider, Closer]:
    client = gemini_client(url, key)

    async def close() -> None:
        await client.aio.aclose()
        client.close()

    return GeminiProvider(client, base_url=url, retry=retry, sleep=sleep), close


def _gemini_real_host(server: VendorServer) -> tuple[SDKProvider, Callable[[], int], Closer]:
    # The client points at the loopback server, so a request that slipped through would show.
    client = gemini_client(server.base_url)

    async def close() -> None:
        await client.aio.aclose()
        client.close()

    return GeminiProvider(client, base_url=None), lambda: len(server.requests), close


def _gemini_closed(provider: SDKProvider) -> bool:
    assert isinstance(provider, GeminiProvider)
    return bool(provider.client._api_client._async_resources_are_closed())


def _generation_config(body: dict[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = body.get("generationConfig") or {}
    return config


GEMINI = Vendor(
    name="gemini",
    model="gemini-2.5-flash",
    key_env="GEMINI_API_KEY",
    url_env="GOOGLE_GEMINI_BASE_URL",
    new_server=GeminiServer,
    new_provider=_gemini_provider,
    from_settings=lambda s, r: GeminiProvider.from_settings(s, retry=r),
    client_closed=_gemini_closed,
    real_host_provider=_gemini_real_host,
    url_for=lambda url: url,
    key_sent=lambda rec: rec.headers["x-goog-api-key"],
    path=lambda model, streaming: (
        f"/v1/models/{model}:{'streamGenerateContent' if streaming else 'generateContent'}"
    ),
    max_tokens_sent=lambda body: int(_generation_config(body)["maxOutputTokens"]),
    temperature_sent=lambda body: _generation_config(body).get("temperature"),
    reasoning_sent=lambda body: _generation_config(body).get("thinkingConfig"),
    turns=lambda body: list(body["contents"]),
    raw_end_turn="STOP",
    reasoning_model="gemini-2.5-flash",
    stop_cases=(
        ({"text": "cut o", "finish": "MAX_TOKENS"}, "max_tokens", "MAX_TOKENS"),
        ({"text": "", "finish": "SAFETY"}, "refusal", "SAFETY"),
        ({"text": "", "finish": "RECITATION"}, "refusal", "RECITATION"),
        ({"prompt_block": "PROHIBITED_CONTENT"}, "refusal", "prompt_blocked:PROHIBITED_CONTENT"),
        ({"text": "??", "finish": "MALFORMED_FUNCTION_CALL"}, "other", "MALFORMED_FUNCTION_CALL"),
    ),
    cache_reply={
        "text": "cached answer",
        "usage": {
            "promptTokenCount": 1000,
            "cachedContentTokenCount": 800,
            "candidatesTokenCount": 50,
            "thoughtsTokenCount": 7,  # thoughts are billed as output
        },
    },
    # the prompt count includes the cached part; implicit caching has no write charge
    cache_usage=Usage(input_tokens=200, output_tokens=57, cache_read_tokens=800),
    stream_error=lambda text: {"text": text, "stream_error": 503},
    stream_error_match="after it started",
    # variables the SDK reads by itself, which must not override what Settings says
    hostile_env={"GOOGLE_API_KEY": "env-key", "GOOGLE_GENAI_USE_VERTEXAI": "true"},
)

VENDORS = (ANTHROPIC, OPENAI, GEMINI)
