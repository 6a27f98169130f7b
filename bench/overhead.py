"""Framework overhead per answered message, LLM excluded, as a ratio against a bare SDK call.

The same loopback Anthropic server answers both sides. The bare side times
``client.messages.create`` with the official SDK; the Chorus side times a message from
``bus.publish`` to the reply's arrival on the outbound topic through the whole pipeline (claim,
history, memory, prompt assembly, agent, reply). The agent measures its own model-call time, so
overhead = end-to-end time minus that LLM time, per message; the ratio compares Chorus's
end-to-end time with the bare call's. A second bare side replays the very request bodies Chorus
sent (system prompt, tools, history: the same bytes on the wire, the same work for the server)
through the SDK's own ``post``, so its ratio is the framework's cost alone. Messages arrive one at a time at an idle bot: the next is
published once the previous turn's tail (the history/memory/insights commit and the acks, work
done after the reply is out) has finished, so one message's latency does not include the last
one's bookkeeping. That bookkeeping is not free, and ``framework_cpu`` counts it: the total CPU
per message. Measured on the embedded store with the in-process bus, and on a real Redis with
each bus.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from dataclasses import dataclass

import anthropic

from bot.app import Chorus
from bot.bus.topics import INBOUND, outbound_topic
from bot.events import Author, ChatMessage, ConversationKey, Reply
from bot.llm.base import Provider
from bot.llm.scripted import ScriptedProvider
from bot.ops import aio
from bot.ops.metrics import NullMetrics
from bot.settings import settings_from
from tests.loopback.anthropic_server import AnthropicServer

WARMUP = 20


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Overhead:
    label: str
    bare_p50_ms: float
    chorus_p50_ms: float
    overhead_p50_ms: float
    overhead_p99_ms: float
    ratio_p50: float
    replay_p50_ms: float = 0.0  # the bare SDK replaying Chorus's own request bodies
    ratio_replay_p50: float = 0.0


async def _bare(server: AnthropicServer, n: int) -> list[float]:
    client = anthropic.AsyncAnthropic(api_key="bench", base_url=server.base_url, max_retries=0)
    times: list[float] = []
    try:
        for i in range(n + WARMUP):
            started = time.perf_counter()
            await client.messages.create(
                model="claude-test",
                max_tokens=64,
                messages=[{"role": "user", "content": f"hello {i}"}],
            )
            if i >= WARMUP:
                times.append(time.perf_counter() - started)
    finally:
        await client.close()
    return times


async def _replay(server: AnthropicServer, bodies: list[dict[str, object]]) -> list[float]:
    """The bare SDK sending each of ``bodies`` (requests Chorus made) as they were."""
    client = anthropic.AsyncAnthropic(api_key="bench", base_url=server.base_url, max_retries=0)
    times: list[float] = []
    try:
        for body in bodies:
            started = time.perf_counter()
            await client.post("/v1/messages", body=body, cast_to=anthropic.types.Message)
            times.append(time.perf_counter() - started)
    finally:
        await client.close()
    return times


class _LLMTimes(NullMetrics):
    """Collects the agent's own model-call time of every turn."""

    def __init__(self) -> None:
        self.llm: list[float] = []

    def observe_llm(self, model: str, seconds: float) -> None:
        self.llm.append(seconds)


async def _chorus(
    server: AnthropicServer,
    n: int,
    redis_url: str,
    bus: str,
    provider: Provider | None = None,
    *,
    settle: bool = True,
) -> tuple[list[float], list[float]]:
    settings = settings_from(
        {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "bench",
            "ANTHROPIC_BASE_URL": server.base_url,
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
    finally:
        await app.aclose()  # closing the bus ends the collector's consume loop
        collector.cancel()
        await asyncio.gather(collector, return_exceptions=True)
    return totals, times.llm[WARMUP:]


async def measure(label: str, redis_url: str, bus: str, n: int = 300) -> Overhead:
    async with AnthropicServer() as server:
        server.default_reply = lambda body: "ok"
        bare = await _bare(server, n)
        first = len(server.requests)
        totals, llm = await _chorus(server, n, redis_url, bus)
        replay = await _replay(server, server.bodies[first + WARMUP :])
    overheads = [t - m for t, m in zip(totals, llm, strict=True)]
    bare_p50, chorus_p50 = statistics.median(bare), statistics.median(totals)
    replay_p50 = statistics.median(replay)
    return Overhead(
        label,
        bare_p50 * 1000,
        chorus_p50 * 1000,
        statistics.median(overheads) * 1000,
        _pct(overheads, 0.99) * 1000,
        chorus_p50 / bare_p50,
        replay_p50 * 1000,
        chorus_p50 / replay_p50,
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


async def main(real_redis: str) -> list[str]:
    lines = [
        "## Framework overhead per answered message (LLM excluded)",
        "",
        "| setup | bare SDK call p50 | Chorus end to end p50 | overhead p50 | overhead p99 "
        "| ratio (Chorus / bare) | same requests replayed p50 | ratio (Chorus / replayed) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, url, bus in (
        ("embedded store, in-process bus", "memory://bench-overhead", "memory"),
        ("Redis state (127.0.0.1), in-process bus", real_redis, "memory"),
        ("Redis state, Redis Streams bus, one process", real_redis, "redis"),
    ):
        try:
            r = await measure(label, url, bus)
        except Exception as exc:
            lines.append(f"| {label} | not measured: {exc} | | | | | | |")
            continue
        lines.append(
            f"| {r.label} | {r.bare_p50_ms:.2f} ms | {r.chorus_p50_ms:.2f} ms | "
            f"{r.overhead_p50_ms:.2f} ms | {r.overhead_p99_ms:.2f} ms | "
            f"{r.ratio_p50:.2f} | {r.replay_p50_ms:.2f} ms | {r.ratio_replay_p50:.2f} |"
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
