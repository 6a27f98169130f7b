"""GeminiProvider through the real google-genai SDK against a loopback Gemini API.

Request counts on the server prove that retries are ours alone (the SDK's are off) and the
injected ``sleep`` records every backoff, so nothing here waits on the clock.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from google import genai
from google.genai import types

from bot.config import ConfigError, Settings, load_settings
from bot.llm import guard
from bot.llm.errors import (
    ProviderAuthError,
    ProviderRequestError,
    ProviderUnavailable,
    RealVendorCallBlocked,
)
from bot.llm.gemini import GeminiProvider
from bot.llm.types import (
    CachePoint,
    ImagePart,
    LLMRequest,
    LLMResponse,
    Message,
    StreamEvent,
    TextDelta,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
)
from bot.resilience import RetryPolicy
from tests.loopback.gemini_server import GeminiServer, error_info, retry_info

# google-genai subclasses aiohttp.ClientSession for its own sessions, which aiohttp frowns upon.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Inheritance class AiohttpClientSession:DeprecationWarning"
)

MODEL = "gemini-2.5-flash"
POLICY = RetryPolicy(max_retries=2, base_delay=0.01)


class RecordingSleep:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def _client(base_url: str, api_key: str = "test-key") -> genai.Client:
    return genai.Client(
        vertexai=False,
        api_key=api_key,
        http_options=types.HttpOptions(
            base_url=base_url, retry_options=types.HttpRetryOptions(attempts=1)
        ),
    )


@pytest.fixture
async def server() -> AsyncIterator[GeminiServer]:
    srv = GeminiServer()
    async with srv:
        yield srv


@pytest.fixture
def sleep() -> RecordingSleep:
    return RecordingSleep()


@pytest.fixture
async def provider(server: GeminiServer, sleep: RecordingSleep) -> AsyncIterator[GeminiProvider]:
    client = _client(server.base_url)
    yield GeminiProvider(client, base_url=server.base_url, retry=POLICY, sleep=sleep)
    await client.aio.aclose()
    client.close()


def _request(text: str = "hello", **kw: Any) -> LLMRequest:
    return LLMRequest(model=MODEL, messages=(Message.user(text),), **kw)


async def _collect(provider: GeminiProvider, request: LLMRequest) -> list[StreamEvent]:
    return [event async for event in provider.stream(request)]


# -- happy paths ----------------------------------------------------------------------------
async def test_complete_returns_text_stop_reason_and_model(
    provider: GeminiProvider, server: GeminiServer
) -> None:
    server.replies.append("Hi there, friend.")

    response = await provider.complete(_request())

    assert response.text == "Hi there, friend."
    assert response.stop_reason == "end_turn"
    assert response.raw_stop_reason == "STOP"
    assert response.model == MODEL
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    (rec,) = server.requests
    assert rec.path == f"/v1/models/{MODEL}:generateContent"
    assert rec.headers["x-goog-api-key"] == "test-key"


async def test_stream_deltas_concatenate_to_final_text(
    provider: GeminiProvider, server: GeminiServer
) -> None:
    server.replies.append("one two three four")

    events = await _collect(provider, _request())

    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    final = events[-1]
    assert isinstance(final, LLMResponse)
    assert len(deltas) == 4
    assert "".join(deltas) == final.text == "one two three four"
    assert final.stop_reason == "end_turn"
    assert final.usage.input_tokens > 0 and final.usage.output_tokens == len(final.text) // 4
    (rec,) = server.requests
    assert rec.path == f"/v1/models/{MODEL}:streamGenerateContent"
    assert rec.query == {"alt": "sse"}


@pytest.mark.parametrize("streamed", [False, True])
async def test_usage_counts_cached_tokens_apart_from_input(
    provider: GeminiProvider, server: GeminiServer, streamed: bool
) -> None:
    usage = {
        "promptTokenCount": 1000,
        "cachedContentTokenCount": 800,
        "candidatesTokenCount": 50,
        "thoughtsTokenCount": 7,
    }
    server.replies.append({"text": "cached answer", "usage": usage})

    if streamed:
        final = (await _collect(provider, _request()))[-1]
        assert isinstance(final, LLMResponse)
    else:
        final = await provider.complete(_request())

    assert final.usage.input_tokens == 200
    assert final.usage.cache_read_tokens == 800
    assert final.usage.cache_write_tokens == 0
    assert final.usage.output_tokens == 57
    assert final.usage.total_input_tokens == 1000


# -- request mapping ------------------------------------------------------------------------
async def test_request_maps_system_roles_tools_calls_results_and_images(
    provider: GeminiProvider, server: GeminiServer
) -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    request = LLMRequest(
        model=MODEL,
        system=(TextPart(text="You are Chorus."), CachePoint(), TextPart(text="Be brief.")),
        messages=(
            Message.user("look this up"),
            Message(
                role="assistant",
                parts=(
                    TextPart(text="Checking."),
                    ToolCallPart(id="call_0", name="lookup", arguments={"q": "a"}),
                    ToolCallPart(id="call_1", name="lookup", arguments={"q": "b"}),
                ),
            ),
            Message(
                role="user",
                parts=(
                    ToolResultPart(call_id="call_0", name="lookup", content="found a"),
                    ToolResultPart(call_id="call_1", name="lookup", content="boom", is_error=True),
                    CachePoint(),
                ),
            ),
            Message(
                role="user",
                parts=(
                    TextPart(text="and these?"),
                    ImagePart(mime="image/png", data=b"\x89PNG-bytes"),
                    ImagePart(mime="image/jpeg", url="https://cdn.example/cat.jpg"),
                ),
            ),
        ),
        tools=(ToolSpec(name="lookup", description="Look a thing up.", parameters=schema),),
        max_tokens=321,
        temperature=0.25,
    )

    await provider.complete(request)

    body = server.requests[0].body
    assert body["systemInstruction"] == {
        "parts": [{"text": "You are Chorus."}, {"text": "Be brief."}]
    }
    assert [c["role"] for c in body["contents"]] == ["user", "model", "user", "user"]
    model_parts = body["contents"][1]["parts"]
    assert model_parts[0] == {"text": "Checking."}
    assert model_parts[1]["functionCall"] == {"id": "call_0", "name": "lookup", "args": {"q": "a"}}
    # Gemini 3 needs a signature on the first call of a replayed turn; only the first carries it.
    signature = base64.b64decode(model_parts[1]["thoughtSignature"])
    assert signature == b"skip_thought_signature_validator"
    assert "thoughtSignature" not in model_parts[2]
    results = [p["functionResponse"] for p in body["contents"][2]["parts"]]
    assert results == [
        {"id": "call_0", "name": "lookup", "response": {"result": "found a"}},
        {"id": "call_1", "name": "lookup", "response": {"error": "boom"}},
    ]
    text, inline, by_url = body["contents"][3]["parts"]
    assert text == {"text": "and these?"}
    assert base64.b64decode(inline["inlineData"]["data"]) == b"\x89PNG-bytes"
    assert _field(inline["inlineData"], "mimeType") == "image/png"
    assert _field(by_url["fileData"], "fileUri") == "https://cdn.example/cat.jpg"
    (declaration,) = body["tools"][0]["functionDeclarations"]
    assert declaration["name"] == "lookup"
    assert declaration["description"] == "Look a thing up."
    assert _field(declaration, "parametersJsonSchema") == schema
    assert body["generationConfig"] == {"maxOutputTokens": 321, "temperature": 0.25}


def _field(obj: dict[str, Any], camel: str) -> Any:
    """The SDK sends some nested keys in snake_case; the real API accepts either spelling."""
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)
    return obj[camel] if camel in obj else obj[snake]


async def test_function_calls_map_to_tool_calls_with_stable_ids_and_round_trip(
    provider: GeminiProvider, server: GeminiServer
) -> None:
    server.replies.append(
        {
            "thought": "I should look both up.",
            "text": "Let me check.",
            "tool_calls": [
                {"id": "fc_7", "name": "lookup", "arguments": {"q": "a"}},
                {"name": "lookup", "arguments": {"q": "b"}},
            ],
        }
    )

    first = await provider.complete(_request("look up a and b"))

    assert first.stop_reason == "tool_use"
    assert first.text == "Let me check."  # the thought part is not answer text
    assert [(c.id, c.arguments) for c in first.tool_calls] == [
        ("fc_7", {"q": "a"}),
        ("call_1", {"q": "b"}),
    ]

    results = Message(
        role="user",
        parts=tuple(
            ToolResultPart(call_id=c.id, name=c.name, content="ok") for c in first.tool_calls
        ),
    )
    second = LLMRequest(
        model=MODEL, messages=(Message.user("look up a and b"), first.as_message(), results)
    )
    await provider.complete(second)

    body = server.requests[1].body
    calls = [p["functionCall"] for p in body["contents"][1]["parts"] if "functionCall" in p]
    answers = [p["functionResponse"] for p in body["contents"][2]["parts"]]
    assert [c["id"] for c in calls] == [a["id"] for a in answers] == ["fc_7", "call_1"]


async def test_stream_with_function_calls_ends_in_tool_use(
    provider: GeminiProvider, server: GeminiServer
) -> None:
    server.replies.append(
        {"text": "Looking it up.", "tool_calls": [{"name": "lookup", "arguments": {"q": "x"}}]}
    )

    events = await _collect(provider, _request())

    final = events[-1]
    assert isinstance(final, LLMResponse)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Looking it up."
    assert final.stop_reason == "tool_use"
    assert final.tool_calls == [ToolCallPart(id="call_0", name="lookup", arguments={"q": "x"})]


@pytest.mark.parametrize(
    ("reply", "stop", "raw"),
    [
        ({"text": "cut o", "finish": "MAX_TOKENS"}, "max_tokens", "MAX_TOKENS"),
        ({"text": "", "finish": "SAFETY"}, "refusal", "SAFETY"),
        ({"text": "", "finish": "RECITATION"}, "refusal", "RECITATION"),
        ({"prompt_block": "PROHIBITED_CONTENT"}, "refusal", "prompt_blocked:PROHIBITED_CONTENT"),
        ({"text": "??", "finish": "MALFORMED_FUNCTION_CALL"}, "other", "MALFORMED_FUNCTION_CALL"),
    ],
)
@pytest.mark.parametrize("streamed", [False, True])
async def test_stop_reasons(
    provider: GeminiProvider,
    server: GeminiServer,
    reply: dict[str, Any],
    stop: str,
    raw: str,
    streamed: bool,
) -> None:
    server.replies.append(reply)

    if streamed:
        response = (await _collect(provider, _request()))[-1]
        assert isinstance(response, LLMResponse)
    else:
        response = await provider.complete(_request())

    assert (response.stop_reason, response.raw_stop_reason) == (stop, raw)
    assert response.text == reply.get("text", "")


# -- errors and retries ---------------------------------------------------------------------
async def test_429_honours_retry_after_header(
    provider: GeminiProvider, server: GeminiServer, sleep: RecordingSleep
) -> None:
    server.fail(429, "Resource has been exhausted", headers={"Retry-After": "7"})
    server.replies.append("after the wait")

    response = await provider.complete(_request())

    assert response.text == "after the wait"
    assert sleep.delays == [7.0]
    assert len(server.requests) == 2
    assert server.bodies[0] == server.bodies[1]


async def test_429_honours_google_retry_info_detail(
    provider: GeminiProvider, server: GeminiServer, sleep: RecordingSleep
) -> None:
    server.fail(429, "Quota exceeded", details=[retry_info(3)])

    await provider.complete(_request())

    assert sleep.delays == [3.0]
    assert len(server.requests) == 2


@pytest.mark.parametrize("code", [401, 403])
async def test_401_and_403_raise_auth_error_naming_the_key(
    provider: GeminiProvider, server: GeminiServer, sleep: RecordingSleep, code: int
) -> None:
    server.fail(code, "denied")

    with pytest.raises(ProviderAuthError) as info:
        await provider.complete(_request())

    assert info.value.status == code
    assert info.value.key_env == "GEMINI_API_KEY"
    assert "GEMINI_API_KEY" in str(info.value) and "GOOGLE_API_KEY" in str(info.value)
    assert "https://aistudio.google.com/apikey" in str(info.value)
    assert len(server.requests) == 1 and sleep.delays == []


async def test_400_api_key_invalid_is_an_auth_error(sleep: RecordingSleep) -> None:
    srv = GeminiServer(api_key="the-right-key")
    async with srv:
        client = _client(srv.base_url, api_key="a-wrong-key")
        provider = GeminiProvider(client, base_url=srv.base_url, retry=POLICY, sleep=sleep)
        try:
            with pytest.raises(ProviderAuthError) as info:
                await provider.complete(_request())
        finally:
            await client.aio.aclose()

    assert info.value.status == 401
    assert "GEMINI_API_KEY" in str(info.value)
    assert len(srv.requests) == 1 and sleep.delays == []


@pytest.mark.parametrize("code", [500, 503])
async def test_server_errors_are_retried_then_unavailable(
    provider: GeminiProvider, server: GeminiServer, sleep: RecordingSleep, code: int
) -> None:
    for _ in range(POLICY.max_retries + 1):
        server.fail(code, "The model is overloaded.")

    with pytest.raises(ProviderUnavailable) as info:
        await provider.complete(_request())

    assert info.value.status == code
    assert info.value.attempts == POLICY.max_retries + 1
    # Exactly our attempts reached the server: the SDK did not retry on its own.
    assert len(server.requests) == POLICY.max_retries + 1
    assert len(sleep.delays) == POLICY.max_retries


async def test_invalid_argument_is_a_request_error_sent_once(
    provider: GeminiProvider, server: GeminiServer, sleep: RecordingSleep
) -> None:
    server.fail(
        400,
        "Invalid JSON payload received.",
        status="INVALID_ARGUMENT",
        details=[error_info("BAD_REQUEST")],
    )

    with pytest.raises(ProviderRequestError) as info:
        await provider.complete(_request())

    assert not isinstance(info.value, ProviderAuthError)
    assert info.value.status == 400
    assert "Invalid JSON payload" in str(info.value)
    assert len(server.requests) == 1 and sleep.delays == []


async def test_stream_retries_a_503_before_the_first_byte(
    provider: GeminiProvider, server: GeminiServer, sleep: RecordingSleep
) -> None:
    server.fail(503, "The model is overloaded.", headers={"Retry-After": "2"})
    server.replies.append("second time lucky")

    events = await _collect(provider, _request())

    final = events[-1]
    assert isinstance(final, LLMResponse)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "second time lucky"
    assert sleep.delays == [2.0]
    assert [r.query for r in server.requests] == [{"alt": "sse"}, {"alt": "sse"}]


async def test_stream_error_after_text_is_not_retried(
    provider: GeminiProvider, server: GeminiServer, sleep: RecordingSleep
) -> None:
    server.replies.append({"text": "partial answer that breaks", "stream_error": 503})
    seen: list[str] = []

    with pytest.raises(ProviderUnavailable, match="after it started") as info:
        async for event in provider.stream(_request()):
            if isinstance(event, TextDelta):
                seen.append(event.text)

    # Text already reached the caller, so a retry would repeat it.
    assert "".join(seen) == "partial answer that breaks"
    assert info.value.status == 503
    assert len(server.requests) == 1 and sleep.delays == []


async def test_dropped_connections_are_retried_by_us_only(sleep: RecordingSleep) -> None:
    # Without retry_options the SDK's aiohttp transport would reconnect once by itself.
    connections = 0

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        writer.close()

    tcp = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = tcp.sockets[0].getsockname()[1]
    settings = load_settings(GEMINI_API_KEY="k", GOOGLE_GEMINI_BASE_URL=f"http://127.0.0.1:{port}")
    provider = GeminiProvider.from_settings(settings, retry=POLICY, sleep=sleep)
    try:
        with pytest.raises(ProviderUnavailable) as info:
            await provider.complete(_request())
    finally:
        await provider.aclose()
        tcp.close()
        await tcp.wait_closed()

    assert info.value.attempts == POLICY.max_retries + 1
    assert connections == POLICY.max_retries + 1
    assert len(sleep.delays) == POLICY.max_retries


class _StalledServer(GeminiServer):
    """Accepts requests and never answers until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        await self.record(request)
        await self.release.wait()
        return web.json_response({})


async def test_timeouts_from_settings_are_retried(sleep: RecordingSleep) -> None:
    srv = _StalledServer()
    async with srv:
        settings = load_settings(
            GEMINI_API_KEY="k",
            GOOGLE_GEMINI_BASE_URL=srv.base_url,
            CHORUS_LLM_TIMEOUT=0.5,  # long enough for a loaded machine to deliver each request
            CHORUS_LLM_MAX_RETRIES=1,
        )
        provider = GeminiProvider.from_settings(settings, sleep=sleep)
        try:
            with pytest.raises(ProviderUnavailable) as info:
                await provider.complete(_request())
        finally:
            srv.release.set()
            await provider.aclose()

    assert info.value.attempts == 2
    assert len(srv.requests) == 2
    assert len(sleep.delays) == 1


# -- guard and construction -----------------------------------------------------------------
@pytest.fixture
def blocked() -> Any:
    was_blocked = guard.real_calls_blocked()
    guard.block_real_calls()
    yield
    if not was_blocked:
        guard.allow_real_calls()


@pytest.mark.usefixtures("blocked")
async def test_guard_blocks_the_real_api_before_any_request(server: GeminiServer) -> None:
    # The client points at the loopback server, so a request that slipped through would show.
    client = _client(server.base_url)
    provider = GeminiProvider(client, base_url=None, retry=POLICY)
    try:
        with pytest.raises(RealVendorCallBlocked):
            await provider.complete(_request())
        with pytest.raises(RealVendorCallBlocked):
            await _collect(provider, _request())
    finally:
        await client.aio.aclose()
    assert server.requests == []


@pytest.mark.usefixtures("blocked")
async def test_guard_blocks_from_settings_without_base_url() -> None:
    provider = GeminiProvider.from_settings(
        load_settings(GEMINI_API_KEY="k", GOOGLE_GEMINI_BASE_URL=None)
    )
    try:
        with pytest.raises(RealVendorCallBlocked, match="generativelanguage.googleapis.com"):
            await provider.complete(_request())
    finally:
        await provider.aclose()


async def test_from_settings_uses_explicit_settings_over_sdk_env_vars(
    server: GeminiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Env vars the SDK reads by itself must not override what Settings says.
    monkeypatch.setenv("GOOGLE_API_KEY", "env-key")
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("GOOGLE_GENAI_USE_VERTEXAI", "true")
    settings = load_settings(
        GEMINI_API_KEY="settings-key",
        GOOGLE_GEMINI_BASE_URL=server.base_url,
        CHORUS_LLM_TIMEOUT=12.5,
        CHORUS_LLM_MAX_RETRIES=3,
    )
    server.replies.append("configured")

    provider = GeminiProvider.from_settings(settings)
    try:
        response = await provider.complete(_request())
    finally:
        await provider.aclose()

    assert response.text == "configured"
    assert provider.retry.max_retries == 3
    (rec,) = server.requests
    assert rec.headers["x-goog-api-key"] == "settings-key"
    assert rec.headers["x-server-timeout"] == "13"  # the SDK sends the timeout, rounded up
    assert rec.path == f"/v1/models/{MODEL}:generateContent"


async def test_aclose_closes_only_a_client_the_provider_created(server: GeminiServer) -> None:
    owned = GeminiProvider.from_settings(
        load_settings(GEMINI_API_KEY="k", GOOGLE_GEMINI_BASE_URL=server.base_url)
    )
    await owned.complete(_request())
    await owned.aclose()
    assert owned._client._api_client._async_resources_are_closed()

    injected = _client(server.base_url)
    borrower = GeminiProvider(injected, base_url=server.base_url)
    await borrower.complete(_request())
    await borrower.aclose()
    try:
        assert not injected._api_client._async_resources_are_closed()
    finally:
        await injected.aio.aclose()


def test_from_settings_without_a_key_names_both_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    settings = Settings(_env_file=None)  # type: ignore[call-arg]

    with pytest.raises(ConfigError, match="GEMINI_API_KEY.*GOOGLE_API_KEY"):
        GeminiProvider.from_settings(settings)


# -- reasoning, thought signatures and structured output -------------------------------------
SIG = base64.b64encode(b"\x12\x34opaque-signature\xff").decode()
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "score": {"type": "integer", "minimum": 0}},
    "required": ["answer"],
}


async def _answer(provider: GeminiProvider, request: LLMRequest, streaming: bool) -> LLMResponse:
    if not streaming:
        return await provider.complete(request)
    *deltas, final = await _collect(provider, request)
    assert isinstance(final, LLMResponse)
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == final.text
    return final


def _next_turn(request: LLMRequest, response: LLMResponse) -> LLMRequest:
    results = Message(
        role="user",
        parts=tuple(
            ToolResultPart(call_id=c.id, name=c.name, content="ok") for c in response.tool_calls
        ),
    )
    messages = (*request.messages, response.as_message(), results)
    return request.model_copy(update={"messages": messages})


@pytest.mark.parametrize(("level", "budget"), [("low", 1024), ("medium", 4096), ("high", 16384)])
async def test_reasoning_levels_map_to_a_thinking_budget_on_top_of_the_output_limit(
    provider: GeminiProvider, server: GeminiServer, level: str, budget: int
) -> None:
    await provider.complete(_request(reasoning=level, max_tokens=500))
    config = server.requests[0].body["generationConfig"]
    assert _field(config["thinkingConfig"], "thinkingBudget") == budget
    assert "thinkingLevel" not in config["thinkingConfig"]
    assert "thinking_level" not in config["thinkingConfig"]
    assert config["maxOutputTokens"] == 500 + budget


async def test_reasoning_off_leaves_the_models_default(
    provider: GeminiProvider, server: GeminiServer
) -> None:
    await provider.complete(_request(max_tokens=500))
    assert server.requests[0].body["generationConfig"] == {"maxOutputTokens": 500}


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_call_signature_is_kept_and_sent_back_and_the_api_accepts_it(
    provider: GeminiProvider, server: GeminiServer, streaming: bool
) -> None:
    server.replies.append(
        {
            "text": "Let me check.",
            "signature": SIG,
            "tool_calls": [
                {"name": "lookup", "arguments": {"q": "a"}},
                {"name": "lookup", "arguments": {"q": "b"}},
            ],
        }
    )
    server.replies.append("Both found.")
    first = _request("look up a and b", reasoning="low")
    response = await _answer(provider, first, streaming)
    # Gemini signs only the first call of a turn; the second has no signature of its own.
    assert [c.signature for c in response.tool_calls] == [SIG, None]
    assert response.text == "Let me check."

    final = await provider.complete(_next_turn(first, response))

    assert final.text == "Both found."
    assert len(server.requests) == 2  # accepted: nothing retried or refused
    parts = server.requests[1].body["contents"][1]["parts"]
    assert parts[0] == {"text": "Let me check."}
    # the real one, not the placeholder (re-encoded by the SDK as URL-safe base64)
    assert base64.urlsafe_b64decode(parts[1]["thoughtSignature"]) == base64.b64decode(SIG)
    assert "thoughtSignature" not in parts[2]


@pytest.mark.parametrize("signature", [None, "%%not-base64%%"])
async def test_a_replayed_call_without_its_signature_is_refused(
    provider: GeminiProvider, server: GeminiServer, sleep: RecordingSleep, signature: str | None
) -> None:
    """The loopback API checks signatures like Gemini 3, so the round trip above means something."""
    server.replies.append(
        {"signature": SIG, "tool_calls": [{"name": "lookup", "arguments": {"q": "a"}}]}
    )
    first = _request("look up a")
    response = await provider.complete(first)
    (call,) = response.tool_calls
    unsigned = response.model_copy(
        update={"parts": (call.model_copy(update={"signature": signature}),)}
    )
    request = _next_turn(first, unsigned)
    with pytest.raises(ProviderRequestError, match="thought.signature") as info:
        await provider.complete(request)
    assert info.value.status == 400
    assert sleep.delays == []
    # what was sent in its place: the placeholder, which only satisfies turns nobody signed
    sent = server.requests[1].body["contents"][1]["parts"][0]["thoughtSignature"]
    assert base64.urlsafe_b64decode(sent) == b"skip_thought_signature_validator"


@pytest.mark.parametrize("streaming", [False, True])
async def test_thoughts_and_text_signatures_become_thinking_parts_not_text(
    provider: GeminiProvider, server: GeminiServer, streaming: bool
) -> None:
    server.replies.append(
        {"thinking": "The user says hi.", "text": "Hello there friend.", "signature": SIG}
    )
    first = _request("hi", reasoning="medium")
    response = await _answer(provider, first, streaming)

    assert response.text == "Hello there friend."
    assert response.parts == (
        ThinkingPart(text="The user says hi.", vendor="gemini"),
        TextPart(text="Hello there friend."),
        ThinkingPart(signature=SIG, vendor="gemini"),
    )

    follow_up = first.model_copy(
        update={"messages": (*first.messages, response.as_message(), Message.user("again"))}
    )
    await provider.complete(follow_up)
    # the thought goes back as a thought, the signature on the text part it came with
    thought, text = server.requests[1].body["contents"][1]["parts"]
    assert thought == {"text": "The user says hi.", "thought": True}
    assert text["text"] == "Hello there friend."
    assert base64.urlsafe_b64decode(text["thoughtSignature"]) == base64.b64decode(SIG)


async def test_other_vendors_thinking_is_not_sent(
    provider: GeminiProvider, server: GeminiServer
) -> None:
    turn = Message(
        role="assistant",
        parts=(
            ThinkingPart(text="claude thought", signature="sig-A", vendor="anthropic"),
            TextPart(text="earlier answer"),
            ThinkingPart(signature="c2ln", vendor="anthropic"),
        ),
    )
    await provider.complete(
        LLMRequest(model=MODEL, messages=(Message.user("a"), turn, Message.user("b")))
    )
    assert server.requests[0].body["contents"][1]["parts"] == [{"text": "earlier answer"}]


@pytest.mark.parametrize("streaming", [False, True])
async def test_structured_output_sets_json_mime_type_and_schema(
    provider: GeminiProvider, server: GeminiServer, streaming: bool
) -> None:
    answer = '{"answer": "a group of singers", "score": 9}'
    server.replies.append(answer)
    response = await _answer(provider, _request("define chorus", response_schema=SCHEMA), streaming)
    assert response.text == answer
    config = server.requests[0].body["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"] == SCHEMA  # full JSON Schema, passed unchanged
    assert "responseSchema" not in config
