"""The fallback chain while streaming, in a tool loop that changes vendor mid-way (scripted and with the real SDKs), and ``build_chain``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.agent.loop import Agent, ExitReason
from bot.llm.errors import ProviderRequestError, ProviderUnavailable
from bot.llm.fallback import (
    FallbackProvider,
    build_chain,
)
from bot.llm.scripted import ScriptedProvider
from bot.llm.types import (
    LLMRequest,
    LLMResponse,
    Message,
    StreamEvent,
    TextDelta,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
)
from bot.resilience import RetryPolicy
from bot.settings import ConfigError, FallbackSettings, ModelSpec, settings_from
from bot.tools.function import tool
from bot.tools.toolbox import Toolbox
from tests.agent_rig import context, unwrap
from tests.fallback_rig import Recorder, down, request, vendor
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.openai_server import OpenAIServer


# -- streaming ------------------------------------------------------------------------------------
class BrokenStream(ScriptedProvider):
    """Streams one delta, then fails, like a connection dropped mid-answer."""

    name = "anthropic"

    async def stream(self, request: LLMRequest) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        yield TextDelta(text="Hel")
        raise ProviderUnavailable("stream broke", provider="anthropic", status=None, attempts=1)


async def collect(stream: AsyncIterator[StreamEvent]) -> list[StreamEvent]:
    return [event async for event in stream]


async def test_stream_falls_back_before_the_first_event() -> None:
    primary = vendor("anthropic", [down()])
    backup = vendor("openai", ["all from the backup"])
    chain = FallbackProvider([(primary, "a"), (backup, "b")])
    events = await collect(chain.stream(request("a")))
    deltas = "".join(e.text for e in events if isinstance(e, TextDelta))
    final = events[-1]
    assert deltas == "all from the backup"
    assert isinstance(final, LLMResponse) and final.model == "b"


async def test_stream_does_not_fall_back_after_text_reached_the_caller() -> None:
    primary = BrokenStream()
    backup = vendor("openai", ["never"])
    chain = FallbackProvider([(primary, "a"), (backup, "b")], failure_threshold=1)
    seen: list[StreamEvent] = []
    with pytest.raises(ProviderUnavailable, match="stream broke"):
        async for event in chain.stream(request("a")):
            seen.append(event)
    assert seen == [TextDelta(text="Hel")]
    assert backup.requests == []
    assert chain.breaker_states()["anthropic:a"] == "open"  # it still counts as a failure


# -- a tool loop that changes vendor mid-way ------------------------------------------------------
@tool
async def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first number
        b: the second number
    """
    return a + b


async def test_tool_loop_switching_vendor_mid_way_completes() -> None:
    thinking = ThinkingPart(text="add them", signature="sig", vendor="anthropic")
    call = ToolCallPart(id="toolu_1", name="add", arguments={"a": 2, "b": 3})
    primary = vendor(
        "anthropic",
        [
            LLMResponse(
                parts=(thinking, call),
                stop_reason="tool_use",
                usage=Usage(input_tokens=10, output_tokens=5),
                model="claude-x",
            ),
            down("anthropic"),
        ],
    )
    backup = vendor("openai", ["It is 5."])
    chain = FallbackProvider([(primary, "claude-x"), (backup, "gpt-y")])
    tools = Toolbox([add])
    ctx = context()
    agent = Agent(chain, tools=tools)
    result = await agent.run(request("claude-x", tools=tools.specs_for(ctx)), ctx)

    assert (result.exit_reason, result.text, result.iterations) == (
        ExitReason.ANSWERED,
        "It is 5.",
        2,
    )
    sent = backup.requests[0]
    assert sent.model == "gpt-y"
    # The loop so far travels to the other vendor (its module drops Anthropic's thinking).
    assert sent.messages[-2].parts[:2] == (thinking, call)
    result_part = sent.messages[-1].parts[0]
    assert isinstance(result_part, ToolResultPart) and unwrap(result_part.content) == "5"


async def test_real_sdks_openai_tool_turn_then_anthropic_with_thinking() -> None:
    """OpenAI calls a tool, then fails; Anthropic (extended thinking requested) finishes the
    loop. Its API refuses a thinking request whose last tool turn lacks its own signed thinking
    block, so the chain must switch thinking off for that call."""
    async with OpenAIServer() as openai_server, AnthropicServer() as anthropic_server:
        settings = settings_from(
            {
                "CHORUS_MODEL": "openai:gpt-test",
                "OPENAI_API_KEY": "k-test",
                "OPENAI_BASE_URL": openai_server.base_url,
                "ANTHROPIC_API_KEY": "k-test",
                "ANTHROPIC_BASE_URL": anthropic_server.base_url,
            }
        ).llm
        fallback = settings_from({"CHORUS_FALLBACK_MODELS": "anthropic:claude-test"}).fallback
        moves = Recorder()
        chain = build_chain(
            settings,
            settings.model_spec(),
            fallback,
            retry=RetryPolicy(max_retries=0),
            on_fallback=moves,
        )
        assert isinstance(chain, FallbackProvider)
        openai_server.replies.append(
            {"tool_calls": [{"id": "call_1", "name": "add", "arguments": {"a": 2, "b": 3}}]}
        )
        anthropic_server.replies.append("It is 5.")

        @tool
        async def add(a: int, b: int) -> int:
            """Add two integers (and take OpenAI down before the loop's next call).

            Args:
                a: the first number
                b: the second number
            """
            openai_server.fail(503, "upstream down")
            return a + b

        tools = Toolbox([add])
        ctx = context()
        call = request("gpt-test", tools=tools.specs_for(ctx), reasoning="medium")
        try:
            result = await Agent(chain, tools=tools).run(call, ctx)
            assert (result.exit_reason, result.text) == (ExitReason.ANSWERED, "It is 5.")
            assert moves.moves == [("openai:gpt-test", "anthropic:claude-test")]
            body = anthropic_server.requests[-1].body
            assert body["model"] == "claude-test"
            assert "thinking" not in body
            blocks = [b["type"] for m in body["messages"] for b in m["content"]]
            assert "tool_use" in blocks and "tool_result" in blocks

            # The same loop with thinking left on is what the API refuses.
            anthropic_only = chain._links[1].provider
            replay = call.model_copy(update={"model": "claude-test", "messages": _loop_messages()})
            with pytest.raises(ProviderRequestError):
                await anthropic_only.complete(replay)
        finally:
            await chain.aclose()


def _loop_messages() -> tuple[Message, ...]:
    """The neutral form of the tool loop the Anthropic server just saw."""
    return (
        Message.user("hi"),
        Message(
            role="assistant",
            parts=(ToolCallPart(id="call_1", name="add", arguments={"a": 2, "b": 3}),),
        ),
        Message(role="user", parts=(ToolResultPart(call_id="call_1", name="add", content="5"),)),
    )


# -- build_chain ----------------------------------------------------------------------------------
def test_build_chain_without_fallbacks_is_the_plain_provider() -> None:
    settings = settings_from({"CHORUS_MODEL": "openai:gpt-test", "OPENAI_API_KEY": "k-test"}).llm
    provider = build_chain(settings, settings.model_spec(), FallbackSettings())
    assert not isinstance(provider, FallbackProvider)
    assert provider.name == "openai"


async def test_build_chain_reuses_one_provider_per_vendor_and_closes_each_once() -> None:
    settings = settings_from(
        {"CHORUS_MODEL": "openai:gpt-a", "OPENAI_API_KEY": "k-test", "GEMINI_API_KEY": "k-test"}
    ).llm
    fallback = settings_from(
        {
            "CHORUS_FALLBACK_MODELS": " openai:gpt-a , openai:gpt-b,gemini:gem-c ",
            "CHORUS_BREAKER_FAILURES": "5",
            "CHORUS_BREAKER_COOLDOWN": "12.5",
        }
    ).fallback
    chain = build_chain(settings, settings.model_spec(), fallback)
    assert isinstance(chain, FallbackProvider)
    assert chain.models == ["openai:gpt-a", "openai:gpt-b", "gemini:gem-c"]  # primary once
    assert (chain.failure_threshold, chain.cooldown) == (5, 12.5)
    providers = [link.provider for link in chain._links]
    assert providers[0] is providers[1] and providers[0] is not providers[2]
    closes: list[str] = []
    for provider in {id(p): p for p in providers}.values():
        original = provider.aclose

        async def counting(original: Any = original, name: str = provider.name) -> None:
            closes.append(name)
            await original()

        provider.aclose = counting  # type: ignore[method-assign]
    await chain.aclose()
    assert sorted(closes) == ["gemini", "openai"]


def test_build_chain_names_a_fallback_without_credentials() -> None:
    settings = settings_from({"CHORUS_MODEL": "openai:gpt-a", "OPENAI_API_KEY": "k-test"}).llm
    fallback = settings_from({"CHORUS_FALLBACK_MODELS": "anthropic:claude-x"}).fallback
    with pytest.raises(ConfigError, match="CHORUS_FALLBACK_MODELS") as info:
        build_chain(settings, ModelSpec("openai", "gpt-a"), fallback)
    assert "ANTHROPIC_API_KEY" in str(info.value)


def test_fallback_settings_are_validated() -> None:
    with pytest.raises(ConfigError, match="CHORUS_FALLBACK_MODELS"):
        settings_from({"CHORUS_FALLBACK_MODELS": "openai"}).fallback.specs()
    with pytest.raises(ConfigError, match="unknown provider"):
        settings_from({"CHORUS_FALLBACK_MODELS": "mistral:large"}).fallback.specs()
    with pytest.raises(ConfigError, match="CHORUS_BREAKER_FAILURES"):
        settings_from({"CHORUS_BREAKER_FAILURES": "0"})


async def test_scripted_text_parts_pass_through() -> None:
    """A response that already names its model keeps that name (e.g. a dated snapshot)."""
    named = LLMResponse(parts=(TextPart(text="x"),), stop_reason="end_turn", model="gpt-y-2025")
    chain = FallbackProvider([(vendor("openai", [named]), "gpt-y")])
    assert (await chain.complete(request("gpt-y"))).model == "gpt-y-2025"
