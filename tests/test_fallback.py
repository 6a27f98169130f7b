"""The model fallback chain: what falls back and what does not, the circuit breaker (with an
injected clock), streaming, a tool loop that changes vendor mid-way, and ``build_chain``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.agent.loop import Agent, ExitReason
from bot.config import ConfigError, ModelSpec, load_settings
from bot.llm.errors import ProviderAuthError, ProviderRequestError, ProviderUnavailable
from bot.llm.fallback import (
    ChainExhausted,
    FallbackProvider,
    build_chain,
    load_fallback_settings,
)
from bot.llm.scripted import Script, ScriptedProvider
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
from bot.tools.function import tool
from bot.tools.toolbox import Toolbox
from tests.agent_rig import context
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.openai_server import OpenAIServer


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def vendor(name: str, script: list[Script] | None = None) -> ScriptedProvider:
    """A scripted provider that calls itself ``name`` (the chain labels targets by it)."""
    cls = type(f"{name.title()}Scripted", (ScriptedProvider,), {"name": name})
    provider: ScriptedProvider = cls(script or [])
    return provider


def down(name: str = "x") -> ProviderUnavailable:
    return ProviderUnavailable(f"{name} overloaded", provider=name, status=529, attempts=5)


def request(model: str = "primary-model", **extra: Any) -> LLMRequest:
    return LLMRequest(model=model, messages=(Message.user("hi"),), **extra)


class Recorder:
    def __init__(self) -> None:
        self.moves: list[tuple[str, str]] = []

    def __call__(self, from_model: str, to_model: str) -> None:
        self.moves.append((from_model, to_model))


async def test_unavailable_primary_falls_back_with_the_model_rewritten() -> None:
    primary = vendor("anthropic", [down("anthropic")])
    backup = vendor("openai", ["from the backup"])
    moves = Recorder()
    chain = FallbackProvider(
        [(primary, "claude-x"), (backup, "gpt-y")], on_fallback=moves, clock=Clock()
    )
    response = await chain.complete(request("claude-x"))
    assert response.text == "from the backup"
    assert response.model == "gpt-y"  # the model that answered
    assert response.usage.output_tokens > 0
    assert [r.model for r in primary.requests] == ["claude-x"]
    assert [r.model for r in backup.requests] == ["gpt-y"]
    assert moves.moves == [("anthropic:claude-x", "openai:gpt-y")]


async def test_the_first_link_keeps_the_requested_model() -> None:
    """The insights worker may share the chain, asking the primary vendor for a cheaper model."""
    primary = vendor("anthropic", ["cheap answer"])
    chain = FallbackProvider([(primary, "claude-big"), (vendor("openai"), "gpt-y")])
    response = await chain.complete(request("claude-small"))
    assert (response.model, primary.requests[0].model) == ("claude-small", "claude-small")


async def test_a_refused_request_does_not_fall_back() -> None:
    refused = ProviderRequestError("400: prompt too long", provider="anthropic", status=400)
    primary = vendor("anthropic", [refused, "fine"])
    backup = vendor("openai")
    chain = FallbackProvider([(primary, "a"), (backup, "b")], failure_threshold=1, clock=Clock())
    with pytest.raises(ProviderRequestError):
        await chain.complete(request("a"))
    assert backup.requests == []
    assert chain.breaker_states() == {"anthropic:a": "closed"}  # a refusal is not an outage
    assert (await chain.complete(request("a"))).text == "fine"


async def test_auth_errors_fall_back_but_only_auth_errors_raise_auth() -> None:
    auth = ProviderAuthError("anthropic", 401, "ANTHROPIC_API_KEY", "https://example.invalid")
    chain = FallbackProvider(
        [(vendor("anthropic", [auth]), "a"), (vendor("openai", ["still here"]), "b")]
    )
    assert (await chain.complete(request("a"))).text == "still here"

    auth2 = ProviderAuthError("openai", 403, "OPENAI_API_KEY", "https://example.invalid")
    chain = FallbackProvider([(vendor("anthropic", [auth]), "a"), (vendor("openai", [auth2]), "b")])
    with pytest.raises(ProviderAuthError) as info:
        await chain.complete(request("a"))
    assert info.value is auth  # a key problem is reported as one, not as an outage

    chain = FallbackProvider(
        [(vendor("anthropic", [auth]), "a"), (vendor("openai", [down("openai")]), "b")]
    )
    with pytest.raises(ChainExhausted):
        await chain.complete(request("a"))


async def test_exhausted_chain_names_every_model_tried() -> None:
    chain = FallbackProvider(
        [
            (vendor("anthropic", [down("anthropic")]), "a"),
            (vendor("openai", [down("openai")]), "b"),
            (vendor("gemini", [down("gemini")]), "c"),
        ]
    )
    with pytest.raises(ProviderUnavailable) as info:
        await chain.complete(request("a"))
    error = info.value
    assert isinstance(error, ChainExhausted)
    assert list(error.tried) == ["anthropic:a", "openai:b", "gemini:c"]
    for label in ("anthropic:a", "openai:b", "gemini:c"):
        assert label in str(error)
    assert error.attempts == 15  # each provider's own retries, summed


async def test_breaker_skips_a_failing_primary_then_probes_after_the_cooldown() -> None:
    clock = Clock()
    primary = vendor("anthropic", [down(), down(), down(), "recovered"])
    backup = vendor("openai")
    moves = Recorder()
    chain = FallbackProvider(
        [(primary, "a"), (backup, "b")],
        failure_threshold=2,
        cooldown=30,
        on_fallback=moves,
        clock=clock,
    )
    for _ in range(2):
        await chain.complete(request("a"))
    assert len(primary.requests) == 2
    assert chain.breaker_states()["anthropic:a"] == "open"

    await chain.complete(request("a"))  # skipped: no wait for the primary's retries
    assert len(primary.requests) == 2
    assert moves.moves[-1] == ("anthropic:a", "openai:b")  # counted as a fallback too

    clock.now = 29.9
    await chain.complete(request("a"))
    assert len(primary.requests) == 2

    clock.now = 30.0
    assert chain.breaker_states()["anthropic:a"] == "half_open"
    await chain.complete(request("a"))  # the probe fails: open for another cool-down
    assert len(primary.requests) == 3
    assert chain.breaker_states()["anthropic:a"] == "open"
    await chain.complete(request("a"))
    assert len(primary.requests) == 3

    clock.now = 60.0
    response = await chain.complete(request("a"))  # the probe succeeds: closed again
    assert response.text == "recovered"
    assert chain.breaker_states()["anthropic:a"] == "closed"
    backup_calls = len(backup.requests)
    await chain.complete(request("a"))
    assert len(primary.requests) == 5 and len(backup.requests) == backup_calls


async def test_failures_must_be_consecutive_to_open_the_breaker() -> None:
    primary = vendor("anthropic", [down(), "ok", down(), "ok", down()])
    chain = FallbackProvider([(primary, "a"), (vendor("openai"), "b")], failure_threshold=2)
    for _ in range(5):
        await chain.complete(request("a"))
    assert chain.breaker_states()["anthropic:a"] == "closed"
    assert len(primary.requests) == 5


class Gate(ScriptedProvider):
    """Blocks each call until released, and says when a call is waiting."""

    name = "anthropic"

    def __init__(self) -> None:
        super().__init__()
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.calls = 0

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.calls += 1
        self.entered.set()
        await self.release.wait()
        return await super().complete(request)


async def test_half_open_lets_exactly_one_probe_through() -> None:
    clock = Clock()
    primary = Gate()
    primary.script.extend([down()])
    primary.release.set()
    backup = vendor("openai")
    chain = FallbackProvider(
        [(primary, "a"), (backup, "b")], failure_threshold=1, cooldown=10, clock=clock
    )
    await chain.complete(request("a"))  # opens the breaker
    clock.now = 10.0
    primary.entered.clear()
    primary.release.clear()
    probe = asyncio.create_task(chain.complete(request("a")))
    await primary.entered.wait()
    other = await chain.complete(request("a"))  # while the probe is out, go elsewhere
    assert other.model == "b"
    assert primary.calls == 2
    primary.release.set()
    assert (await probe).model == "a"
    assert chain.breaker_states()["anthropic:a"] == "closed"


async def test_a_cancelled_probe_lets_the_next_request_probe() -> None:
    clock = Clock()
    primary = Gate()
    primary.script.extend([down()])
    primary.release.set()
    chain = FallbackProvider(
        [(primary, "a"), (vendor("openai"), "b")], failure_threshold=1, cooldown=10, clock=clock
    )
    await chain.complete(request("a"))
    clock.now = 10.0
    primary.entered.clear()
    primary.release.clear()
    probe = asyncio.create_task(chain.complete(request("a")))
    await primary.entered.wait()
    probe.cancel()
    with pytest.raises(asyncio.CancelledError):
        await probe
    primary.release.set()
    assert (await chain.complete(request("a"))).model == "a"


async def test_every_model_cooling_down_fails_at_once_and_is_not_ready() -> None:
    clock = Clock()
    primary = vendor("anthropic", [down()])
    backup = vendor("openai", [down()])
    chain = FallbackProvider(
        [(primary, "a"), (backup, "b")], failure_threshold=1, cooldown=5, clock=clock
    )
    assert await chain.ready()  # never called: ready
    with pytest.raises(ChainExhausted):
        await chain.complete(request("a"))
    assert not await chain.ready()
    with pytest.raises(ChainExhausted, match="cooling down") as info:
        await chain.complete(request("a"))
    assert info.value.attempts == 0
    assert (len(primary.requests), len(backup.requests)) == (1, 1)
    clock.now = 5.0
    assert await chain.ready()
    assert (await chain.complete(request("a"))).model == "a"


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
    assert isinstance(result_part, ToolResultPart) and result_part.content == "5"


async def test_real_sdks_openai_tool_turn_then_anthropic_with_thinking() -> None:
    """OpenAI calls a tool, then fails; Anthropic (extended thinking requested) finishes the
    loop. Its API refuses a thinking request whose last tool turn lacks its own signed thinking
    block, so the chain must switch thinking off for that call."""
    async with OpenAIServer() as openai_server, AnthropicServer() as anthropic_server:
        settings = load_settings(
            CHORUS_MODEL="openai:gpt-test",
            OPENAI_API_KEY="k-test",
            OPENAI_BASE_URL=openai_server.base_url,  # type: ignore[attr-defined]
            ANTHROPIC_API_KEY="k-test",
            ANTHROPIC_BASE_URL=anthropic_server.base_url,  # type: ignore[attr-defined]
        )
        fallback = load_fallback_settings(CHORUS_FALLBACK_MODELS="anthropic:claude-test")
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
            openai_server.fail(503, "upstream down")  # type: ignore[attr-defined]
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
    settings = load_settings(CHORUS_MODEL="openai:gpt-test", OPENAI_API_KEY="k-test")
    provider = build_chain(settings, settings.model_spec(), load_fallback_settings())
    assert not isinstance(provider, FallbackProvider)
    assert provider.name == "openai"


async def test_build_chain_reuses_one_provider_per_vendor_and_closes_each_once() -> None:
    settings = load_settings(
        CHORUS_MODEL="openai:gpt-a", OPENAI_API_KEY="k-test", GEMINI_API_KEY="k-test"
    )
    fallback = load_fallback_settings(
        CHORUS_FALLBACK_MODELS=" openai:gpt-a , openai:gpt-b,gemini:gem-c ",
        CHORUS_BREAKER_FAILURES="5",
        CHORUS_BREAKER_COOLDOWN="12.5",
    )
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
    settings = load_settings(CHORUS_MODEL="openai:gpt-a", OPENAI_API_KEY="k-test")
    fallback = load_fallback_settings(CHORUS_FALLBACK_MODELS="anthropic:claude-x")
    with pytest.raises(ConfigError, match="CHORUS_FALLBACK_MODELS") as info:
        build_chain(settings, ModelSpec("openai", "gpt-a"), fallback)
    assert "ANTHROPIC_API_KEY" in str(info.value)


def test_fallback_settings_are_validated() -> None:
    with pytest.raises(ConfigError, match="CHORUS_FALLBACK_MODELS"):
        load_fallback_settings(CHORUS_FALLBACK_MODELS="openai").specs()
    with pytest.raises(ConfigError, match="unknown provider"):
        load_fallback_settings(CHORUS_FALLBACK_MODELS="mistral:large").specs()
    with pytest.raises(ConfigError, match="CHORUS_BREAKER_FAILURES"):
        load_fallback_settings(CHORUS_BREAKER_FAILURES="0")


async def test_scripted_text_parts_pass_through() -> None:
    """A response that already names its model keeps that name (e.g. a dated snapshot)."""
    named = LLMResponse(parts=(TextPart(text="x"),), stop_reason="end_turn", model="gpt-y-2025")
    chain = FallbackProvider([(vendor("openai", [named]), "gpt-y")])
    assert (await chain.complete(request("gpt-y"))).model == "gpt-y-2025"
