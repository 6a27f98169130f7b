"""The whole Chorus turn against a bare SDK call, per vendor, and the framework's overhead.

The same loopback API of each vendor (Anthropic, OpenAI, Gemini) answers both sides. The Chorus
side times a message from ``bus.publish`` to the reply's arrival on the outbound topic through
the whole pipeline (claim, history, memory, prompt assembly, agent, the SDK on its own aiohttp
transport, reply). The bare side then replays the very request bodies Chorus sent (system
prompt, tools, history: the same JSON on the wire, the same work for the server) through the
SDK's documented call on its stock transport, as a bot calling the SDK itself would:
``messages.create`` (Anthropic; httpx2), ``chat.completions.create`` (OpenAI; httpx2) and
``generate_content`` with the SDK's typed contents (Gemini; its aiohttp session). The ratio is
Chorus's whole turn over that bare call; the budget is 1.0. The agent measures its own
model-call time, so the overhead is the turn minus that LLM time, per message.

Messages arrive one at a time at an idle bot (eight conversations, so each history grows to the
40-message limit): the next is published once the previous turn's tail (the history, memory and
insights commit and the acks, work done after the reply is out) has finished, so one message's
latency does not include the last one's bookkeeping. That bookkeeping is not free, and
``framework_cpu`` counts it: the total CPU per message with an instant in-process model.
Measured on the embedded store with the in-process bus for every vendor, and for Anthropic also
on a real Redis with each bus.

    python -m bench.overhead        # prints Markdown tables (also part of ``python -m bench``)
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import anthropic
import openai
from google import genai
from google.genai import types

from bench.startup import VENDORS
from bot.app import Chorus
from bot.bus.topics import INBOUND, outbound_topic
from bot.events import Author, ChatMessage, ConversationKey, Reply
from bot.llm.base import Provider
from bot.llm.scripted import ScriptedProvider
from bot.ops import aio
from bot.ops.metrics import NullMetrics
from bot.settings import settings_from
from tests.gemini_typed import typed_from_body
from tests.loopback.anthropic_server import AnthropicServer

WARMUP = 20
# The one setup every vendor is measured on: the framework alone.
IN_PROCESS = ("embedded store, in-process bus", "memory://bench-overhead", "memory")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Overhead:
    vendor: str
    label: str
    chorus_p50_ms: float
    overhead_p50_ms: float
    overhead_p99_ms: float
    bare_p50_ms: float  # the bare SDK replaying Chorus's request bodies
    ratio_p50: float


async def replay(vendor: str, base_url: str, bodies: list[dict[str, Any]]) -> list[float]:
    """Seconds per call of the bare SDK (its documented call, its stock transport) sending
    each of ``bodies`` (requests Chorus made) as they were."""
    times: list[float] = []
    if vendor == "anthropic":
        a_client = anthropic.AsyncAnthropic(api_key="bench", base_url=base_url, max_retries=0)
        known = set(inspect.signature(a_client.messages.create).parameters)
        try:
            for body in bodies:
                args = {k: v for k, v in body.items() if k in known}
                extra = {k: v for k, v in body.items() if k not in known}
                started = time.perf_counter()
                await a_client.messages.create(**args, extra_body=extra or None)
                times.append(time.perf_counter() - started)
        finally:
            await a_client.close()
    elif vendor == "openai":
        o_client = openai.AsyncOpenAI(api_key="bench", base_url=base_url, max_retries=0)
        try:
            for body in bodies:
                started = time.perf_counter()
                await o_client.chat.completions.create(**body)
                times.append(time.perf_counter() - started)
        finally:
            await o_client.close()
    else:
        g_client = genai.Client(
            vertexai=False,
            api_key="bench",
            http_options=types.HttpOptions(
                base_url=base_url, retry_options=types.HttpRetryOptions(attempts=1)
            ),
        )
        model = VENDORS[vendor][1].partition(":")[2]
        try:
            for body in bodies:
                started = time.perf_counter()
                contents, config = typed_from_body(body)
                await g_client.aio.models.generate_content(
                    model=model, contents=contents, config=config
                )
                times.append(time.perf_counter() - started)
        finally:
            await g_client.aio.aclose()
            g_client.close()
    return times


class _LLMTimes(NullMetrics):
    """Collects the agent's own model-call time of every turn."""

    def __init__(self) -> None:
        self.llm: list[float] = []

    def observe_llm(self, model: str, seconds: float) -> None:
        self.llm.append(seconds)


class Served(Protocol):
    """A loopback vendor API: where it listens."""

    @property
    def base_url(self) -> str: ...


async def _chorus(
    server: Served,
    n: int,
    redis_url: str,
    bus: str,
    provider: Provider | None = None,
    *,
    settle: bool = True,
    vendor: str = "anthropic",
    after_each: Callable[[], None] | None = None,
) -> tuple[list[float], list[float]]:
    _, model, key_env, url_env = VENDORS[vendor]
    settings = settings_from(
        {
            "CHORUS_MODEL": model,
            key_env: "bench",
            url_env: server.base_url,
            "CHORUS_REDIS_URL": redis_url,
            "CHORUS_BUS": bus,
            "CHORUS_BUS_NAMESPACE": f"ovh{uuid.uuid4().hex[:8]}",
        }
    )
    app = await Chorus.from_settings(settings, provider=provider)
    times = _LLMTimes()
    app.agent.metrics = times
    arrivals: dict[str, asyncio.Future[float]] = {}

    async def collect() -> None:
        async for delivery in app.bus.consume(outbound_topic("bench"), Reply, group="outbound"):
            future = arrivals.get(delivery.event.reply_to_id or "")
            if future is not None and not future.done():
                future.set_result(time.perf_counter())
            await delivery.ack()

    collector = asyncio.create_task(collect())
    await app.start()
    aio.freeze_heap()  # as `chorus run` and `chorus chat` do once started
    tag = uuid.uuid4().hex[:8]
    totals: list[float] = []
    try:
        for i in range(n + WARMUP):
            msg_id = f"{tag}-{i}"
            arrivals[msg_id] = asyncio.get_running_loop().create_future()
            started = time.perf_counter()
            await app.bus.publish(
                INBOUND,
                ChatMessage(
                    platform="bench",
                    id=msg_id,
                    conversation=ConversationKey(platform="bench", channel=f"{tag}-{i % 8}"),
                    author=Author(id=f"u{i % 8}-{tag}", display_name="Bench"),
                    text=f"hello {i}",
                    mentions_bot=True,
                ),
            )
            done = await asyncio.wait_for(arrivals[msg_id], 30)
            del arrivals[msg_id]
            if i >= WARMUP:
                totals.append(done - started)
            if settle:  # the turn's tail (commit, acks) ends before the next message arrives
                await app.bus.drain(timeout=30)
            if after_each is not None:
                after_each()
    finally:
        await app.aclose()  # closing the bus ends the collector's consume loop
        collector.cancel()
        await asyncio.gather(collector, return_exceptions=True)
    return totals, times.llm[WARMUP:]


async def measure(vendor: str, label: str, redis_url: str, bus: str, n: int = 300) -> Overhead:
    server = VENDORS[vendor][0]()
    async with server:
        server.default_reply = lambda body: "ok"
        first = len(server.requests)
        totals, llm = await _chorus(server, n, redis_url, bus, vendor=vendor)
        bare = await replay(vendor, server.base_url, server.bodies[first + WARMUP :])
    overheads = [t - m for t, m in zip(totals, llm, strict=True)]
    chorus_p50, bare_p50 = statistics.median(totals), statistics.median(bare)
    return Overhead(
        vendor,
        label,
        chorus_p50 * 1000,
        statistics.median(overheads) * 1000,
        _pct(overheads, 0.99) * 1000,
        bare_p50 * 1000,
        chorus_p50 / bare_p50,
    )


async def framework_cpu(redis_url: str, bus: str, n: int = 1000, runs: int = 3) -> float:
    """CPU milliseconds per answered message with an instant in-process model (no HTTP, no
    SDK): the framework alone. Process CPU time, not wall time, so a busy neighbour on a shared
    machine barely moves it; the difference of a long and a short run removes the start-up."""
    per_message: list[float] = []
    async with AnthropicServer() as server:
        for _ in range(runs):
            spent = []
            for count in (50, 50 + n):
                started = time.process_time()
                await _chorus(
                    server, count, redis_url, bus, ScriptedProvider(responder=_ok), settle=False
                )
                spent.append(time.process_time() - started)
            per_message.append((spent[1] - spent[0]) / n * 1000)
    return statistics.median(per_message)


def _ok(request: object) -> str:
    return "ok"


def runs(real_redis: str) -> list[tuple[str, str, str, str]]:
    """(vendor, setup, state URL, bus): every vendor in-process, Anthropic on Redis too."""
    return [
        *((vendor, *IN_PROCESS) for vendor in VENDORS),
        ("anthropic", "Redis state (127.0.0.1), in-process bus", real_redis, "memory"),
        ("anthropic", "Redis state, Redis Streams bus, one process", real_redis, "redis"),
    ]


async def main(real_redis: str) -> list[str]:
    lines = [
        "## The whole turn against the bare SDK call, per vendor",
        "",
        "| vendor | setup | Chorus whole turn p50 | overhead p50 (LLM excluded) | overhead p99 "
        "| bare SDK call p50 (the same requests, stock transport) | Chorus / bare |",
        "|---|---|---|---|---|---|---|",
    ]
    for vendor, label, url, bus in runs(real_redis):
        try:
            r = await measure(vendor, label, url, bus)
        except Exception as exc:
            lines.append(f"| {vendor} | {label} | not measured: {exc!r} | | | | |")
            continue
        lines.append(
            f"| {r.vendor} | {r.label} | {r.chorus_p50_ms:.2f} ms | {r.overhead_p50_ms:.2f} ms "
            f"| {r.overhead_p99_ms:.2f} ms | {r.bare_p50_ms:.2f} ms | {r.ratio_p50:.2f} |"
        )
    lines += [
        "",
        "## Framework CPU per answered message (instant scripted model, no HTTP)",
        "",
        "| setup | CPU per message (median of 3 runs of 1,000) |",
        "|---|---|",
    ]
    for label, url, bus in (
        ("embedded store, in-process bus", "memory://bench-cpu", "memory"),
        ("Redis state, Redis Streams bus, one process", real_redis, "redis"),
    ):
        try:
            cpu = await framework_cpu(url, bus)
        except Exception as exc:
            lines.append(f"| {label} | not measured: {exc} |")
            continue
        lines.append(f"| {label} | {cpu:.2f} ms |")
    from bench.bus import bench_bus

    try:
        bus_stats = await bench_bus(real_redis, 2000)
    except Exception as exc:
        lines += ["", f"Redis Streams bus: not measured: {exc}"]
    else:
        lines += [
            "",
            "## Redis Streams bus (127.0.0.1)",
            "",
            "| events | publish -> consume p50 | p99 | burst throughput |",
            "|---|---|---|---|",
            f"| {bus_stats['n']} | {bus_stats['latency_p50_ms']:.2f} ms "
            f"| {bus_stats['latency_p99_ms']:.2f} ms | {bus_stats['throughput_per_s']:,.0f} events/s |",
        ]
    return lines


if __name__ == "__main__":
    from bench.memory import REAL
    from bot.llm.guard import block_real_calls

    block_real_calls()  # loopback servers only
    logging.getLogger("chorus.agent").setLevel(logging.ERROR)  # no prompt cache on loopback
    print("\n".join(aio.run(main(REAL))))
