"""The provider contract, part one: what every vendor's answer means, over its real SDK.

Each test runs once per vendor (``tests/provider_vendors.py``), against that vendor's loopback
server, which validates requests like the real API does. What differs between vendors only on
the wire (field names, cache breakpoints, thinking blocks) is tested in ``test_llm_<vendor>.py``;
failures, retries, the guard and settings are part two, ``test_provider_contract_failures.py``.
"""

from __future__ import annotations

import base64
import json
from typing import Literal

import pytest

from bot.llm.base import SDKProvider
from bot.llm.types import (
    REASONING_BUDGETS,
    ImagePart,
    LLMRequest,
    Message,
    TextPart,
    ToolResultPart,
)
from tests.agent_rig import tool_results
from tests.provider_rig import (
    TOOL,
    answer,
    ask,
    collect,
)
from tests.provider_vendors import Vendor, VendorServer

STREAMING = pytest.mark.parametrize("streaming", [False, True], ids=["complete", "stream"])


# -- answers ---------------------------------------------------------------------------------
async def test_complete_returns_the_text_stop_reason_model_and_usage(
    vendor: Vendor, provider: SDKProvider, server: VendorServer
) -> None:
    server.replies.append("Hello there")
    response = await provider.complete(ask(vendor))

    assert response.text == "Hello there"
    assert response.stop_reason == "end_turn"
    assert response.raw_stop_reason == vendor.raw_end_turn
    assert response.model == vendor.model
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    (rec,) = server.requests
    assert rec.path == vendor.path(vendor.model, False)
    assert vendor.key_sent(rec) == "test-key"


async def test_stream_deltas_concatenate_to_the_final_text_with_usage(
    vendor: Vendor, provider: SDKProvider, server: VendorServer
) -> None:
    server.replies.append("one two three four")
    deltas, final = await collect(provider, ask(vendor))

    assert len(deltas) == 4  # streamed piece by piece, not in one lump at the end
    assert "".join(deltas) == final.text == "one two three four"
    assert final.stop_reason == "end_turn"
    assert final.model == vendor.model
    assert final.usage.input_tokens > 0
    assert final.usage.output_tokens == len("one two three four") // 4
    (rec,) = server.requests
    assert rec.path == vendor.path(vendor.model, True)


@STREAMING
async def test_usage_counts_cached_prompt_tokens_apart_from_input(
    vendor: Vendor, provider: SDKProvider, server: VendorServer, streaming: bool
) -> None:
    server.replies.append(vendor.cache_reply)
    response = await answer(provider, ask(vendor), streaming)
    assert response.usage == vendor.cache_usage
    assert response.usage.cache_read_share == pytest.approx(
        vendor.cache_usage.cache_read_tokens / vendor.cache_usage.total_input_tokens
    )


@STREAMING
async def test_stop_reasons_are_normalised_and_the_raw_one_kept(
    vendor: Vendor, provider: SDKProvider, server: VendorServer, streaming: bool
) -> None:
    for reply, _, _ in vendor.stop_cases:
        server.replies.append(reply)
    for reply, expected, raw in vendor.stop_cases:
        response = await answer(provider, ask(vendor), streaming)
        assert (response.stop_reason, response.raw_stop_reason) == (expected, raw), reply
        # a refusal's own words are the answer, so the user sees why
        assert response.text == reply.get("refusal", reply.get("text", "")), reply


# -- tool calls ------------------------------------------------------------------------------
@STREAMING
async def test_tool_calls_and_their_results_round_trip(
    vendor: Vendor, provider: SDKProvider, server: VendorServer, streaming: bool
) -> None:
    arguments = {"q": "chorus", "limit": 3, "tags": ["a", "b"]}
    server.replies.append(
        {
            "text": "Let me look.",
            "tool_calls": [
                {"id": "call_01", "name": "lookup", "arguments": arguments},
                {"id": "call_02", "name": "lookup", "arguments": {"q": "verse"}},
            ],
        }
    )
    server.replies.append("A group singing together.")
    first = ask(vendor, "define chorus", tools=(TOOL,))
    response = await answer(provider, first, streaming)

    assert response.stop_reason == "tool_use"
    assert response.text == "Let me look."
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("call_01", "lookup", arguments),
        ("call_02", "lookup", {"q": "verse"}),
    ]
    assert "lookup" in json.dumps(server.bodies[0])  # the tool was offered

    results = Message(
        role="user",
        parts=(
            ToolResultPart(call_id="call_01", name="lookup", content="a group of singers"),
            ToolResultPart(call_id="call_02", name="lookup", content="no such word", is_error=True),
        ),
    )
    second = first.model_copy(
        update={"messages": (*first.messages, response.as_message(), results)}
    )
    final = await provider.complete(second)

    assert final.text == "A group singing together."
    assert len(server.requests) == 2  # the replayed turn was accepted as it was sent
    sent = [
        (call_id, content.removeprefix("ERROR: "), is_error)
        for call_id, content, is_error in tool_results(vendor.name, server.bodies[1])
    ]
    assert sent == [("call_01", "a group of singers", False), ("call_02", "no such word", True)]


# -- request content -------------------------------------------------------------------------
async def test_images_reach_the_wire_as_base64_data_or_as_the_url(
    vendor: Vendor, provider: SDKProvider, server: VendorServer
) -> None:
    png = bytes(range(256))  # every byte value: a lossy encoding could not round-trip it
    message = Message(
        role="user",
        parts=(
            TextPart(text="what is this?"),
            ImagePart(mime="image/png", data=png),
            ImagePart(mime="image/jpeg", url="https://example.com/cat.jpg"),
        ),
    )
    response = await provider.complete(LLMRequest(model=vendor.model, messages=(message,)))
    assert response.text == "ok"
    wire = json.dumps(server.bodies[0])
    encoded = [_b64(png), _b64(png, urlsafe=True)]
    at = {
        "text": wire.index("what is this?"),
        "data": min(wire.find(e) for e in encoded if e in wire),
        "url": wire.index("https://example.com/cat.jpg"),
    }
    assert at["text"] < at["data"] < at["url"]  # in the order the user sent them
    assert "image/png" in wire


def _b64(data: bytes, *, urlsafe: bool = False) -> str:
    return (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(data).decode()


async def test_the_same_request_is_sent_byte_identical_and_a_longer_one_extends_it(
    vendor: Vendor, provider: SDKProvider, server: VendorServer
) -> None:
    """Prefix stability: what a vendor caches is only reusable if the bytes do not move."""
    request = LLMRequest(
        model=vendor.model,
        system=(TextPart(text="You are Chorus."),),
        messages=(Message.user("first"), Message.assistant("answer"), Message.user("second")),
        tools=(TOOL,),
        cache_tools=True,
    )
    longer = request.model_copy(
        update={"messages": (*request.messages, Message.assistant("more"), Message.user("third"))}
    )
    await provider.complete(request)
    await provider.complete(request)
    await provider.complete(longer)

    once, again, extended = server.bodies
    assert json.dumps(once) == json.dumps(again)
    before = [json.dumps(turn, sort_keys=True) for turn in vendor.turns(once)]
    after = [json.dumps(turn, sort_keys=True) for turn in vendor.turns(extended)]
    # Anthropic's last breakpoint moves to the newest turn: compare the turns before it.
    assert after[: len(before) - 1] == before[:-1]
    assert len(after) == len(before) + 2


# -- reasoning and structured output ---------------------------------------------------------
@pytest.mark.parametrize("level", ["low", "medium", "high"])
async def test_a_reasoning_level_adds_its_budget_on_top_of_the_output_limit(
    vendor: Vendor,
    provider: SDKProvider,
    server: VendorServer,
    level: Literal["low", "medium", "high"],
) -> None:
    request = LLMRequest(
        model=vendor.reasoning_model,
        messages=(Message.user("think"),),
        reasoning=level,
        max_tokens=500,
    )
    response = await provider.complete(request)
    assert response.text == "ok"  # the validating server accepted the reasoning setting
    body = server.bodies[0]
    assert vendor.reasoning_sent(body) is not None
    # the answer keeps its own allowance; reasoning tokens count against the same limit
    assert vendor.max_tokens_sent(body) == 500 + REASONING_BUDGETS[level]
    assert REASONING_BUDGETS == {"low": 1024, "medium": 4096, "high": 16384}


async def test_reasoning_off_sends_no_reasoning_and_keeps_limit_and_temperature(
    vendor: Vendor, provider: SDKProvider, server: VendorServer
) -> None:
    request = LLMRequest(
        model=vendor.model,
        messages=(Message.user("hi"),),
        max_tokens=500,
        temperature=0.3,
    )
    await provider.complete(request)
    body = server.bodies[0]
    assert vendor.reasoning_sent(body) is None
    assert vendor.max_tokens_sent(body) == 500
    assert vendor.temperature_sent(body) == 0.3


SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "score": {"type": "integer"}},
    "required": ["answer"],
}


@STREAMING
async def test_structured_output_sends_the_schema_and_returns_the_json(
    vendor: Vendor, provider: SDKProvider, server: VendorServer, streaming: bool
) -> None:
    reply = '{"answer": "a group of singers", "score": 9}'
    server.replies.append(reply)
    response = await answer(
        provider, ask(vendor, "define chorus", response_schema=SCHEMA), streaming
    )
    assert json.loads(response.text) == {"answer": "a group of singers", "score": 9}
    assert len(server.requests) == 1  # the validating server accepted the schema as sent
    assert '"score"' in json.dumps(server.bodies[0])
    plain = await provider.complete(ask(vendor))
    assert plain.text == "ok"
    assert '"score"' not in json.dumps(server.bodies[1])  # no schema asked: none sent
