"""AnthropicProvider through the real ``anthropic`` SDK against the loopback Messages API."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator
from typing import Literal

import anthropic
import httpx2
import pytest

from bot.config import ConfigError, Settings
from bot.llm import guard
from bot.llm.anthropic import MAX_CACHE_MARKERS, THINKING_BUDGETS, AnthropicProvider
from bot.llm.errors import (
    ProviderAuthError,
    ProviderRequestError,
    ProviderUnavailable,
    RealVendorCallBlocked,
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
    ThinkingPart,
    ToolResultPart,
    ToolSpec,
    Usage,
)
from bot.resilience import RetryPolicy
from tests.loopback.anthropic_server import AnthropicServer

MODEL = "claude-test"
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
async def server() -> AsyncIterator[AnthropicServer]:
    srv = AnthropicServer()
    await srv.start()
    yield srv
    await srv.close()


@pytest.fixture
def sleep() -> RecordingSleep:
    return RecordingSleep()


@pytest.fixture
async def provider(
    server: AnthropicServer, sleep: RecordingSleep
) -> AsyncIterator[AnthropicProvider]:
    # Strict validation: the SDK rejects any answer of the loopback server that is off-schema.
    client = anthropic.AsyncAnthropic(
        api_key="test-key",
        base_url=server.base_url,
        max_retries=0,
        _strict_response_validation=True,
    )
    yield AnthropicProvider(client, base_url=server.base_url, retry=RETRY, sleep=sleep)
    await client.close()


def ask(text: str = "hi", **kwargs: object) -> LLMRequest:
    return LLMRequest(model=MODEL, messages=(Message.user(text),), **kwargs)  # type: ignore[arg-type]


async def collect(
    provider: AnthropicProvider, request: LLMRequest
) -> tuple[list[str], LLMResponse]:
    events: list[StreamEvent] = [event async for event in provider.stream(request)]
    *deltas, final = events
    assert all(isinstance(d, TextDelta) for d in deltas)
    assert isinstance(final, LLMResponse)
    return [d.text for d in deltas if isinstance(d, TextDelta)], final


# -- answers ---------------------------------------------------------------------------------
async def test_complete_returns_text_and_sends_a_messages_request(
    provider: AnthropicProvider, server: AnthropicServer
) -> None:
    server.replies.append("Hello there")
    response = await provider.complete(ask("hi"))

    assert response.text == "Hello there"
    assert response.stop_reason == "end_turn"
    assert response.raw_stop_reason == "end_turn"
    assert response.model == MODEL
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    (rec,) = server.requests
    assert rec.path == "/v1/messages"
    assert rec.headers["authorization"] == "Bearer test-key"  # SDK 2.x sends keys as Bearer
    assert "anthropic-version" in rec.headers
    assert rec.body == {
        "model": MODEL,
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }


async def test_stream_deltas_concatenate_to_the_final_text_with_usage(
    provider: AnthropicProvider, server: AnthropicServer
) -> None:
    server.replies.append("one two three four")
    deltas, final = await collect(provider, ask())

    assert len(deltas) == 4
    assert "".join(deltas) == final.text == "one two three four"
    assert final.stop_reason == "end_turn"
    # input comes from message_start, output from message_delta
    assert final.usage.input_tokens > 0
    assert final.usage.output_tokens == len("one two three four") // 4
    assert server.bodies[0]["stream"] is True


@pytest.mark.parametrize("streaming", [False, True])
async def test_usage_maps_cache_write_and_read_tokens(
    provider: AnthropicProvider, server: AnthropicServer, streaming: bool
) -> None:
    server.replies.append(
        {
            "text": "cached",
            "usage": {
                "input_tokens": 5,
                "output_tokens": 7,
                "cache_write_tokens": 100,
                "cache_read_tokens": 900,
            },
        }
    )
    if streaming:
        _, response = await collect(provider, ask())
    else:
        response = await provider.complete(ask())
    assert response.usage == Usage(
        input_tokens=5, output_tokens=7, cache_write_tokens=100, cache_read_tokens=900
    )
    assert response.usage.cache_read_share == 900 / 1005


@pytest.mark.parametrize(
    ("stop", "expected"),
    [
        ("max_tokens", "max_tokens"),
        ("refusal", "refusal"),
        ("stop_sequence", "stop_sequence"),
        ("pause_turn", "other"),
    ],
)
async def test_stop_reasons_are_normalised(
    provider: AnthropicProvider, server: AnthropicServer, stop: str, expected: str
) -> None:
    server.replies.append({"text": "partial", "stop": stop})
    response = await provider.complete(ask())
    assert response.stop_reason == expected
    assert response.raw_stop_reason == stop


# -- request mapping -------------------------------------------------------------------------
async def test_system_multi_turn_and_same_role_merging(
    provider: AnthropicProvider, server: AnthropicServer
) -> None:
    request = LLMRequest(
        model=MODEL,
        system=(TextPart(text="You are Chorus."), TextPart(text="Be brief.")),
        messages=(
            Message.user("first"),
            Message.assistant("answer"),
            Message.user("second"),
            Message.user("third"),
        ),
        temperature=0.3,
        max_tokens=50,
    )
    await provider.complete(request)
    body = server.bodies[0]
    assert body["system"] == [
        {"type": "text", "text": "You are Chorus."},
        {"type": "text", "text": "Be brief."},
    ]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "first"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "answer"}]},
        {
            "role": "user",
            "content": [{"type": "text", "text": "second"}, {"type": "text", "text": "third"}],
        },
    ]
    assert body["temperature"] == 0.3
    assert body["max_tokens"] == 50


async def test_tool_call_and_result_round_trip(
    provider: AnthropicProvider, server: AnthropicServer
) -> None:
    server.replies.append(
        {
            "text": "Let me look.",
            "tool_calls": [{"id": "toolu_01", "name": "lookup", "arguments": {"q": "chorus"}}],
        }
    )
    first = ask("define chorus", tools=(TOOL,))
    response = await provider.complete(first)
    assert response.stop_reason == "tool_use"
    (call,) = response.tool_calls
    assert (call.id, call.name, call.arguments) == ("toolu_01", "lookup", {"q": "chorus"})
    assert server.bodies[0]["tools"] == [
        {"name": "lookup", "description": "Look a word up.", "input_schema": TOOL.parameters}
    ]

    server.replies.append("A group singing together.")
    result = Message(
        role="user",
        parts=(
            ToolResultPart(call_id="toolu_01", name="lookup", content="a group of singers"),
            ToolResultPart(
                call_id="toolu_02", name="lookup", content="no such word", is_error=True
            ),
        ),
    )
    second = first.model_copy(update={"messages": (*first.messages, response.as_message(), result)})
    final = await provider.complete(second)
    assert final.text == "A group singing together."
    messages = server.bodies[1]["messages"]
    assert messages[1] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_01", "name": "lookup", "input": {"q": "chorus"}},
        ],
    }
    assert messages[2] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01",
                "content": "a group of singers",
                "is_error": False,
            },
            {
                "type": "tool_result",
                "tool_use_id": "toolu_02",
                "content": "no such word",
                "is_error": True,
            },
        ],
    }


async def test_streamed_tool_call_input_is_accumulated(
    provider: AnthropicProvider, server: AnthropicServer
) -> None:
    arguments = {"q": "chorus", "limit": 3, "tags": ["a", "b"]}
    server.replies.append(
        {"tool_calls": [{"id": "toolu_9", "name": "lookup", "arguments": arguments}]}
    )
    deltas, final = await collect(provider, ask(tools=(TOOL,)))
    assert deltas == []
    assert final.stop_reason == "tool_use"
    (call,) = final.tool_calls
    assert (call.id, call.arguments) == ("toolu_9", arguments)


async def test_images_map_to_base64_and_url_sources(
    provider: AnthropicProvider, server: AnthropicServer
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
    content = server.bodies[0]["messages"][0]["content"]
    assert content[1] == {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": "image/png",
            "data": base64.b64encode(png).decode(),
        },
    }
    assert content[2] == {
        "type": "image",
        "source": {"type": "url", "url": "https://example.com/cat.jpg"},
    }


def cache_marked(body: dict[str, object]) -> list[str]:
    """Where cache_control landed, as tool names / block texts, in prompt order."""
    found: list[str] = []
    for tool in body.get("tools", []):  # type: ignore[attr-defined]
        if "cache_control" in tool:
            found.append(f"tool:{tool['name']}")
    for block in body.get("system", []):  # type: ignore[attr-defined]
        if "cache_control" in block:
            assert block["cache_control"] == {"type": "ephemeral"}
            found.append(f"system:{block['text']}")
    for message in body["messages"]:  # type: ignore[attr-defined]
        for block in message["content"]:
            if "cache_control" in block:
                assert block["cache_control"] == {"type": "ephemeral"}
                found.append(f"{message['role']}:{block.get('text', block['type'])}")
    return found


async def test_cache_points_mark_the_preceding_block(
    provider: AnthropicProvider, server: AnthropicServer
) -> None:
    request = LLMRequest(
        model=MODEL,
        tools=(TOOL,),
        cache_tools=True,
        system=(TextPart(text="static"), CachePoint(), TextPart(text="volatile")),
        messages=(
            Message(role="user", parts=(TextPart(text="old"), CachePoint())),
            Message.assistant("reply"),
            Message(role="user", parts=(TextPart(text="new"),)),
        ),
    )
    await provider.complete(request)
    body = server.bodies[0]
    assert cache_marked(body) == ["tool:lookup", "system:static", "user:old"]
    assert "cache_control" not in body["system"][1]


async def test_a_cache_point_at_the_start_of_a_message_marks_the_previous_block(
    provider: AnthropicProvider, server: AnthropicServer
) -> None:
    request = LLMRequest(
        model=MODEL,
        system=(TextPart(text="static"),),
        messages=(Message(role="user", parts=(CachePoint(), TextPart(text="hi"))),),
    )
    await provider.complete(request)
    assert cache_marked(server.bodies[0]) == ["system:static"]


async def test_at_most_four_cache_markers_keeping_the_last_four(
    provider: AnthropicProvider, server: AnthropicServer
) -> None:
    roles: list[Literal["user", "assistant"]] = ["user", "assistant", "user", "assistant", "user"]
    turns = [
        Message(role=role, parts=(TextPart(text=f"t{i}"), CachePoint()))
        for i, role in enumerate(roles)
    ]
    request = LLMRequest(
        model=MODEL,
        tools=(TOOL,),
        cache_tools=True,
        system=(TextPart(text="static"), CachePoint()),
        messages=tuple(turns),
    )
    await provider.complete(request)
    marked = cache_marked(server.bodies[0])
    assert len(marked) == MAX_CACHE_MARKERS == 4
    assert marked == ["assistant:t1", "user:t2", "assistant:t3", "user:t4"]


# -- errors and retries ------------------------------------------------------------------
async def test_429_honours_retry_after_and_repeats_the_request(
    provider: AnthropicProvider, server: AnthropicServer, sleep: RecordingSleep
) -> None:
    server.fail(429, "slow down", headers={"Retry-After": "7"})
    response = await provider.complete(ask())
    assert response.text == "ok"
    assert sleep.delays == [7.0]
    assert len(server.requests) == 2
    assert server.bodies[0] == server.bodies[1]


async def test_retry_after_ms_is_preferred(
    provider: AnthropicProvider, server: AnthropicServer, sleep: RecordingSleep
) -> None:
    server.fail(429, headers={"retry-after-ms": "2500", "retry-after": "9"})
    await provider.complete(ask())
    assert sleep.delays == [2.5]


@pytest.mark.parametrize("status", [401, 403])
async def test_auth_failures_name_the_key_variable_and_are_not_retried(
    provider: AnthropicProvider, server: AnthropicServer, sleep: RecordingSleep, status: int
) -> None:
    server.fail(status, "invalid x-api-key")
    with pytest.raises(ProviderAuthError) as info:
        await provider.complete(ask())
    assert "ANTHROPIC_API_KEY" in str(info.value)
    assert info.value.status == status
    assert len(server.requests) == 1
    assert sleep.delays == []


async def test_500_is_retried_max_retries_times_then_unavailable(
    provider: AnthropicProvider, server: AnthropicServer, sleep: RecordingSleep
) -> None:
    for _ in range(RETRY.max_retries + 1):
        server.fail(500, "internal")
    with pytest.raises(ProviderUnavailable) as info:
        await provider.complete(ask())
    assert len(server.requests) == RETRY.max_retries + 1
    assert info.value.attempts == RETRY.max_retries + 1
    assert info.value.status == 500
    assert len(sleep.delays) == RETRY.max_retries
    assert all(0 < d <= RETRY.max_delay for d in sleep.delays)


async def test_529_overloaded_is_retried(
    provider: AnthropicProvider, server: AnthropicServer, sleep: RecordingSleep
) -> None:
    server.fail(529, "Overloaded")
    response = await provider.complete(ask())
    assert response.text == "ok"
    assert len(server.requests) == 2
    assert len(sleep.delays) == 1


async def test_x_should_retry_false_stops_retries(
    provider: AnthropicProvider, server: AnthropicServer
) -> None:
    server.fail(500, "do not retry", headers={"x-should-retry": "false"})
    with pytest.raises(ProviderRequestError):
        await provider.complete(ask())
    assert len(server.requests) == 1


async def test_400_is_a_request_error_and_not_retried(
    provider: AnthropicProvider, server: AnthropicServer, sleep: RecordingSleep
) -> None:
    server.fail(400, "max_tokens: must be positive")
    with pytest.raises(ProviderRequestError) as info:
        await provider.complete(ask())
    assert "max_tokens: must be positive" in str(info.value)
    assert info.value.status == 400
    assert len(server.requests) == 1
    assert sleep.delays == []


async def test_connection_refused_is_retried_then_unavailable(sleep: RecordingSleep) -> None:
    srv = AnthropicServer()
    await srv.start()
    url = srv.base_url
    await srv.close()  # nothing listens there any more
    client = anthropic.AsyncAnthropic(api_key="k", base_url=url, max_retries=0)
    provider = AnthropicProvider(client, base_url=url, retry=RETRY, sleep=sleep)
    try:
        with pytest.raises(ProviderUnavailable) as info:
            await provider.complete(ask())
    finally:
        await client.close()
    assert info.value.status is None
    assert info.value.attempts == RETRY.max_retries + 1


async def test_stream_retried_after_a_503_before_the_first_byte(
    provider: AnthropicProvider, server: AnthropicServer, sleep: RecordingSleep
) -> None:
    server.fail(503, "unavailable")
    server.replies.append("recovered fine")
    deltas, final = await collect(provider, ask())
    assert "".join(deltas) == final.text == "recovered fine"
    assert len(server.requests) == 2
    assert len(sleep.delays) == 1


async def test_stream_error_event_before_any_text_is_retried(
    provider: AnthropicProvider, server: AnthropicServer
) -> None:
    server.replies.append(
        {"text": "", "stream_error": {"type": "overloaded_error", "message": "Overloaded"}}
    )
    server.replies.append("second try")
    deltas, final = await collect(provider, ask())
    assert final.text == "second try"
    assert len(server.requests) == 2


async def test_stream_error_event_after_text_raises(
    provider: AnthropicProvider, server: AnthropicServer
) -> None:
    server.replies.append(
        {"text": "half an", "stream_error": {"type": "overloaded_error", "message": "Overloaded"}}
    )
    seen: list[str] = []
    with pytest.raises(ProviderUnavailable, match="Overloaded"):
        async for event in provider.stream(ask()):
            if isinstance(event, TextDelta):
                seen.append(event.text)
    assert "".join(seen) == "half an"
    assert len(server.requests) == 1  # text already reached the caller: no silent retry


async def test_stream_non_retryable_error_event_is_a_request_error(
    provider: AnthropicProvider, server: AnthropicServer
) -> None:
    server.replies.append(
        {"text": "", "stream_error": {"type": "invalid_request_error", "message": "bad"}}
    )
    with pytest.raises(ProviderRequestError, match="bad"):
        await collect(provider, ask())
    assert len(server.requests) == 1


async def test_a_stream_cut_before_any_text_is_retried(
    provider: AnthropicProvider, server: AnthropicServer
) -> None:
    server.replies.append({"text": "", "stream_cut": True})
    server.replies.append("second try")
    _, final = await collect(provider, ask())
    assert final.text == "second try"
    assert len(server.requests) == 2


async def test_a_stream_cut_after_text_raises_instead_of_a_truncated_answer(
    provider: AnthropicProvider, server: AnthropicServer
) -> None:
    server.replies.append({"text": "half an answer", "stream_cut": True})
    with pytest.raises(ProviderUnavailable, match="ended"):
        await collect(provider, ask())
    assert len(server.requests) == 1


# -- guard and settings ------------------------------------------------------------------
@pytest.fixture
def blocked() -> Iterator[None]:
    was_blocked = guard.real_calls_blocked()
    guard.block_real_calls()
    yield None
    if not was_blocked:
        guard.allow_real_calls()


async def test_guard_blocks_the_real_api_without_a_network_call(blocked: None) -> None:
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
    provider = AnthropicProvider(client, base_url=None)  # None: the guard reads the client's URL
    try:
        with pytest.raises(RealVendorCallBlocked):
            await provider.complete(ask())
        with pytest.raises(RealVendorCallBlocked):
            await collect(provider, ask())
    finally:
        await client.close()
    assert sent == []


async def test_guard_allows_loopback(blocked: None, provider: AnthropicProvider) -> None:
    assert (await provider.complete(ask())).text == "ok"


async def test_from_settings_uses_settings_not_the_environment(
    server: AnthropicServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "env-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        ANTHROPIC_API_KEY="settings-key",
        ANTHROPIC_BASE_URL=server.base_url,
        CHORUS_LLM_MAX_RETRIES=3,
        CHORUS_LLM_TIMEOUT=5,
    )
    provider = AnthropicProvider.from_settings(settings)
    assert provider.retry.max_retries == 3
    assert provider.client.max_retries == 0  # our policy governs, not the SDK's
    response = await provider.complete(ask())
    assert response.text == "ok"
    assert server.requests[0].headers["authorization"] == "Bearer settings-key"
    await provider.aclose()
    assert provider.client.is_closed()


async def test_aclose_leaves_an_injected_client_open(provider: AnthropicProvider) -> None:
    await provider.aclose()
    assert not provider.client.is_closed()
    assert (await provider.complete(ask())).text == "ok"


def test_from_settings_without_a_key_names_the_variable() -> None:
    settings = Settings(_env_file=None, ANTHROPIC_API_KEY="")  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        AnthropicProvider.from_settings(settings)


# -- reasoning, thinking blocks and structured output ---------------------------------------
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "score": {"type": "integer", "minimum": 0}},
    "required": ["answer", "score"],
}


@pytest.mark.parametrize(("level", "budget"), [("low", 1024), ("medium", 4096), ("high", 16384)])
async def test_reasoning_levels_map_to_thinking_budgets_on_top_of_max_tokens(
    provider: AnthropicProvider,
    server: AnthropicServer,
    level: Literal["low", "medium", "high"],
    budget: int,
) -> None:
    # temperature is dropped: the (loopback) API refuses it with thinking, like the real one
    response = await provider.complete(
        ask(reasoning=level, max_tokens=500, temperature=0.3, tools=(TOOL,))
    )
    assert response.text == "ok"
    assert THINKING_BUDGETS[level] == budget
    body = server.bodies[0]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert body["max_tokens"] == 500 + budget
    assert "temperature" not in body


async def test_reasoning_off_sends_no_thinking_and_keeps_temperature(
    provider: AnthropicProvider, server: AnthropicServer
) -> None:
    await provider.complete(ask(max_tokens=500, temperature=0.3))
    body = server.bodies[0]
    assert "thinking" not in body
    assert (body["max_tokens"], body["temperature"]) == (500, 0.3)


@pytest.mark.parametrize("streaming", [False, True])
async def test_thinking_blocks_become_thinking_parts_and_never_text(
    provider: AnthropicProvider, server: AnthropicServer, streaming: bool
) -> None:
    server.replies.append(
        {"thinking": "The user greets me. I greet back.", "signature": "sig-A", "text": "Hi!"}
    )
    request = ask(reasoning="low")
    if streaming:
        deltas, response = await collect(provider, request)
        assert "".join(deltas) == "Hi!"  # the thinking was never streamed as text
    else:
        response = await provider.complete(request)
    assert response.parts == (
        ThinkingPart(
            text="The user greets me. I greet back.", signature="sig-A", vendor="anthropic"
        ),
        TextPart(text="Hi!"),
    )
    assert response.text == "Hi!"


@pytest.mark.parametrize("streaming", [False, True])
async def test_redacted_thinking_keeps_its_data_and_goes_back_unchanged(
    provider: AnthropicProvider, server: AnthropicServer, streaming: bool
) -> None:
    server.replies.append(
        {
            "redacted": "EmwKAhgBEgy3va3pzix/LafPsn4a",
            "tool_calls": [{"id": "toolu_r", "name": "lookup", "arguments": {"q": "x"}}],
        }
    )
    request = ask(reasoning="medium", tools=(TOOL,))
    response = (
        (await collect(provider, request))[1] if streaming else (await provider.complete(request))
    )
    thinking = response.parts[0]
    assert thinking == ThinkingPart(
        signature="EmwKAhgBEgy3va3pzix/LafPsn4a", redacted=True, vendor="anthropic"
    )
    assert response.text == ""

    await provider.complete(next_turn(request, response, "toolu_r"))
    assert server.bodies[1]["messages"][1]["content"][0] == {
        "type": "redacted_thinking",
        "data": "EmwKAhgBEgy3va3pzix/LafPsn4a",
    }


def next_turn(request: LLMRequest, response: LLMResponse, call_id: str) -> LLMRequest:
    """The tool loop's next request: the answer's parts, then the tool's result."""
    result = Message(
        role="user", parts=(ToolResultPart(call_id=call_id, name="lookup", content="found"),)
    )
    messages = (*request.messages, response.as_message(), result)
    return request.model_copy(update={"messages": messages})


@pytest.mark.parametrize("streaming", [False, True])
async def test_tool_loop_replays_the_signed_thinking_block_and_the_api_accepts_it(
    provider: AnthropicProvider, server: AnthropicServer, streaming: bool
) -> None:
    server.replies.append(
        {
            "thinking": "I need the definition first.",
            "signature": "sig-loop",
            "text": "Let me look.",
            "tool_calls": [{"id": "toolu_1", "name": "lookup", "arguments": {"q": "chorus"}}],
        }
    )
    server.replies.append("A group singing together.")
    first = ask("define chorus", reasoning="high", tools=(TOOL,))
    response = (
        (await collect(provider, first))[1] if streaming else (await provider.complete(first))
    )
    assert response.text == "Let me look."

    final = await provider.complete(next_turn(first, response, "toolu_1"))

    assert final.text == "A group singing together."
    assert len(server.requests) == 2  # accepted first time, nothing retried
    assert server.bodies[1]["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "I need the definition first.", "signature": "sig-loop"},
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "chorus"}},
    ]


async def test_a_tool_turn_replayed_without_its_thinking_block_is_refused(
    provider: AnthropicProvider, server: AnthropicServer, sleep: RecordingSleep
) -> None:
    """The loopback API validates like the real one, so the replay test above means something."""
    server.replies.append(
        {"thinking": "hm", "tool_calls": [{"id": "toolu_1", "name": "lookup", "arguments": {}}]}
    )
    first = ask(reasoning="low", tools=(TOOL,))
    response = await provider.complete(first)
    stripped = response.model_copy(
        update={"parts": tuple(p for p in response.parts if not isinstance(p, ThinkingPart))}
    )
    with pytest.raises(ProviderRequestError, match="must start with a thinking block") as info:
        await provider.complete(next_turn(first, stripped, "toolu_1"))
    assert info.value.status == 400
    assert sleep.delays == []  # a 400 is not retried


async def test_a_tampered_thinking_block_is_refused(
    provider: AnthropicProvider, server: AnthropicServer
) -> None:
    server.replies.append(
        {"thinking": "hm", "tool_calls": [{"id": "toolu_1", "name": "lookup", "arguments": {}}]}
    )
    first = ask(reasoning="low", tools=(TOOL,))
    response = await provider.complete(first)
    thinking = response.parts[0]
    assert isinstance(thinking, ThinkingPart)
    forged = response.model_copy(
        update={"parts": (thinking.model_copy(update={"text": "edited"}), *response.parts[1:])}
    )
    with pytest.raises(ProviderRequestError, match="Invalid `signature`"):
        await provider.complete(next_turn(first, forged, "toolu_1"))


async def test_other_vendors_and_unsigned_thinking_are_not_sent(
    provider: AnthropicProvider, server: AnthropicServer
) -> None:
    turn = Message(
        role="assistant",
        parts=(
            ThinkingPart(text="gemini thought", signature="c2ln", vendor="gemini"),
            ThinkingPart(text="no signature", vendor="anthropic"),
            TextPart(text="earlier answer"),
        ),
    )
    request = LLMRequest(model=MODEL, messages=(Message.user("a"), turn, Message.user("b")))
    await provider.complete(request)
    assert server.bodies[0]["messages"][1]["content"] == [
        {"type": "text", "text": "earlier answer"}
    ]


async def test_a_thinking_block_never_carries_cache_control(
    provider: AnthropicProvider, server: AnthropicServer
) -> None:
    server.replies.append(
        {"thinking": "hm", "tool_calls": [{"id": "toolu_1", "name": "lookup", "arguments": {}}]}
    )
    first = LLMRequest(
        model=MODEL,
        system=(TextPart(text="static"),),
        messages=(Message.user("go"),),
        tools=(TOOL,),
        reasoning="low",
    )
    response = await provider.complete(first)
    # a CachePoint straight after the thinking block marks the block before it instead
    turn = Message(role="assistant", parts=(response.parts[0], CachePoint(), *response.parts[1:]))
    request = next_turn(first, response, "toolu_1")
    request = request.model_copy(
        update={"messages": (request.messages[0], turn, request.messages[2])}
    )
    await provider.complete(request)
    assert cache_marked(server.bodies[1]) == ["user:go"]


@pytest.mark.parametrize("streaming", [False, True])
async def test_structured_output_sends_a_json_schema_format_and_returns_the_json(
    provider: AnthropicProvider, server: AnthropicServer, streaming: bool
) -> None:
    answer = '{"answer": "a group of singers", "score": 9}'
    server.replies.append(answer)
    request = ask("define chorus", response_schema=SCHEMA)
    response = (
        (await collect(provider, request))[1] if streaming else (await provider.complete(request))
    )
    assert response.text == answer
    sent = server.bodies[0]["output_config"]
    assert sent == {"format": {"type": "json_schema", "schema": anthropic.transform_schema(SCHEMA)}}
    schema = sent["format"]["schema"]
    assert schema["additionalProperties"] is False  # the API requires closed objects
    assert schema["required"] == ["answer", "score"]
    assert "minimum" not in schema["properties"]["score"]  # unsupported: moved to the description
    assert SCHEMA["properties"]["score"]["minimum"] == 0  # type: ignore[index]  # input untouched
