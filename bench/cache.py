"""Prompt-cache benchmark: how much input is read from Anthropic's cache, per loop iteration.

A scripted six-turn conversation with tool calls (the real built-in tools, pages and a feed served
on loopback) runs through the real router, prompt assembler, agent and Toolbox, over the real
``anthropic`` SDK, against a loopback Messages API whose usage numbers come from a simulation of
the documented cache rules (prefix hash per breakpoint, 20-block lookback, 5-minute TTL, the
1,024-token minimum of Sonnet). The same conversation then runs with a "naive" layout that puts
the current time into the system prompt, the most common way to break caching, for contrast.
"""

from __future__ import annotations

import asyncio
import functools
import json
import operator
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from bot.agent.loop import Agent
from bot.agent.prompting import PromptAssembler, system_prompt
from bot.bus.base import InProcessBus
from bot.bus.topics import INBOUND, outbound_topic
from bot.events import Author, ChatMessage, ConversationKey, Reply
from bot.llm.registry import build_provider
from bot.llm.types import SystemPart, TextPart
from bot.router.build import build_router
from bot.router.text_commands import Commands
from bot.settings import settings_from
from bot.state import connect
from bot.state.history import HistoryStore
from bot.tools.toolbox import Toolbox
from tests.agent_rig import tool_results
from tests.loopback.anthropic_caching import CachingAnthropicServer
from tests.loopback.cache_sim import PromptCacheSim

Step = list[tuple[str, dict[str, Any]]]  # the calls of one model response (run in parallel)

_RULES = "".join(
    f"<p>Rule {i}: on your turn draw a card, trade with a neighbour, then build; "
    f"the robber moves on a seven and blocks hex {i}.</p>"
    for i in range(1, 13)
)
_FAQ = "".join(
    f"<p>Q{i}: can I trade on another player's turn? A: only with them.</p>" for i in range(1, 9)
)


def _feed(base: str) -> str:
    items = "".join(
        f"<item><title>Board game news {i}: new expansion announced</title>"
        f"<link>{base}/news/{i}</link><pubDate>Sun, 22 Nov 2026 0{i}:00:00 GMT</pubDate></item>"
        for i in range(1, 6)
    )
    return (
        f'<?xml version="1.0"?><rss version="2.0"><channel><title>Tabletop</title>'
        f"<link>{base}</link><description>news</description>{items}</channel></rss>"
    )


def conversation(base: str) -> list[tuple[str, list[Step]]]:
    return [
        ("Hi! I'm Ada, I moderate a board-games community.", []),
        (
            "What time is it in Tokyo and in Lisbon right now?",
            [
                [
                    ("current_time", {"timezone": "Asia/Tokyo"}),
                    ("current_time", {"timezone": "Europe/Lisbon"}),
                ]
            ],
        ),
        (
            f"Read the rules page at {base}/rules and summarise the turn order.",
            [[("fetch_page", {"url": f"{base}/rules", "max_chars": 3000})]],
        ),
        (
            "Any board game news today? Open the first story too.",
            [
                [("news_headlines", {"topic": "board game", "limit": 3})],
                [("fetch_page", {"url": f"{base}/faq", "max_chars": 2000})],
            ],
        ),
        ("Thanks! Remind me what I told you I do.", []),
        (
            "Check the time in New York, then the FAQ page, then the time in Sydney.",
            [
                [("current_time", {"timezone": "America/New_York"})],
                [("fetch_page", {"url": f"{base}/faq", "max_chars": 2000})],
                [("current_time", {"timezone": "Australia/Sydney"})],
            ],
        ),
    ]


def scripted_model(plan: list[tuple[str, list[Step]]]) -> Callable[[dict[str, Any]], Any]:
    """Plays the model: for the newest question, the next step's tool calls, then an answer."""
    questions = [q for q, _ in plan]

    def reply(body: dict[str, Any]) -> Any:
        text = json.dumps(body)
        question = max((q for q in questions if q in text), key=text.rindex)
        steps = dict(plan)[question]
        done_calls = len(tool_results("anthropic", body))
        done_steps, count = 0, 0
        while done_steps < len(steps) and count + len(steps[done_steps]) <= done_calls:
            count += len(steps[done_steps])
            done_steps += 1
        if done_steps < len(steps):
            return {
                "tool_calls": [
                    {
                        "id": f"toolu_{questions.index(question)}_{done_steps}_{i}",
                        "name": name,
                        "arguments": args,
                    }
                    for i, (name, args) in enumerate(steps[done_steps])
                ]
            }
        return f"Here is what I found about: {question[:40]}. " + "Details follow. " * 20

    return reply


class NaiveAssembler(PromptAssembler):
    """The anti-pattern: a timestamp in the system prompt changes the prefix every request."""

    @property
    def system(self) -> tuple[SystemPart, ...]:
        stamp = datetime.now(UTC).isoformat(timespec="microseconds")
        return (TextPart(text=f"Current time: {stamp}\n{self.system_prompt}"),) + super().system[1:]


@dataclass
class CacheRun:
    layout: str
    usages: list[dict[str, int]]
    iterations: list[int]  # the loop iteration (1-based) of each request

    def share(self, pick: Callable[[int], bool] = lambda _: True) -> float:
        chosen = [u for u, it in zip(self.usages, self.iterations, strict=True) if pick(it)]
        read = sum(u["cache_read_tokens"] for u in chosen)
        total = sum(sum(u.values()) for u in chosen)
        return read / total if total else 0.0

    def per_iteration(self) -> dict[int, float]:
        return {
            n: self.share(functools.partial(operator.eq, n)) for n in sorted(set(self.iterations))
        }

    def min_share_from_second(self) -> float:
        shares = [
            u["cache_read_tokens"] / sum(u.values())
            for u, it in zip(self.usages, self.iterations, strict=True)
            if it >= 2
        ]
        return min(shares) if shares else 0.0

    def median_share_from_second(self) -> float:
        shares = [
            u["cache_read_tokens"] / sum(u.values())
            for u, it in zip(self.usages, self.iterations, strict=True)
            if it >= 2
        ]
        return statistics.median(shares) if shares else 0.0


async def _serve_pages() -> tuple[web.AppRunner, str]:
    async def page(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name == "feed.xml":
            base = f"http://{request.host}"
            return web.Response(text=_feed(base), content_type="application/rss+xml")
        body = _RULES if name == "rules" else _FAQ
        html = f"<html><head><title>{name}</title></head><body>{body}</body></html>"
        return web.Response(text=html, content_type="text/html")

    app = web.Application()
    app.add_routes([web.get("/{name}", page)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


async def run(layout: str = "chorus") -> CacheRun:
    pages, base = await _serve_pages()
    plan = conversation(base)
    server = CachingAnthropicServer(PromptCacheSim(min_tokens=1024))
    server.default_reply = scripted_model(plan)
    await server.start()
    settings = settings_from(
        {
            "CHORUS_MODEL": "anthropic:claude-sonnet-4-5",
            "ANTHROPIC_API_KEY": "bench",
            "ANTHROPIC_BASE_URL": server.base_url,
            "CHORUS_FETCH_ALLOW": base.removeprefix("http://"),
            "CHORUS_FEEDS": f"{base}/feed.xml",
        }
    )
    provider = build_provider(settings.llm.model_spec(), settings.llm)
    redis = await connect.open_redis(f"memory://bench-cache-{layout}")
    bus = InProcessBus()
    tools = Toolbox.from_settings(settings.tools)
    assembler_cls = NaiveAssembler if layout == "naive" else PromptAssembler
    history = HistoryStore(redis, max_messages=40, ttl_seconds=3600)
    router = build_router(
        bus=bus,
        redis=redis,
        history=history,
        assembler=assembler_cls(model="claude-sonnet-4-5", system_prompt=system_prompt("Chorus")),
        agent=Agent(provider, tools=tools),
        commands=Commands(history),
        tools=tools,
    )
    replies: list[Reply] = []

    async def collect() -> None:
        async for delivery in bus.consume(outbound_topic("discord"), Reply):
            replies.append(delivery.event)
            await delivery.ack()

    tasks = [asyncio.create_task(router.run()), asyncio.create_task(collect())]
    iterations: list[int] = []
    conv = ConversationKey(platform="discord", channel="boardgames")
    try:
        for number, (text, _steps) in enumerate(plan):
            before = len(server.requests)
            await bus.publish(
                INBOUND,
                ChatMessage(
                    platform="discord",
                    id=f"{layout}-{number}",
                    conversation=conv,
                    author=Author(id="42", display_name="Ada"),
                    text=text,
                    mentions_bot=True,
                ),
            )
            await bus.drain(timeout=60)
            iterations += list(range(1, len(server.requests) - before + 1))
    finally:
        await bus.close()
        await asyncio.gather(*tasks, return_exceptions=True)
        await provider.aclose()
        await redis.aclose()
        await server.close()
        await pages.cleanup()
    errors = [r.text for r in replies if r.is_error]
    if errors:
        raise RuntimeError(f"the benchmark conversation failed: {errors}")
    return CacheRun(layout, list(server.usages), iterations)


def report(runs: list[CacheRun]) -> list[str]:
    lines = ["## Prompt cache (Anthropic wire format, simulated cache, 1,024-token minimum)", ""]
    lines.append(
        "| layout | requests | overall read share | iteration 1 | iteration 2 | "
        "iteration 3 | iteration >= 2 (median / min) |"
    )
    lines.append("|---|---|---|---|---|---|---|")
    for r in runs:
        per = r.per_iteration()
        cells = [f"{per.get(n, 0.0):.1%}" for n in (1, 2, 3)]
        lines.append(
            f"| {r.layout} | {len(r.usages)} | {r.share():.1%} | {' | '.join(cells)} | "
            f"{r.median_share_from_second():.1%} / {r.min_share_from_second():.1%} |"
        )
    return lines


async def main() -> list[str]:
    return report([await run("chorus"), await run("naive")])
