"""What only Anthropic's wire has, through the real ``anthropic`` SDK and the loopback API.

The behaviour every vendor shares (answers, streaming, usage, tool round trips, errors, retries,
guard, settings) is the provider contract (``test_provider_contract*.py``). Here: the exact
Messages request, same-role merging, ``cache_control`` breakpoints, extended thinking blocks and
their signed replay, and the ``output_config`` structured-output format.
"""

from __future__ import annotations

import base64
from typing import Any, Literal

import anthropic
import pytest

from bot.llm.anthropic import MAX_CACHE_MARKERS, THINKING_BUDGETS
from bot.llm.base import SDKProvider
from bot.llm.errors import ProviderRequestError
from bot.llm.types import (
    CachePoint,
    ImagePart,
    LLMRequest,
    LLMResponse,
    Message,
    TextPart,
    ThinkingPart,
    ToolResultPart,
)
from tests.provider_rig import TOOL, RecordingSleep, answer, collect
from tests.provider_rig import ask as ask_vendor
from tests.provider_vendors import ANTHROPIC, Vendor, VendorServer

MODEL = ANTHROPIC.model


@pytest.fixture
def vendor() -> Vendor:
    return ANTHROPIC


def ask(text: str = "hi", **fields: Any) -> LLMRequest:
    return ask_vendor(ANTHROPIC, text, **fields)


# -- the request ---------------------------------------------------------------------------
@pytest.mark.parametrize("streaming", [False, True])
async def test_a_plain_question_is_exactly_this_messages_request(
    provider: SDKProvider, server: VendorServer, streaming: bool
) -> None:
    await answer(provider, ask("hi"), streaming)
    (rec,) = server.requests
    assert rec.headers["authorization"] == "Bearer test-key"  # SDK 2.x sends keys as Bearer
    assert "anthropic-version" in rec.headers
    assert rec.body == {
        "model": MODEL,
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        **({"stream": True} if streaming else {}),
    }


async def test_system_multi_turn_and_same_role_merging(
    provider: SDKProvider, server: VendorServer
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


async def test_tools_calls_and_results_in_the_messages_wire_format(
    provider: SDKProvider, server: VendorServer
) -> None:
    server.replies.append(
        {
            "text": "Let me look.",
            "tool_calls": [{"id": "toolu_01", "name": "lookup", "arguments": {"q": "chorus"}}],
        }
    )
    first = ask("define chorus", tools=(TOOL,))
    response = await provider.complete(first)
    assert server.bodies[0]["tools"] == [
        {"name": "lookup", "description": "Look a word up.", "input_schema": TOOL.parameters}
    ]
    result = Message(
        role="user",
        parts=(
            ToolResultPart(call_id="toolu_01", name="lookup", content="a group of singers"),
            ToolResultPart(call_id="toolu_02", name="lookup", content="no such", is_error=True),
        ),
    )
    await provider.complete(
        first.model_copy(update={"messages": (*first.messages, response.as_message(), result)})
    )
    _, assistant, user = server.bodies[1]["messages"]
    assert assistant["content"] == [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_01", "name": "lookup", "input": {"q": "chorus"}},
    ]
    assert user["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_01",
            "content": "a group of singers",
            "is_error": False,
        },
        {"type": "tool_result", "tool_use_id": "toolu_02", "content": "no such", "is_error": True},
    ]


async def test_images_map_to_base64_and_url_sources(
    provider: SDKProvider, server: VendorServer
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


def cache_marked(body: dict[str, Any]) -> list[str]:
    """Where cache_control landed, as tool names / block texts, in prompt order."""
    found: list[str] = []
    for tool in body.get("tools", []):
        if "cache_control" in tool:
            found.append(f"tool:{tool['name']}")
    for block in body.get("system", []):
        if "cache_control" in block:
            assert block["cache_control"] == {"type": "ephemeral"}
            found.append(f"system:{block['text']}")
    for message in body["messages"]:
        for block in message["content"]:
            if "cache_control" in block:
                assert block["cache_control"] == {"type": "ephemeral"}
                found.append(f"{message['role']}:{block.get('text', block['type'])}")
    return found


async def test_cache_points_mark_the_preceding_block(
    provider: SDKProvider, server: VendorServer
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
    provider: SDKProvider, server: VendorServer
) -> None:
    request = LLMRequest(
        model=MODEL,
        system=(TextPart(text="static"),),
        messages=(Message(role="user", parts=(CachePoint(), TextPart(text="hi"))),),
    )
    await provider.complete(request)
    assert cache_marked(server.bodies[0]) == ["system:static"]


async def test_at_most_four_cache_markers_keeping_the_last_four(
    provider: SDKProvider, server: VendorServer
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


# -- errors only Anthropic's stream has ------------------------------------------------------
async def test_stream_non_retryable_error_event_is_a_request_error(
    provider: SDKProvider, server: VendorServer
) -> None:
    server.replies.append(
        {"text": "", "stream_error": {"type": "invalid_request_error", "message": "bad"}}
    )
    with pytest.raises(ProviderRequestError, match="bad"):
        await collect(provider, ask())
    assert len(server.requests) == 1


# -- reasoning, thinking blocks and structured output ---------------------------------------
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "score": {"type": "integer", "minimum": 0}},
    "required": ["answer", "score"],
}


@pytest.mark.parametrize(("level", "budget"), [("low", 1024), ("medium", 4096), ("high", 16384)])
async def test_reasoning_levels_map_to_thinking_budgets_on_top_of_max_tokens(
    provider: SDKProvider,
    server: VendorServer,
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


@pytest.mark.parametrize("streaming", [False, True])
async def test_thinking_blocks_become_thinking_parts_and_never_text(
    provider: SDKProvider, server: VendorServer, streaming: bool
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
    provider: SDKProvider, server: VendorServer, streaming: bool
) -> None:
    server.replies.append(
        {
            "redacted": "EmwKAhgBEgy3va3pzix/LafPsn4a",
            "tool_calls": [{"id": "toolu_r", "name": "lookup", "arguments": {"q": "x"}}],
        }
    )
    request = ask(reasoning="medium", tools=(TOOL,))
    response = await answer(provider, request, streaming)
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
    provider: SDKProvider, server: VendorServer, streaming: bool
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
    response = await answer(provider, first, streaming)
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
    provider: SDKProvider, server: VendorServer, sleep: RecordingSleep
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
    provider: SDKProvider, server: VendorServer
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
    provider: SDKProvider, server: VendorServer
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
    provider: SDKProvider, server: VendorServer
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


async def test_structured_output_sends_a_json_schema_format_and_returns_the_json(
    provider: SDKProvider, server: VendorServer
) -> None:
    await provider.complete(ask("define chorus", response_schema=SCHEMA))
    sent = server.bodies[0]["output_config"]
    assert sent == {"format": {"type": "json_schema", "schema": anthropic.transform_schema(SCHEMA)}}
    schema = sent["format"]["schema"]
    assert schema["additionalProperties"] is False  # the API requires closed objects
    assert schema["required"] == ["answer", "score"]
    assert "minimum" not in schema["properties"]["score"]  # unsupported: moved to the description
    assert SCHEMA["properties"]["score"]["minimum"] == 0  # type: ignore[index]  # input untouched
