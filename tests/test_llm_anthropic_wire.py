"""The Anthropic provider's requests are byte for byte the ones ``messages.create`` sends.

The provider posts the body it encoded itself (``bot.llm.anthropic._create``) to skip the SDK's
deep copy of it. Here the same requests go out both ways through the real SDK to the loopback
API, and the bytes and headers on the wire are compared: any drift in key order, encoding,
``extra_body`` merging or headers would change what the API (and its prompt cache) receives.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx2
import pytest

from bot.llm.anthropic import AnthropicProvider, build_params, encode_body
from bot.llm.types import (
    CachePoint,
    ImagePart,
    LLMRequest,
    Message,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
)
from tests.loopback.anthropic_server import AnthropicServer

TOOL = ToolSpec(
    name="lookup",
    description='Looks a word up: «ünïcode» and "quotes"',
    parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
)


def _turns() -> tuple[Message, ...]:
    return (
        Message(role="user", parts=(TextPart(text="what is 'chorus'? ✨"),)),
        Message(
            role="assistant",
            parts=(ToolCallPart(id="toolu_1", name="lookup", arguments={"q": "chorus"}),),
        ),
        Message(
            role="user",
            parts=(
                ToolResultPart(call_id="toolu_1", name="lookup", content="a group singing"),
                CachePoint(),
                TextPart(text="and now?"),
            ),
        ),
    )


REQUESTS = {
    "plain": LLMRequest(model="m", messages=(Message(role="user", parts=(TextPart(text="hi"),)),)),
    "system, tools, cache points": LLMRequest(
        model="m",
        system=(TextPart(text="You are Chorus."), CachePoint(), TextPart(text="Now: noon.")),
        messages=_turns(),
        tools=(TOOL,),
        cache_tools=True,
    ),
    "temperature (extra_body)": LLMRequest(
        model="m", messages=_turns(), tools=(TOOL,), temperature=0.3
    ),
    "thinking": LLMRequest(
        model="m",
        messages=(Message(role="user", parts=(TextPart(text="think"),)),),
        reasoning="low",
        temperature=0.3,
    ),
    "structured output": LLMRequest(
        model="m",
        messages=(Message(role="user", parts=(TextPart(text="json please"),)),),
        response_schema={"type": "object", "properties": {"n": {"type": "integer"}}},
    ),
    "image": LLMRequest(
        model="m",
        messages=(
            Message(
                role="user",
                parts=(ImagePart(url="https://example.test/cat.png"), TextPart(text="this?")),
            ),
        ),
    ),
}


@pytest.fixture
async def server() -> AsyncIterator[AnthropicServer]:
    async with AnthropicServer() as running:
        running.default_reply = lambda body: "ok"
        yield running


def _client(base_url: str, sent: list[httpx2.Request]) -> anthropic.AsyncAnthropic:
    async def keep(request: httpx2.Request) -> None:
        sent.append(request)

    http = httpx2.AsyncClient(event_hooks={"request": [keep]})
    return anthropic.AsyncAnthropic(
        api_key="k", base_url=base_url, max_retries=0, timeout=30, http_client=http
    )


def _headers(request: httpx2.Request) -> dict[str, str]:
    return dict(request.headers)


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("name", sorted(REQUESTS))
async def test_the_provider_sends_what_create_sends(
    server: AnthropicServer, name: str, streaming: bool
) -> None:
    request = REQUESTS[name]
    by_create: list[httpx2.Request] = []
    by_provider: list[httpx2.Request] = []
    create_client = _client(server.base_url, by_create)
    provider_client = _client(server.base_url, by_provider)
    try:
        # as the provider called it before: ``stream`` passed only to stream
        params = build_params(request)
        if streaming:
            answer: Any = await create_client.messages.create(**params, stream=True)
            async for _ in answer:
                pass
        else:
            await create_client.messages.create(**params)
        provider = AnthropicProvider(provider_client, base_url=server.base_url)
        if streaming:
            events = [event async for event in provider.stream(request)]
            assert events, "the provider's stream yielded nothing"
        else:
            assert (await provider.complete(request)).text == "ok"
    finally:
        await create_client.close()
        await provider_client.close()
    (expected,), (sent,) = by_create, by_provider
    assert sent.content == expected.content
    assert _headers(sent) == _headers(expected)
    assert (sent.method, sent.url) == (expected.method, expected.url)
    assert len(server.requests) == 2  # and the API took both


def test_a_parameter_create_does_not_take_is_refused() -> None:
    params = build_params(REQUESTS["plain"]) | {"temprature": 0.3}
    with pytest.raises(TypeError, match="temprature"):
        encode_body(params, stream=False)
