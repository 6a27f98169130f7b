"""Every rule of the bounded tool loop, on each vendor through its real SDK and loopback server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from bot.agent.loop import Agent, ExitReason, LoopLimits, fallback_text
from bot.llm.types import LLMRequest, Message, TextPart, ToolResultPart
from bot.tools.base import Permission, ToolContext, ToolError
from bot.tools.function import tool
from bot.tools.toolbox import Toolbox
from tests.agent_rig import VENDORS, context, refusal_reply, tool_results, vendor_rig

pytestmark = pytest.mark.parametrize("vendor", VENDORS)


@tool
async def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first number
        b: the second number
    """
    return a + b


@tool
async def explode(reason: str) -> str:
    """Always fails (for tests).

    Args:
        reason: what to say
    """
    raise RuntimeError(f"kaboom: {reason}")


@tool
async def refuse_politely() -> str:
    """Fails the way a tool reports a usable problem."""
    raise ToolError("the feed is empty right now")


@tool(timeout=0.05)
async def hang() -> str:
    """Waits for a future nobody resolves."""
    await asyncio.get_running_loop().create_future()
    return "unreachable"


@tool(permission=Permission.MODERATOR)
async def ban(user: str) -> str:
    """Ban a user.

    Args:
        user: who to ban
    """
    return f"banned {user}"


def make_pair() -> tuple[Any, Any]:
    """Two tools that each wait for the other: only concurrent execution lets both finish."""
    ping_seen, pong_seen = asyncio.Event(), asyncio.Event()

    @tool(timeout=5)
    async def ping() -> str:
        """Ping."""
        ping_seen.set()
        await pong_seen.wait()
        return "ping done"

    @tool(timeout=5)
    async def pong() -> str:
        """Pong."""
        pong_seen.set()
        await ping_seen.wait()
        return "pong done"

    return ping, pong


def call(name: str, args: dict[str, Any] | None = None, cid: str = "c1") -> dict[str, Any]:
    return {"id": cid, "name": name, "arguments": args or {}}


def request(model: str, toolbox: Toolbox, ctx: ToolContext) -> LLMRequest:
    return LLMRequest(
        model=model,
        system=(TextPart(text="You are a test."),),
        messages=(Message.user("please use the tools"),),
        tools=toolbox.specs_for(ctx),
        cache_tools=True,
    )


async def test_tool_call_then_final_answer_with_usage_summed(vendor: str) -> None:
    box, ctx = Toolbox([add]), context()
    async with vendor_rig(vendor) as (server, provider, model):
        server.replies.extend([{"tool_calls": [call("add", {"a": 2, "b": 3})]}, "It is 5."])
        result = await Agent(provider, tools=box).run(request(model, box, ctx), ctx)
        assert (result.text, result.exit_reason, result.iterations) == (
            "It is 5.",
            ExitReason.ANSWERED,
            2,
        )
        assert result.tool_calls == 1 and result.tool_errors == 0
        assert [r[1:] for r in tool_results(vendor, server.bodies[1])] == [("5", False)]
        assert result.usage.output_tokens >= 2 and result.usage.total_input_tokens > 0
        first = server.bodies[0]
        assert tool_results(vendor, first) == []


async def test_parallel_calls_run_concurrently_and_keep_their_order(vendor: str) -> None:
    ping, pong = make_pair()
    box, ctx = Toolbox([ping, pong]), context()
    async with vendor_rig(vendor) as (server, provider, model):
        server.replies.extend(
            [{"tool_calls": [call("ping", cid="c1"), call("pong", cid="c2")]}, "both done"]
        )
        result = await Agent(provider, tools=box).run(request(model, box, ctx), ctx)
        assert result.text == "both done"
        results = tool_results(vendor, server.bodies[1])
        assert [(text, err) for _, text, err in results] == [
            ("ping done", False),
            ("pong done", False),
        ]


@pytest.mark.parametrize(
    ("name", "args", "fragment"),
    [
        ("no_such_tool", {}, "unknown tool no_such_tool"),
        ("explode", {"reason": "x"}, "explode failed: RuntimeError: kaboom: x"),
        ("refuse_politely", {}, "the feed is empty right now"),
        ("hang", {}, "hang timed out after 0.05 s"),
        ("ban", {"user": "eve"}, "ban may only be used by moderators"),
        ("add", {"a": "two"}, "add"),  # bad arguments come back for the model to fix
    ],
)
async def test_failing_calls_become_error_results_and_the_loop_goes_on(
    vendor: str, name: str, args: dict[str, Any], fragment: str
) -> None:
    box, ctx = Toolbox([add, explode, refuse_politely, hang, ban]), context()
    async with vendor_rig(vendor) as (server, provider, model):
        server.replies.extend([{"tool_calls": [call(name, args)]}, "recovered"])
        result = await Agent(provider, tools=box).run(request(model, box, ctx), ctx)
        assert result.text == "recovered" and result.exit_reason == ExitReason.ANSWERED
        assert result.tool_errors == 1
        [(_, text, is_error)] = tool_results(vendor, server.bodies[1])
        assert is_error and fragment in text


async def test_iteration_cap_ends_the_turn_gracefully(vendor: str) -> None:
    box, ctx = Toolbox([add]), context()
    async with vendor_rig(vendor) as (server, provider, model):
        server.default_reply = lambda body: {"tool_calls": [call("add", {"a": 1, "b": 1})]}
        agent = Agent(provider, tools=box, limits=LoopLimits(max_iterations=3))
        result = await agent.run(request(model, box, ctx), ctx)
        assert result.exit_reason == ExitReason.MAX_ITERATIONS
        assert result.text == fallback_text(ExitReason.MAX_ITERATIONS)
        assert len(server.requests) == 3 and result.iterations == 3 and result.tool_calls == 3


async def test_refusal_ends_the_turn(vendor: str) -> None:
    box, ctx = Toolbox([add]), context()
    async with vendor_rig(vendor) as (server, provider, model):
        server.replies.append(refusal_reply(vendor))
        result = await Agent(provider, tools=box).run(request(model, box, ctx), ctx)
        assert result.exit_reason == ExitReason.REFUSED and result.iterations == 1
        assert result.text
        assert len(server.requests) == 1


async def test_wall_clock_budget_ends_with_a_short_message(vendor: str) -> None:
    now = [0.0]

    @tool
    async def slow_report() -> str:
        """A tool during which the turn's budget runs out."""
        now[0] += 61.0  # the injected clock: no real waiting
        return "done eventually"

    box, ctx = Toolbox([slow_report]), context()
    async with vendor_rig(vendor) as (server, provider, model):
        server.default_reply = lambda body: {"tool_calls": [call("slow_report")]}
        agent = Agent(
            provider, tools=box, limits=LoopLimits(budget_seconds=60), clock=lambda: now[0]
        )
        result = await agent.run(request(model, box, ctx), ctx)
        assert result.exit_reason == ExitReason.BUDGET
        assert result.text.startswith("Sorry, that's taking me too long")
        assert len(server.requests) == 1


async def test_each_iteration_sends_the_previous_one_back(vendor: str) -> None:
    box, ctx = Toolbox([add]), context()
    async with vendor_rig(vendor) as (server, provider, model):
        server.replies.extend(
            [
                {"tool_calls": [call("add", {"a": 1, "b": 2}, cid="c1")]},
                {"tool_calls": [call("add", {"a": 3, "b": 4}, cid="c2")]},
                "3 and 7",
            ]
        )
        result = await Agent(provider, tools=box).run(request(model, box, ctx), ctx)
        assert result.iterations == 3 and result.text == "3 and 7"
        assert [r[1] for r in tool_results(vendor, server.bodies[2])] == ["3", "7"]
        second, third = (json.dumps(b) for b in server.bodies[1:3])
        # The third request replays both earlier calls (ids c1, c2) after the original question.
        assert third.index("please use the tools") < third.index("c1") < third.index("c2")
        assert len(third) > len(second)


def test_tool_result_part_is_what_the_loop_builds(vendor: str) -> None:
    # The neutral shape every vendor module translates: guards against silent renames.
    part = ToolResultPart(call_id="c", name="n", content="x", is_error=True)
    assert part.model_dump()["type"] == "tool_result"
