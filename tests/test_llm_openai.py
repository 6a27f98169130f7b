"""What only OpenAI's wire has, through the real ``openai`` SDK and the loopback Chat API.

The behaviour every vendor shares (answers, streaming, usage, tool round trips, errors, retries,
guard, settings) is the provider contract (``test_provider_contract*.py``). Here: the exact
Chat Completions request, ``prompt_cache_key``, tool messages, ``max_tokens`` versus
``max_completion_tokens`` by host, keyless local servers, which models get ``reasoning_effort``,
and the ``response_format`` structured-output shape.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from typing import Any, Literal

import httpx2
import openai
import pytest

from bot.llm import guard
from bot.llm.base import SDKProvider
from bot.llm.errors import ProviderRequestError
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
    Message,
    TextPart,
    ToolResultPart,
    Usage,
)
from bot.settings import LLMSettings
from tests.loopback.openai_server import CREATED
from tests.provider_rig import RETRY, TOOL, answer
from tests.provider_rig import ask as ask_vendor
from tests.provider_vendors import OPENAI, Vendor, VendorServer

MODEL = OPENAI.model


@pytest.fixture
def vendor() -> Vendor:
    return OPENAI


def ask(text: str = "hi", **fields: Any) -> LLMRequest:
    return ask_vendor(OPENAI, text, **fields)


# -- the request -----------------------------------------------------------------------------
@pytest.mark.parametrize("streaming", [False, True])
async def test_a_plain_question_is_exactly_this_chat_completion_request(
    provider: SDKProvider, server: VendorServer, streaming: bool
) -> None:
    await answer(provider, ask("hi"), streaming)
    (rec,) = server.requests
    assert rec.headers["authorization"] == "Bearer test-key"
    # A local server (anything but OpenAI's hosts) gets the classic max_tokens.
    assert rec.body == {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 1024,
        **({"stream": True, "stream_options": {"include_usage": True}} if streaming else {}),
    }


# -- request mapping -------------------------------------------------------------------------
async def test_system_multi_turn_cache_key_and_temperature(
    provider: SDKProvider, server: VendorServer
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
    provider: SDKProvider, server: VendorServer
) -> None:
    await provider.complete(ask())
    assert "prompt_cache_key" not in server.bodies[0]
    assert "temperature" not in server.bodies[0]


async def test_tool_call_and_result_round_trip(provider: SDKProvider, server: VendorServer) -> None:
    server.replies.append(
        {
            "text": "Let me look.",
            "tool_calls": [{"id": "call_01", "name": "lookup", "arguments": {"q": "chorus"}}],
        }
    )
    first = ask("define chorus", tools=(TOOL,))
    response = await provider.complete(first)
    assert response.raw_stop_reason == "tool_calls"
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
    provider: SDKProvider, server: VendorServer
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
    provider: SDKProvider, server: VendorServer, streaming: bool
) -> None:
    server.replies.append(
        {"tool_calls": [{"id": "call_x", "name": "lookup", "arguments": '{"q": '}]}
    )
    response = await answer(provider, ask(tools=(TOOL,)), streaming)
    (call,) = response.tool_calls
    assert call.arguments == {"_raw": '{"q": '}


async def test_images_become_image_url_parts(provider: SDKProvider, server: VendorServer) -> None:
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


# -- hosts and settings ----------------------------------------------------------------------
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


async def test_from_settings_with_a_base_url_needs_no_key(
    server: VendorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    settings = LLMSettings.model_validate(
        {"OPENAI_BASE_URL": server.base_url, "CHORUS_LLM_MAX_RETRIES": 1}
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


# -- reasoning and structured output ---------------------------------------------------------
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "score": {"type": "integer"}},
    "required": ["answer"],
}


def with_client(
    server: VendorServer, reasoning_models: str | None = None
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
    provider: SDKProvider,
    server: VendorServer,
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
    provider: SDKProvider, server: VendorServer
) -> None:
    request = LLMRequest(model="o3", messages=(Message.user("hi"),), max_tokens=500)
    await provider.complete(request)
    body = server.bodies[0]
    assert "reasoning_effort" not in body
    assert body["max_tokens"] == 500


@pytest.mark.parametrize("model", ["gpt-4.1", "gpt-test", "llama3.1:8b"])
async def test_reasoning_effort_is_omitted_for_other_models_and_logged_once(
    provider: SDKProvider,
    server: VendorServer,
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


async def test_the_reasoning_model_pattern_is_configurable(server: VendorServer) -> None:
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
    server: VendorServer,
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
    provider: SDKProvider, server: VendorServer, streaming: bool
) -> None:
    server.replies.append(
        {"text": "42", "usage": {"input_tokens": 10, "output_tokens": 2, "reasoning_tokens": 300}}
    )
    request = LLMRequest(model="o3", messages=(Message.user("q"),), reasoning="medium")
    response = await answer(provider, request, streaming)
    assert response.text == "42"
    assert response.usage == Usage(input_tokens=10, output_tokens=302)


async def test_structured_output_sends_a_json_schema_response_format(
    provider: SDKProvider, server: VendorServer
) -> None:
    await provider.complete(ask("define chorus", response_schema=SCHEMA))
    assert server.bodies[0]["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "response", "schema": SCHEMA, "strict": False},
    }
