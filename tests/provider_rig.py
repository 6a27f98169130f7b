"""Fixtures and helpers shared by the provider contract suites (answers and failures).

Why a module of its own: both contract files run the same three vendors through the same
fixtures (a loopback server, a provider over the real SDK, a recording ``sleep`` so no test
waits on the clock), and the helpers that fold a stream into its text and final response must
behave identically in both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.llm.base import SDKProvider
from bot.llm.types import LLMRequest, LLMResponse, Message, StreamEvent, TextDelta, ToolSpec
from bot.resilience import RetryPolicy
from tests.provider_vendors import VENDORS, Vendor, VendorServer

RETRY = RetryPolicy(max_retries=2, base_delay=0.01)
TOOL = ToolSpec(
    name="lookup",
    description="Look a word up.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
)


class RecordingSleep:
    """The providers' ``sleep``: records every backoff instead of waiting."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


@pytest.fixture(params=VENDORS, ids=str)
def vendor(request: pytest.FixtureRequest) -> Vendor:
    chosen: Vendor = request.param
    return chosen


@pytest.fixture
async def server(vendor: Vendor) -> AsyncIterator[VendorServer]:
    srv = vendor.new_server()
    await srv.start()
    yield srv
    await srv.close()


@pytest.fixture
def sleep() -> RecordingSleep:
    return RecordingSleep()


@pytest.fixture
async def provider(
    vendor: Vendor, server: VendorServer, sleep: RecordingSleep
) -> AsyncIterator[SDKProvider]:
    built, close = vendor.new_provider(server.base_url, "test-key", RETRY, sleep)
    yield built
    await close()


def ask(vendor: Vendor, text: str = "hi", **fields: Any) -> LLMRequest:
    return LLMRequest(model=vendor.model, messages=(Message.user(text),), **fields)


async def collect(provider: SDKProvider, request: LLMRequest) -> tuple[list[str], LLMResponse]:
    """The streamed text pieces and the final response; nothing but text comes before it."""
    events: list[StreamEvent] = [event async for event in provider.stream(request)]
    *deltas, final = events
    assert all(isinstance(d, TextDelta) for d in deltas)
    assert isinstance(final, LLMResponse)
    return [d.text for d in deltas if isinstance(d, TextDelta)], final


async def answer(provider: SDKProvider, request: LLMRequest, streaming: bool) -> LLMResponse:
    """``complete`` or ``stream``; a stream's pieces must add up to the final text."""
    if not streaming:
        return await provider.complete(request)
    deltas, final = await collect(provider, request)
    assert "".join(deltas) == final.text
    return final
