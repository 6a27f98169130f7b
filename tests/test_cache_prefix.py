"""The cached prefix is byte-stable: proven on the wire of each vendor.

A conversation runs through the real router, prompt assembler, agent and Toolbox, over each
vendor's real SDK and loopback server. Then, on the recorded request bodies:

- the first requests of consecutive turns, and consecutive iterations of one tool loop, share a
  byte-identical prefix up to the previous request's last cache breakpoint (Anthropic), or the
  previous request is a prefix of the next one (OpenAI messages, Gemini contents), with tools and
  system text identical throughout;
- Anthropic never gets more than 4 breakpoints, and the new message with its volatile context
  comes after the last breakpoint of a turn's first request: the time and the user's name that
  each turn's ``<context>`` block carries appear there and never in the cached prefix;
- in the Anthropic prompt-cache simulation every loop iteration reads back everything the
  previous iteration sent up to its breakpoint, and every later turn reads the earlier prefix.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from bot.agent.loop import Agent
from bot.agent.prompting import PromptAssembler, system_prompt
from bot.bus.base import InProcessBus
from bot.bus.topics import INBOUND, outbound_topic
from bot.events import Author, ChatMessage, ConversationKey, Reply
from bot.memory.buffers import MemoryStore
from bot.router.build import build_router
from bot.router.text_commands import Commands
from bot.state import connect
from bot.state.history import HistoryStore
from bot.tools.function import tool
from bot.tools.toolbox import Toolbox
from tests.agent_rig import VENDORS, tool_results, vendor_rig
from tests.loopback.cache_sim import PromptCacheSim, prompt_blocks


@tool
async def lookup(topic: str) -> str:
    """Look a topic up in the team wiki.

    Args:
        topic: what to look up
    """
    return f"Wiki page about {topic}: " + "lorem ipsum dolor sit amet " * 2


# What the volatile <context> block holds each turn (bot.memory.enrichment.render_context).
PER_TURN_TIME = re.compile(r'time=\\?"\d{4}-\d{2}-\d{2} \d{2}:\d{2}')
PER_TURN_USER = re.compile(r'user=\\?"Ada\\?"')

CONVERSATION = [
    ("Hi, I'm Ada. I'm planning a trip.", 0),
    ("Look up trains and then hotels for me, please.", 2),  # a loop with two tool iterations
    ("Thanks! And what did I say my name was?", 0),
    ("Look up museums.", 1),
]


def scripted_model(vendor: str, plan: dict[str, int]) -> Callable[[dict[str, Any]], Any]:
    """Asks for ``plan[question]`` lookups in a row, one per iteration, then answers."""

    def reply(body: dict[str, Any]) -> Any:
        text = json.dumps(body)
        question = max((q for q in plan if q in text), key=text.rindex)
        done = len(tool_results(vendor, body))  # history keeps no earlier turn's tool exchange
        if done < plan[question]:
            return {
                "tool_calls": [
                    {
                        "id": f"call_{len(text) % 9973}_{done}",
                        "name": "lookup",
                        "arguments": {"topic": f"item {done}"},
                    }
                ]
            }
        return f"Answer number {len(text) % 1000} for: {question[:20]}"

    return reply


async def run_conversation(vendor: str) -> tuple[list[dict[str, Any]], list[int]]:
    """Every request body, and the index of each turn's first request."""
    async with vendor_rig(vendor) as (server, provider, model):
        server.default_reply = scripted_model(vendor, dict(CONVERSATION))
        redis = await connect.open_redis("memory://cache-prefix-" + vendor)
        bus = InProcessBus()
        history = HistoryStore(redis, max_messages=40, ttl_seconds=3600)
        box = Toolbox([lookup])
        router = build_router(
            bus=bus,
            redis=redis,
            history=history,
            assembler=PromptAssembler(model=model, system_prompt=system_prompt("Chorus")),
            agent=Agent(provider, tools=box),
            commands=Commands(history),
            tools=box,
            memory=MemoryStore(redis),  # so each turn carries the volatile <context> block
        )
        sink: list[Reply] = []

        async def collect() -> None:
            async for delivery in bus.consume(outbound_topic("console"), Reply):
                sink.append(delivery.event)
                await delivery.ack()

        tasks = [asyncio.create_task(router.run()), asyncio.create_task(collect())]
        conv = ConversationKey(platform="console", channel=f"ada-{vendor}")
        firsts: list[int] = []
        try:
            for number, (text, _) in enumerate(CONVERSATION):
                firsts.append(len(server.requests))
                await bus.publish(
                    INBOUND,
                    ChatMessage(
                        platform="console",
                        id=f"{vendor}-{number}",
                        conversation=conv,
                        author=Author(id="ada", display_name="Ada"),
                        text=text,
                        is_direct=True,
                    ),
                )
                await bus.drain(timeout=30)
        finally:
            await bus.close()
            await asyncio.gather(*tasks, return_exceptions=True)
            await redis.flushall()
            await redis.aclose()
        assert not any(r.is_error for r in sink), [r.text for r in sink]
        assert len(server.requests) == len(CONVERSATION) + sum(n for _, n in CONVERSATION)
        return list(server.bodies), firsts


def pairs(bodies: list[dict[str, Any]], firsts: list[int]) -> list[tuple[int, int, bool]]:
    """(earlier, later, whole) request indices that must share a prefix.

    ``whole``: all of the earlier request is the later one's prefix (iterations of one tool
    loop). Across turns the earlier request's last message is not: it carried that turn's
    volatile context, which history does not keep.
    """
    turn_pairs = [(a, b, False) for a, b in zip(firsts, firsts[1:], strict=False)]
    bounds = [*firsts, len(bodies)]
    loop_pairs = [
        (i, i + 1, True) for s, e in zip(bounds, bounds[1:], strict=False) for i in range(s, e - 1)
    ]
    return turn_pairs + loop_pairs


@pytest.fixture(params=VENDORS, scope="module")
def recorded(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]], list[int]]:
    bodies, firsts = asyncio.run(run_conversation(request.param))
    return request.param, bodies, firsts


def test_prefix_is_byte_stable(recorded: tuple[str, list[dict[str, Any]], list[int]]) -> None:
    vendor, bodies, firsts = recorded
    checked = pairs(bodies, firsts)
    assert len(checked) >= 6
    for earlier, later, whole in checked:
        a, b = bodies[earlier], bodies[later]
        if vendor == "anthropic":
            blocks_a, blocks_b = prompt_blocks(a), prompt_blocks(b)
            last_bp = max(i for i, (_, bp) in enumerate(blocks_a) if bp)
            # Byte-identical content up to the breakpoint (where later breakpoints sit may move).
            same = [raw for raw, _ in blocks_a[: last_bp + 1]] == [
                raw for raw, _ in blocks_b[: last_bp + 1]
            ]
            assert same, (earlier, later)
            assert a["tools"] == b["tools"] and a["system"] == b["system"]
        elif vendor == "openai":
            assert a["tools"] == b["tools"] and a["messages"][0] == b["messages"][0]
            prefix = a["messages"] if whole else a["messages"][:-1]
            dumped = [json.dumps(m, sort_keys=True) for m in b["messages"]]
            assert [json.dumps(m, sort_keys=True) for m in prefix] == dumped[: len(prefix)]
            assert a["prompt_cache_key"] == b["prompt_cache_key"]
        else:
            assert a["tools"] == b["tools"]
            assert a.get("systemInstruction", a.get("system_instruction")) == b.get(
                "systemInstruction", b.get("system_instruction")
            )
            prefix = a["contents"] if whole else a["contents"][:-1]
            assert b["contents"][: len(prefix)] == prefix


def test_anthropic_breakpoints_and_volatile_tail() -> None:
    bodies, firsts = asyncio.run(run_conversation("anthropic"))
    for body in bodies:
        marked = [raw for raw, bp in prompt_blocks(body) if bp]
        assert 2 <= len(marked) <= 4
        assert "cache_control" in body["tools"][-1] and "cache_control" in body["system"][-1]
    for index, (text, _) in zip(firsts, CONVERSATION, strict=True):
        blocks = prompt_blocks(bodies[index])
        last_bp = max(i for i, (_, bp) in enumerate(blocks) if bp)
        new_message = next(i for i, (raw, _) in enumerate(blocks) if text.encode() in raw)
        assert new_message > last_bp
        # The per-turn values (the time, who is asking) are in the request, after the last
        # breakpoint, and nowhere in the cached prefix: a prefix holding them would never hit.
        prefix = b"".join(raw for raw, _ in blocks[: last_bp + 1]).decode()
        tail = b"".join(raw for raw, _ in blocks[last_bp + 1 :]).decode()
        for volatile in (PER_TURN_TIME, PER_TURN_USER):
            assert volatile.search(tail), (volatile.pattern, tail)
            assert not volatile.search(prefix), (volatile.pattern, prefix)


def test_cache_simulation_reads_most_of_every_later_iteration() -> None:
    bodies, firsts = asyncio.run(run_conversation("anthropic"))
    # The test prompts are short; a scaled-down minimum exercises the same rules (the benchmark
    # runs the real 1,024-token minimum on a full-size prompt).
    sim = PromptCacheSim(min_tokens=256)
    usages = [sim.account(b) for b in bodies]
    later = [i for i in range(len(bodies)) if i not in firsts]
    assert len(later) == 3
    for i in later:
        previous = usages[i - 1]
        # Everything the previous iteration sent up to its last breakpoint is read back.
        assert usages[i]["cache_read_tokens"] >= (
            previous["cache_read_tokens"] + previous["cache_write_tokens"]
        )
        # (The share of input this gives on a full-size prompt is measured by `make bench`.)
    # Every turn after the first reads the system prompt, tools and earlier history too.
    assert all(usages[i]["cache_read_tokens"] > 0 for i in firsts[1:])
