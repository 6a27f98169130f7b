"""Reasoning, thinking replay and structured output: one contract, every vendor.

Each vendor's real SDK runs against its loopback server, which validates like the real API (a
tool turn replayed without its signed thinking block / thought signature is a 400). The
vendor-specific wire details are tested in ``test_llm_<vendor>.py``; here the same scenarios
must hold for all three, so the agent's tool loop can treat them alike.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest
from google import genai
from google.genai import types

from bot.llm.anthropic import AnthropicProvider
from bot.llm.base import SDKProvider
from bot.llm.gemini import GeminiProvider
from bot.llm.openai import OpenAIProvider
from bot.llm.types import (
    LLMRequest,
    LLMResponse,
    Message,
    TextDelta,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
)
from bot.resilience import RetryPolicy
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.base import LoopbackServer
from tests.loopback.gemini_server import GeminiServer
from tests.loopback.openai_server import OpenAIServer

pytestmark = pytest.mark.filterwarnings(
    "ignore:Inheritance class AiohttpClientSession:DeprecationWarning"
)

RETRY = RetryPolicy(max_retries=1, base_delay=0.01)
SIG = base64.b64encode(b"\x01signed-by-the-vendor\xfe").decode()
TOOL = ToolSpec(
    name="lookup",
    description="Look a word up.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
)
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "score": {"type": "integer"}},
    "required": ["answer", "score"],
}


async def _no_sleep(delay: float) -> None:
    raise AssertionError(f"nothing here should be retried (asked to sleep {delay}s)")


def _anthropic_reasoning(body: dict[str, Any]) -> dict[str, Any]:
    return {k: body[k] for k in ("thinking",) if k in body}


def _openai_reasoning(body: dict[str, Any]) -> dict[str, Any]:
    return {k: body[k] for k in ("reasoning_effort",) if k in body}


def _gemini_reasoning(body: dict[str, Any]) -> dict[str, Any]:
    config = body.get("generationConfig") or {}
    return {k: config[k] for k in ("thinkingConfig",) if k in config}


def _anthropic_structured(body: dict[str, Any]) -> dict[str, Any]:
    return {k: body[k] for k in ("output_config",) if k in body}


def _openai_structured(body: dict[str, Any]) -> dict[str, Any]:
    return {k: body[k] for k in ("response_format",) if k in body}


def _gemini_structured(body: dict[str, Any]) -> dict[str, Any]:
    config = body.get("generationConfig") or {}
    return {k: config[k] for k in ("responseMimeType", "responseJsonSchema") if k in config}


@dataclass
class Vendor:
    name: str
    server: LoopbackServer
    provider: SDKProvider
    model: str  # a model each loopback API treats as able to reason
    reasoning: Callable[[dict[str, Any]], dict[str, Any]]
    structured: Callable[[dict[str, Any]], dict[str, Any]]

    def ask(self, text: str = "define chorus", **kwargs: Any) -> LLMRequest:
        return LLMRequest(model=self.model, messages=(Message.user(text),), **kwargs)

    async def answer(self, request: LLMRequest, streaming: bool) -> tuple[str, LLMResponse]:
        """The response, and the text that reached the caller (streamed deltas, or the text)."""
        if not streaming:
            response = await self.provider.complete(request)
            return response.text, response
        events = [event async for event in self.provider.stream(request)]
        *deltas, final = events
        assert isinstance(final, LLMResponse)
        return "".join(d.text for d in deltas if isinstance(d, TextDelta)), final


@pytest.fixture(params=["anthropic", "openai", "gemini"])
async def vendor(request: pytest.FixtureRequest) -> AsyncIterator[Vendor]:
    name: str = request.param
    if name == "anthropic":
        server: LoopbackServer = await AnthropicServer().start()
        a_client = anthropic.AsyncAnthropic(
            api_key="k", base_url=server.url, max_retries=0, _strict_response_validation=True
        )
        provider: SDKProvider = AnthropicProvider(
            a_client, base_url=server.url, retry=RETRY, sleep=_no_sleep
        )
        yield Vendor(
            name, server, provider, "claude-test", _anthropic_reasoning, _anthropic_structured
        )
        await a_client.close()
    elif name == "openai":
        server = await OpenAIServer().start()
        o_client = openai.AsyncOpenAI(
            api_key="k",
            base_url=server.url + "/v1",
            max_retries=0,
            _strict_response_validation=True,
        )
        provider = OpenAIProvider(o_client, base_url=server.url, retry=RETRY, sleep=_no_sleep)
        yield Vendor(name, server, provider, "o4-mini", _openai_reasoning, _openai_structured)
        await o_client.close()
    else:
        server = await GeminiServer().start()
        g_client = genai.Client(
            vertexai=False,
            api_key="k",
            http_options=types.HttpOptions(
                base_url=server.url, retry_options=types.HttpRetryOptions(attempts=1)
            ),
        )
        provider = GeminiProvider(g_client, base_url=server.url, retry=RETRY, sleep=_no_sleep)
        yield Vendor(
            name, server, provider, "gemini-2.5-flash", _gemini_reasoning, _gemini_structured
        )
        await g_client.aio.aclose()
        g_client.close()
    await server.close()


async def test_off_by_default_no_reasoning_or_format_is_sent(vendor: Vendor) -> None:
    await vendor.provider.complete(vendor.ask())
    body = vendor.server.bodies[0]
    assert vendor.reasoning(body) == {}
    assert vendor.structured(body) == {}


@pytest.mark.parametrize("level", ["low", "medium", "high"])
async def test_every_reasoning_level_is_sent_and_accepted(vendor: Vendor, level: str) -> None:
    response = await vendor.provider.complete(vendor.ask(reasoning=level))
    assert response.text == "ok"
    assert vendor.reasoning(vendor.server.bodies[0]) != {}


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_reasoning_tool_loop_replays_what_the_vendor_requires(
    vendor: Vendor, streaming: bool
) -> None:
    vendor.server.replies.append(
        {
            "thinking": "A private plan: look it up first.",
            "signature": SIG,
            "text": "Checking.",
            "tool_calls": [{"id": "call_a", "name": "lookup", "arguments": {"q": "chorus"}}],
        }
    )
    vendor.server.replies.append("A group singing together.")
    first = vendor.ask(reasoning="medium", tools=(TOOL,))

    shown, response = await vendor.answer(first, streaming)

    assert shown == response.text == "Checking."  # thinking never reaches the user
    assert response.stop_reason == "tool_use"
    (call,) = response.tool_calls
    result = Message(
        role="user", parts=(ToolResultPart(call_id=call.id, name=call.name, content="singers"),)
    )
    second = first.model_copy(update={"messages": (*first.messages, response.as_message(), result)})
    shown, final = await vendor.answer(second, streaming)

    assert shown == final.text == "A group singing together."
    assert len(vendor.server.requests) == 2  # the validating server accepted the replay


async def test_thinking_of_other_vendors_is_never_sent(vendor: Vendor) -> None:
    foreign = [v for v in ("anthropic", "openai", "gemini") if v != vendor.name]
    turn = Message(
        role="assistant",
        parts=(
            *(ThinkingPart(text=f"thought of {v}", signature=SIG, vendor=v) for v in foreign),
            TextPart(text="an earlier answer"),
        ),
    )
    request = LLMRequest(model=vendor.model, messages=(Message.user("a"), turn, Message.user("b")))
    await vendor.provider.complete(request)
    sent = json.dumps(vendor.server.bodies[0])
    assert "an earlier answer" in sent
    assert "thought of" not in sent


async def test_a_call_signature_from_another_vendor_history_is_harmless(vendor: Vendor) -> None:
    """ToolCallPart.signature is Gemini's; the others ignore it, Gemini sends what it holds."""
    turn = Message(
        role="assistant",
        parts=(ToolCallPart(id="call_x", name="lookup", arguments={"q": "x"}, signature=SIG),),
    )
    result = Message(
        role="user", parts=(ToolResultPart(call_id="call_x", name="lookup", content="found"),)
    )
    request = LLMRequest(
        model=vendor.model, messages=(Message.user("a"), turn, result), tools=(TOOL,)
    )
    assert (await vendor.provider.complete(request)).text == "ok"
    sent = json.dumps(vendor.server.bodies[0])
    if vendor.name == "gemini":
        (call,) = vendor.server.bodies[0]["contents"][1]["parts"]
        assert base64.urlsafe_b64decode(call["thoughtSignature"]) == base64.b64decode(SIG)
    else:
        assert SIG not in sent


@pytest.mark.parametrize("streaming", [False, True])
async def test_structured_output_returns_the_json_text_intact(
    vendor: Vendor, streaming: bool
) -> None:
    answer = '{"answer": "a group of singers", "score": 9}'
    vendor.server.replies.append(answer)
    shown, response = await vendor.answer(vendor.ask(response_schema=SCHEMA), streaming)
    assert shown == response.text == answer
    assert json.loads(response.text) == {"answer": "a group of singers", "score": 9}
    assert vendor.structured(vendor.server.bodies[0]) != {}
