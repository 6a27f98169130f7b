"""The model fallback chain: what falls back and what does not, and the circuit breaker (with an injected clock)."""

from __future__ import annotations

import asyncio

import pytest

from bot.llm.errors import ProviderAuthError, ProviderRequestError, ProviderUnavailable
from bot.llm.fallback import (
    ChainExhausted,
    FallbackProvider,
)
from bot.llm.scripted import ScriptedProvider
from bot.llm.types import (
    LLMRequest,
    LLMResponse,
)
from tests.fallback_rig import Clock, Recorder, down, request, vendor


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
