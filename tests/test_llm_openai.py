"""OpenAIProvider through the real ``openai`` SDK against the loopback Chat Completions API."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Literal

import httpx2
import openai
import pytest

from bot.config import ConfigError, Settings
from bot.llm import guard
from bot.llm.errors import (
    ProviderAuthError,
    ProviderRequestError,
    ProviderUnavailable,
    RealVendorCallBlocked,
)
from bot.llm.openai import (
    NO_KEY_PLACEHOLDER,
    REASONING_HEADROOM,
    REASONING_MODELS,
    OpenAIProvider,
)
from bot.llm.types import (
    CachePoint,
    ImagePart,
    LLMRequest,
    LLMResponse,
    Message,
    StreamEvent,
    TextDelta,
    TextPart,
    ToolResultPart,
    ToolSpec,
    Usage,
)
from bot.resilience import RetryPolicy
from tests.loopback.openai_server import CREATED, OpenAIServer

MODEL = "gpt-test"
RETRY = RetryPolicy(max_retries=2, base_delay=0.01)
TOOL = ToolSpec(
    name="lookup",
    description="Look a word up.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
)


class RecordingSleep:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


@pytest.fixture
async def server() -> AsyncIterator[OpenAIServer]:
    srv = OpenAIServer()
    await srv.start()
    yield srv
    await srv.close()


@pytest.fixture
def sleep() -> RecordingSleep:
    return RecordingSleep()


@pytest.fixture
async def provider(server: OpenAIServer, sleep: RecordingSleep) -> AsyncIterator[OpenAIProvider]:
    # Strict validation: the SDK rejects any answer of the loopback server that is off-schema.
    client = openai.AsyncOpenAI(
        api_key="test-key",
        base_url=server.base_url,
        max_retries=0,
        _strict_response_validation=True,
    )
    yield OpenAIProvider(client, base_url=server.base_url, retry=RETRY, sleep=sleep)
    await client.close()


def ask(text: str = "hi", **kwargs: object) -> LLMRequest:
    return LLMRequest(model=MODEL, messages=(Message.user(text),), **kwargs)  # type: ignore[arg-type]


async def collect(provider: OpenAIProvider, request: LLMRequest) -> tuple[list[str], LLMResponse]:
    events: list[StreamEvent] = [event async for event in provider.stream(request)]
    *deltas, final = events
    assert all(isinstance(d, TextDelta) for d in deltas)
    assert isinstance(final, LLMResponse)
    return [d.text for d in deltas if isinstance(d, TextDelta)], final


# -- answers ---------------------------------------------------------------------------------
async def test_complete_returns_text_and_sends_a_chat_completion(
    provider: OpenAIProvider, server: OpenAIServer
) -> None:
    server.replies.append("Hello there")
    response = await provider.complete(ask("hi"))

    assert response.text == "Hello there"
    assert response.stop_reason == "end_turn"
    assert response.raw_stop_reason == "stop"
    assert response.model == MODEL
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    (rec,) = server.requests
    assert rec.path == "/v1/chat/completions"
    assert rec.headers["authorization"] == "Bearer test-key"
    # A local server (anything but OpenAI's hosts) gets the classic max_tokens.
    assert rec.body == {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 1024,
    }


async def test_stream_deltas_concatenate_to_the_final_text_with_usage(
    provider: OpenAIProvider, server: OpenAIServer
) -> None:
    server.replies.append("one two three four")
    deltas, final = await collect(provider, ask())

    assert len(deltas) == 4
    assert "".join(deltas) == final.text == "one two three four"
    assert final.stop_reason == "end_turn"
    assert final.usage.input_tokens > 0
    assert final.usage.output_tokens == len("one two three four") // 4
    body = server.bodies[0]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("streaming", [False, True])
async def test_usage_subtracts_cached_tokens_from_the_prompt(
    provider: OpenAIProvider, server: OpenAIServer, streaming: bool
) -> None:
    # the server reports prompt_tokens = 5 + 900 and cached_tokens = 900
    server.replies.append(
        {
            "text": "cached",
            "usage": {"input_tokens": 5, "output_tokens": 7, "cache_read_tokens": 900},
        }
    )
    if streaming:
        _, response = await collect(provider, ask())
    else:
        response = await provider.complete(ask())
    assert response.usage == Usage(input_tokens=5, output_tokens=7, cache_read_tokens=900)
    assert response.usage.total_input_tokens == 905


@pytest.mark.parametrize(
    ("reply", "expected", "raw"),
    [
        ({"text": "cut", "stop": "max_tokens"}, "max_tokens", "length"),
        ({"text": "", "stop": "refusal"}, "refusal", "content_filter"),
        ({"refusal": "I can't help with that."}, "refusal", "stop"),
    ],
)
@pytest.mark.parametrize("streaming", [False, True])
async def test_stop_reasons_are_normalised(
    provider: OpenAIProvider,
    server: OpenAIServer,
    reply: dict[str, object],
    expected: str,
    raw: str,
    streaming: bool,
) -> None:
    server.replies.append(reply)
    if streaming:
        _, response = await collect(provider, ask())
    else:
        response = await provider.complete(ask())
    assert response.stop_reason == expected
    assert response.raw_stop_reason == raw
    if "refusal" in reply:
        assert response.text == reply["refusal"]  # the user sees why


# -- request mapping -------------------------------------------------------------------------
async def test_system_multi_turn_cache_key_and_temperature(
    provider: OpenAIProvider, server: OpenAIServer
) -> None:
    request = LLMRequest(
        model=MODEL,
        system=(TextPart(text="You are Chorus."), CachePoint(), TextPart(text="Be brief.")),
        messages=(
            Message.user("first"),
            Message.assistant("answer"),
            Message(role="user", parts=(TextPart(text="second"), CachePoint())),
        ),
        temperature=0.3,
        max_tokens=50,
        cache_key="discord:guild:channel",
    )
    await provider.complete(request)
    body = server.bodies[0]
    assert body["messages"] == [
        {"role": "system", "content": "You are Chorus.\n\nBe brief."},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "answer"},
        {"role": "user", "content": "second"},
    ]
    assert body["prompt_cache_key"] == "discord:guild:channel"
    assert body["temperature"] == 0.3
    assert body["max_tokens"] == 50
    assert "max_completion_tokens" not in body


async def test_no_cache_key_no_prompt_cache_key(
    provider: OpenAIProvider, server: OpenAIServer
) -> None:
    await provider.complete(ask())
    assert "prompt_cache_key" not in server.bodies[0]
    assert "temperature" not in server.bodies[0]


async def test_tool_call_and_result_round_trip(
    provider: OpenAIProvider, server: OpenAIServer
) -> None:
    server.replies.append(
        {
            "text": "Let me look.",
            "tool_calls": [{"id": "call_01", "name": "lookup", "arguments": {"q": "chorus"}}],
        }
    )
    first = ask("define chorus", tools=(TOOL,))
    response = await provider.complete(first)
    assert response.stop_reason == "tool_use"
    assert response.raw_stop_reason == "tool_calls"
    (call,) = response.tool_calls
    assert (call.id, call.name, call.arguments) == ("call_01", "lookup", {"q": "chorus"})
    assert server.bodies[0]["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": "Look a word up.",
                "parameters": TOOL.parameters,
            },
        }
    ]

    server.replies.append("A group singing together.")
    result = Message(
        role="user",
        parts=(
            ToolResultPart(call_id="call_01", name="lookup", content="a group of singers"),
            ToolResultPart(call_id="call_02", name="lookup", content="no such word", is_error=True),
            TextPart(text="thanks"),
        ),
    )
    second = first.model_copy(update={"messages": (*first.messages, response.as_message(), result)})
    final = await provider.complete(second)
    assert final.text == "A group singing together."
    messages = server.bodies[1]["messages"]
    assert messages[1] == {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [
            {
                "id": "call_01",
                "type": "function",
                "function": {"name": "lookup", "arguments": json.dumps({"q": "chorus"})},
            }
        ],
    }
    # tool results first, right after the tool_calls; the error is flagged in the text
    assert messages[2:] == [
        {"role": "tool", "tool_call_id": "call_01", "content": "a group of singers"},
        {"role": "tool", "tool_call_id": "call_02", "content": "ERROR: no such word"},
        {"role": "user", "content": "thanks"},
    ]


async def test_assistant_turn_with_only_tool_calls_has_null_content(
    provider: OpenAIProvider, server: OpenAIServer
) -> None:
    server.replies.append({"tool_calls": [{"id": "call_7", "name": "lookup", "arguments": {}}]})
    response = await provider.complete(ask(tools=(TOOL,)))
    await provider.complete(
        ask().model_copy(update={"messages": (Message.user("hi"), response.as_message())})
    )
    assistant = server.bodies[1]["messages"][1]
    assert assistant["content"] is None
    assert assistant["tool_calls"][0]["function"] == {"name": "lookup", "arguments": "{}"}


@pytest.mark.parametrize("streaming", [False, True])
async def test_invalid_tool_arguments_are_kept_raw(
    provider: OpenAIProvider, server: OpenAIServer, streaming: bool
) -> None:
    server.replies.append(
        {"tool_calls": [{"id": "call_x", "name": "lookup", "arguments": '{"q": '}]}
    )
    if streaming:
        _, response = await collect(provider, ask(tools=(TOOL,)))
    else:
        response = await provider.complete(ask(tools=(TOOL,)))
    (call,) = response.tool_calls
    assert call.arguments == {"_raw": '{"q": '}


async def test_streamed_tool_calls_are_accumulated_by_index(
    provider: OpenAIProvider, server: OpenAIServer
) -> None:
    server.replies.append(
        {
            "text": "Checking both.",
            "tool_calls": [
                {"id": "call_a", "name": "lookup", "arguments": {"q": "chorus", "limit": 3}},
                {"id": "call_b", "name": "lookup", "arguments": {"q": "verse"}},
            ],
        }
    )
    deltas, final = await collect(provider, ask(tools=(TOOL,)))
    assert "".join(deltas) == final.text == "Checking both."
    assert final.stop_reason == "tool_use"
    assert [(c.id, c.arguments) for c in final.tool_calls] == [
        ("call_a", {"q": "chorus", "limit": 3}),
        ("call_b", {"q": "verse"}),
    ]


async def test_images_become_image_url_parts(
    provider: OpenAIProvider, server: OpenAIServer
) -> None:
    png = b"\x89PNG\r\n\x1a\nfake"
    message = Message(
        role="user",
        parts=(
            TextPart(text="what is this?"),
            ImagePart(mime="image/png", data=png),
            ImagePart(mime="image/jpeg", url="https://example.com/cat.jpg"),
        ),
    )
    await provider.complete(LLMRequest(model=MODEL, messages=(message,)))
    assert server.bodies[0]["messages"][0] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is this?"},
            {
                "type": "image_url",
                "image_url": {"url": f"data:image/png;base64,{base64.b64encode(png).decode()}"},
            },
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
        ],
    }


# -- errors and retries ------------------------------------------------------------------
async def test_429_honours_retry_after_and_repeats_the_request(
    provider: OpenAIProvider, server: OpenAIServer, sleep: RecordingSleep
) -> None:
    server.fail(429, "Rate limit reached", headers={"Retry-After": "7"})
    response = await provider.complete(ask())
    assert response.text == "ok"
    assert sleep.delays == [7.0]
    assert len(server.requests) == 2
    assert server.bodies[0] == server.bodies[1]


async def test_retry_after_ms_is_preferred(
    provider: OpenAIProvider, server: OpenAIServer, sleep: RecordingSleep
) -> None:
    server.fail(429, headers={"retry-after-ms": "2500", "retry-after": "9"})
    await provider.complete(ask())
    assert sleep.delays == [2.5]


@pytest.mark.parametrize("status", [401, 403])
async def test_auth_failures_name_the_key_variable_and_are_not_retried(
    provider: OpenAIProvider, server: OpenAIServer, sleep: RecordingSleep, status: int
) -> None:
    server.fail(status, "Incorrect API key provided")
    with pytest.raises(ProviderAuthError) as info:
        await provider.complete(ask())
    assert "OPENAI_API_KEY" in str(info.value)
    assert info.value.status == status
    assert len(server.requests) == 1
    assert sleep.delays == []


async def test_500_is_retried_max_retries_times_then_unavailable(
    provider: OpenAIProvider, server: OpenAIServer, sleep: RecordingSleep
) -> None:
    for _ in range(RETRY.max_retries + 1):
        server.fail(500, "The server had an error")
    with pytest.raises(ProviderUnavailable) as info:
        await provider.complete(ask())
    assert len(server.requests) == RETRY.max_retries + 1
    assert info.value.attempts == RETRY.max_retries + 1
    assert info.value.status == 500
    assert len(sleep.delays) == RETRY.max_retries


async def test_400_is_a_request_error_and_not_retried(
    provider: OpenAIProvider, server: OpenAIServer, sleep: RecordingSleep
) -> None:
    server.fail(400, "Invalid value for 'max_tokens'")
    with pytest.raises(ProviderRequestError) as info:
        await provider.complete(ask())
    assert "Invalid value for 'max_tokens'" in str(info.value)
    assert info.value.status == 400
    assert len(server.requests) == 1
    assert sleep.delays == []


async def test_stream_retried_after_a_503_before_the_first_byte(
    provider: OpenAIProvider, server: OpenAIServer, sleep: RecordingSleep
) -> None:
    server.fail(503, "overloaded")
    server.replies.append("recovered fine")
    deltas, final = await collect(provider, ask())
    assert "".join(deltas) == final.text == "recovered fine"
    assert len(server.requests) == 2
    assert len(sleep.delays) == 1


async def test_stream_error_before_any_text_is_retried(
    provider: OpenAIProvider, server: OpenAIServer
) -> None:
    server.replies.append({"text": "", "stream_error": {"type": "server_error", "message": "boom"}})
    server.replies.append("second try")
    _, final = await collect(provider, ask())
    assert final.text == "second try"
    assert len(server.requests) == 2


async def test_stream_error_after_text_raises(
    provider: OpenAIProvider, server: OpenAIServer
) -> None:
    server.replies.append(
        {"text": "half an", "stream_error": {"type": "server_error", "message": "boom"}}
    )
    seen: list[str] = []
    with pytest.raises(ProviderUnavailable, match="boom"):
        async for event in provider.stream(ask()):
            if isinstance(event, TextDelta):
                seen.append(event.text)
    assert "".join(seen) == "half an"
    assert len(server.requests) == 1


async def test_a_stream_cut_before_any_text_is_retried(
    provider: OpenAIProvider, server: OpenAIServer
) -> None:
    server.replies.append({"text": "", "stream_cut": True})
    server.replies.append("second try")
    _, final = await collect(provider, ask())
    assert final.text == "second try"
    assert len(server.requests) == 2


async def test_a_stream_cut_after_text_raises_instead_of_a_truncated_answer(
    provider: OpenAIProvider, server: OpenAIServer
) -> None:
    server.replies.append({"text": "half an answer", "stream_cut": True})
    with pytest.raises(ProviderUnavailable, match="ended"):
        await collect(provider, ask())
    assert len(server.requests) == 1


# -- hosts, guard and settings -----------------------------------------------------------
@pytest.fixture
def blocked() -> Iterator[None]:
    was_blocked = guard.real_calls_blocked()
    guard.block_real_calls()
    yield None
    if not was_blocked:
        guard.allow_real_calls()


@pytest.fixture
def allowed() -> Iterator[None]:
    was_blocked = guard.real_calls_blocked()
    guard.allow_real_calls()
    yield None
    if was_blocked:
        guard.block_real_calls()


def mock_client(base_url: str, sent: list[httpx2.Request]) -> openai.AsyncOpenAI:
    """A client whose transport answers in-process: nothing leaves the machine."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        sent.append(request)
        return httpx2.Response(
            200,
            json={
                "id": "chatcmpl-mock",
                "object": "chat.completion",
                "created": CREATED,
                "model": MODEL,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "mocked", "refusal": None},
                        "logprobs": None,
                        "finish_reason": "stop",
                    }
                ],
            },
        )

    return openai.AsyncOpenAI(
        api_key="k",
        base_url=base_url,
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)),
    )


async def test_openai_hosts_get_max_completion_tokens(allowed: None) -> None:
    sent: list[httpx2.Request] = []
    client = mock_client("https://api.openai.com/v1", sent)
    provider = OpenAIProvider(client, base_url=None)
    try:
        response = await provider.complete(ask(max_tokens=77))
    finally:
        await client.close()
    assert response.text == "mocked"
    assert response.usage == Usage()  # no usage in the answer: zeros, not a crash
    body = json.loads(sent[0].content)
    assert body["max_completion_tokens"] == 77
    assert "max_tokens" not in body


async def test_guard_blocks_the_real_api_without_a_network_call(blocked: None) -> None:
    sent: list[httpx2.Request] = []
    client = mock_client("https://api.openai.com/v1", sent)
    provider = OpenAIProvider(client, base_url=None)  # None: the guard reads the client's URL
    try:
        with pytest.raises(RealVendorCallBlocked):
            await provider.complete(ask())
        with pytest.raises(RealVendorCallBlocked):
            await collect(provider, ask())
    finally:
        await client.close()
    assert sent == []


async def test_from_settings_with_a_base_url_needs_no_key(
    server: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        OPENAI_BASE_URL=server.base_url,
        CHORUS_LLM_MAX_RETRIES=1,
    )
    assert settings.api_key("openai") is None
    provider = OpenAIProvider.from_settings(settings)
    assert provider.retry.max_retries == 1
    assert provider.client.max_retries == 0
    response = await provider.complete(ask())
    assert response.text == "ok"
    assert server.requests[0].headers["authorization"] == f"Bearer {NO_KEY_PLACEHOLDER}"
    await provider.aclose()
    assert provider.client.is_closed()


async def test_from_settings_key_wins_over_the_environment(
    server: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        OPENAI_API_KEY="settings-key",
        OPENAI_BASE_URL=server.base_url,
    )
    provider = OpenAIProvider.from_settings(settings)
    try:
        await provider.complete(ask())
    finally:
        await provider.aclose()
    assert server.requests[0].headers["authorization"] == "Bearer settings-key"


def test_from_settings_without_key_or_base_url_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        OpenAIProvider.from_settings(Settings(_env_file=None))  # type: ignore[call-arg]


async def test_aclose_leaves_an_injected_client_open(provider: OpenAIProvider) -> None:
    await provider.aclose()
    assert not provider.client.is_closed()
    assert (await provider.complete(ask())).text == "ok"


# -- reasoning and structured output ---------------------------------------------------------
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "score": {"type": "integer"}},
    "required": ["answer"],
}


def with_client(
    server: OpenAIServer, reasoning_models: str | None = None
) -> tuple[openai.AsyncOpenAI, OpenAIProvider]:
    client = openai.AsyncOpenAI(api_key="k", base_url=server.base_url, max_retries=0)
    provider = OpenAIProvider(
        client, base_url=server.base_url, retry=RETRY, reasoning_models=reasoning_models
    )
    return client, provider


@pytest.mark.parametrize(
    ("name", "reasons"),
    [
        ("o1", True),
        ("o3", True),
        ("o3-mini", True),
        ("o4-mini", True),
        ("gpt-5", True),
        ("gpt-5-mini", True),
        ("gpt-5.1", True),
        ("openai/gpt-5-nano", True),
        ("gpt-5-chat-latest", False),
        ("gpt-4.1", False),
        ("gpt-4o", False),
        ("gpt-50", False),
        ("llama3.1:8b", False),
    ],
)
def test_reasoning_models_are_recognised_by_name(name: str, reasons: bool) -> None:
    assert bool(REASONING_MODELS.search(name)) is reasons


@pytest.mark.parametrize("model", ["o3", "o4-mini", "gpt-5", "gpt-5.1-mini"])
@pytest.mark.parametrize("level", ["low", "medium", "high"])
async def test_reasoning_effort_goes_to_reasoning_models_with_output_headroom(
    provider: OpenAIProvider,
    server: OpenAIServer,
    model: str,
    level: Literal["low", "medium", "high"],
) -> None:
    request = LLMRequest(
        model=model,
        messages=(Message.user("think"),),
        reasoning=level,
        max_tokens=500,
        temperature=0.3,  # refused by reasoning models (the loopback API checks): not sent
    )
    response = await provider.complete(request)
    assert response.text == "ok"
    body = server.bodies[0]
    assert body["reasoning_effort"] == level
    assert body["max_tokens"] == 500 + REASONING_HEADROOM[level]
    assert REASONING_HEADROOM == {"low": 1024, "medium": 4096, "high": 16384}
    assert "temperature" not in body


async def test_reasoning_off_on_a_reasoning_model_sends_no_effort(
    provider: OpenAIProvider, server: OpenAIServer
) -> None:
    request = LLMRequest(model="o3", messages=(Message.user("hi"),), max_tokens=500)
    await provider.complete(request)
    body = server.bodies[0]
    assert "reasoning_effort" not in body
    assert body["max_tokens"] == 500


@pytest.mark.parametrize("model", ["gpt-4.1", "gpt-test", "llama3.1:8b"])
async def test_reasoning_effort_is_omitted_for_other_models_and_logged_once(
    provider: OpenAIProvider,
    server: OpenAIServer,
    caplog: pytest.LogCaptureFixture,
    model: str,
) -> None:
    caplog.set_level(logging.DEBUG, logger="chorus.llm.openai")
    request = LLMRequest(
        model=model,
        messages=(Message.user("hi"),),
        reasoning="high",
        max_tokens=500,
        temperature=0.3,
    )
    await provider.complete(request)
    await provider.complete(request)
    for body in server.bodies:
        assert "reasoning_effort" not in body
        assert (body["max_tokens"], body["temperature"]) == (500, 0.3)
    notes = [r for r in caplog.records if "reasoning_effort" in r.getMessage()]
    assert len(notes) == 1 and model in notes[0].getMessage()


async def test_the_reasoning_model_pattern_is_configurable(server: OpenAIServer) -> None:
    request = LLMRequest(model="o9-local", messages=(Message.user("hi"),), reasoning="low")
    client, default = with_client(server)
    _, custom = with_client(server, reasoning_models=r"^o9-")
    try:
        await default.complete(request)
        await custom.complete(request)
    finally:
        await client.close()
        await custom.client.close()
    assert "reasoning_effort" not in server.bodies[0]
    assert server.bodies[1]["reasoning_effort"] == "low"


async def test_the_loopback_api_refuses_reasoning_effort_for_a_non_reasoning_model(
    server: OpenAIServer,
) -> None:
    """What the omission above protects against (so that test means something)."""
    client, provider = with_client(server, reasoning_models=r".")
    request = LLMRequest(model="gpt-4.1", messages=(Message.user("hi"),), reasoning="low")
    try:
        with pytest.raises(ProviderRequestError, match="reasoning_effort") as info:
            await provider.complete(request)
    finally:
        await client.close()
    assert info.value.status == 400


@pytest.mark.parametrize("streaming", [False, True])
async def test_reasoning_tokens_are_already_part_of_output_tokens(
    provider: OpenAIProvider, server: OpenAIServer, streaming: bool
) -> None:
    server.replies.append(
        {"text": "42", "usage": {"input_tokens": 10, "output_tokens": 2, "reasoning_tokens": 300}}
    )
    request = LLMRequest(model="o3", messages=(Message.user("q"),), reasoning="medium")
    response = (
        (await collect(provider, request))[1] if streaming else (await provider.complete(request))
    )
    assert response.text == "42"
    assert response.usage == Usage(input_tokens=10, output_tokens=302)


@pytest.mark.parametrize("streaming", [False, True])
async def test_structured_output_sends_a_json_schema_response_format(
    provider: OpenAIProvider, server: OpenAIServer, streaming: bool
) -> None:
    answer = '{"answer": "a group of singers", "score": 9}'
    server.replies.append(answer)
    request = ask("define chorus", response_schema=SCHEMA)
    response = (
        (await collect(provider, request))[1] if streaming else (await provider.complete(request))
    )
    assert response.text == answer
    assert json.loads(response.text) == {"answer": "a group of singers", "score": 9}
    assert server.bodies[0]["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "response", "schema": SCHEMA, "strict": False},
    }


async def test_no_schema_no_response_format(provider: OpenAIProvider, server: OpenAIServer) -> None:
    await provider.complete(ask())
    assert "response_format" not in server.bodies[0]
    assert "reasoning_effort" not in server.bodies[0]
