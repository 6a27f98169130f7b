"""The agent's streamed turns (``Agent.run(..., sink)``), on each vendor through its real SDK and
loopback server: deltas reach the sink as they come and add up to the answer; a tool call resets
the draft and a slow tool is announced; a stream that breaks after its first text is asked again
whole, so streaming never costs an answer."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from bot.agent.loop import Agent, ExitReason, LoopLimits
from bot.llm.types import LLMRequest, Message
from bot.tools.function import tool
from bot.tools.toolbox import Toolbox
from tests.agent_rig import VENDORS, context, vendor_rig

EACH_VENDOR = pytest.mark.parametrize("vendor", VENDORS)


class Recorder:
    """A ``ReplySink`` that writes down what it hears."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    async def text(self, delta: str) -> None:
        self.events.append(("text", delta))

    async def reset(self) -> None:
        self.events.append(("reset", ""))

    async def working(self, tools: Sequence[str]) -> None:
        self.events.append(("working", ",".join(tools)))

    def texts(self) -> str:
        return "".join(value for kind, value in self.events if kind == "text")


@tool
async def slow_lookup(topic: str) -> str:
    """Look something up, slowly.

    Args:
        topic: what to look up
    """
    await asyncio.sleep(0.3)
    return f"{topic}: found"


def request(model: str, text: str = "hi") -> LLMRequest:
    return LLMRequest(model=model, messages=(Message.user(text),))


@EACH_VENDOR
async def test_deltas_reach_the_sink_and_add_up_to_the_answer(vendor: str) -> None:
    async with vendor_rig(vendor) as (server, provider, model):
        server.replies.append("One two three four five.")
        sink = Recorder()
        result = await Agent(provider).run(request(model), None, sink)
    assert result.text == "One two three four five."
    assert sink.texts().strip() == result.text
    assert sum(kind == "text" for kind, _ in sink.events) >= 2, "streamed in pieces"


@EACH_VENDOR
async def test_a_tool_call_resets_the_draft_and_a_slow_tool_is_announced(vendor: str) -> None:
    async with vendor_rig(vendor) as (server, provider, model):
        server.replies.extend(
            [
                {
                    "text": "Let me check.",
                    "tool_calls": [{"name": "slow_lookup", "arguments": {"topic": "x"}}],
                },
                "It is found.",
            ]
        )
        sink = Recorder()
        agent = Agent(
            provider, tools=Toolbox([slow_lookup]), limits=LoopLimits(progress_delay=0.05)
        )
        result = await agent.run(request(model), context(), sink)
    assert result.text == "It is found." and result.exit_reason is ExitReason.ANSWERED
    kinds = [kind for kind, _ in sink.events]
    first_reset = kinds.index("reset")
    assert ("working", "slow_lookup") in sink.events
    assert kinds.index("working") > first_reset
    after = "".join(v for k, v in sink.events[kinds.index("working") :] if k == "text")
    assert after.strip() == "It is found."


@pytest.mark.parametrize("vendor", ["anthropic", "openai"])  # (their servers can cut a stream)
async def test_a_stream_broken_after_its_first_text_is_asked_again_whole(vendor: str) -> None:
    async with vendor_rig(vendor) as (server, provider, model):
        server.replies.extend(
            [{"text": "Half an answer that", "stream_cut": True}, "The whole answer."]
        )
        sink = Recorder()
        result = await Agent(provider).run(request(model), None, sink)
    assert result.text == "The whole answer."
    assert ("reset", "") in sink.events
    assert [b.get("stream", False) for b in server.bodies][:2] == [
        True,
        False,
    ] or vendor == "gemini"
