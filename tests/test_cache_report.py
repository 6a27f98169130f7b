"""The per-turn cache report: which requests should have used the cache, and the warning."""

from __future__ import annotations

import logging
from typing import ClassVar

import pytest

from bot.agent.loop import CACHE_WARNING_EVERY, Agent
from bot.llm.caching import cache_missed, min_cacheable_tokens
from bot.llm.scripted import ScriptedProvider
from bot.llm.types import LLMRequest, LLMResponse, Message, TextPart, Usage


def test_minimums_per_vendor_and_model() -> None:
    assert min_cacheable_tokens("anthropic", "claude-sonnet-4-5") == 1024
    assert min_cacheable_tokens("anthropic", "claude-haiku-4-5") == 2048
    assert min_cacheable_tokens("gemini", "gemini-2.5-pro") == 4096
    assert min_cacheable_tokens("openai", "gpt-4.1") == 1024


@pytest.mark.parametrize(
    ("provider", "usage", "iteration", "missed"),
    [
        ("anthropic", Usage(input_tokens=5000), 1, True),
        ("anthropic", Usage(input_tokens=500), 1, False),  # too short to cache
        ("anthropic", Usage(input_tokens=10, cache_write_tokens=5000), 1, False),
        ("anthropic", Usage(input_tokens=10, cache_read_tokens=5000), 1, False),
        ("openai", Usage(input_tokens=5000), 1, False),  # the first request writes silently
        ("openai", Usage(input_tokens=5000), 2, True),
        ("gemini", Usage(input_tokens=100, cache_read_tokens=4900), 2, False),
    ],
)
def test_cache_missed(provider: str, usage: Usage, iteration: int, missed: bool) -> None:
    assert cache_missed(provider, "m", usage, iteration=iteration) is missed


class _AnthropicLike(ScriptedProvider):
    name: ClassVar[str] = "anthropic"


async def test_agent_warns_when_a_cacheable_request_missed_and_logs_the_share(
    caplog: pytest.LogCaptureFixture,
) -> None:
    provider = _AnthropicLike(
        [
            LLMResponse(
                parts=(TextPart(text="a"),), stop_reason="end_turn", usage=Usage(input_tokens=3000)
            ),
            LLMResponse(
                parts=(TextPart(text="b"),),
                stop_reason="end_turn",
                usage=Usage(input_tokens=100, cache_read_tokens=2900),
            ),
        ]
    )
    request = LLMRequest(model="claude-sonnet-4-5", messages=(Message.user("hi"),))
    with caplog.at_level(logging.INFO, logger="chorus.agent"):
        await Agent(provider).run(request)
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "prompt cache not used" in warnings[0].getMessage()
        caplog.clear()
        await Agent(provider).run(request)
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]
    finished = [r for r in caplog.records if r.getMessage() == "turn finished"]
    assert finished[-1].cache_read_share == pytest.approx(0.967, abs=0.001)  # type: ignore[attr-defined]


async def test_a_model_that_keeps_missing_is_warned_about_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    miss = LLMResponse(
        parts=(TextPart(text="a"),), stop_reason="end_turn", usage=Usage(input_tokens=3000)
    )
    now = [1000.0]
    agent = Agent(_AnthropicLike([miss] * 5), clock=lambda: now[0])
    request = LLMRequest(model="claude-sonnet-4-5", messages=(Message.user("hi"),))
    with caplog.at_level(logging.WARNING, logger="chorus.agent"):
        for _ in range(3):
            await agent.run(request)
        assert len(caplog.records) == 1  # the first miss; the next two are counted
        now[0] += CACHE_WARNING_EVERY
        await agent.run(request)
        await agent.run(request)
    warned = [r for r in caplog.records if "prompt cache not used" in r.getMessage()]
    assert len(warned) == 2
    assert warned[1].misses_not_logged == 2  # type: ignore[attr-defined]
