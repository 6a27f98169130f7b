"""Backpressure: memory stays flat while 100,000 messages arrive faster than they are answered.

Why: the router used to move every delivery into per-conversation queues at once, so a burst
lived in the process's memory until it was answered. Now it holds at most
``CHORUS_MAX_TURNS_IN_FLIGHT`` messages (running or queued); the rest wait on the bus. This
benchmark publishes N messages over 500 conversations as fast as the bus takes them, into one
process whose model answers each after an awaited 2 ms (32 at a time), and samples the
process's resident memory (``VmRSS``) every 50 ms.

Two runs on the in-process bus (its topic holds 1,000): with the bound (the default 128) and,
for contrast, with no bound (the old behaviour, the limit set above N). The Redis Streams run
publishes the same N into Redis while the worker answers; the backlog is Redis's, so the
worker is stopped gracefully once everything is published (what it answered is reported).
State is a real Redis (its keys are the bench's, removed afterwards), so the process's memory
is the router's and the bus's, not the store's.

"Steady" is the RSS once the first 10% of the messages were published (the process warmed
up, its caches and queues filled); the ratio peak / steady is the figure that must stay near 1.
Wall time is until every message is answered (in-process) or published (Streams); CPU per
answer is the process's own CPU time per answered message, which a busy neighbour on a shared
machine barely moves.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from bot.app import Chorus
from bot.bus.base import InProcessBus
from bot.bus.topics import INBOUND, outbound_topic
from bot.events import Author, ChatMessage, ConversationKey, Reply
from bot.llm.guard import block_real_calls
from bot.llm.scripted import ScriptedProvider
from bot.llm.types import LLMRequest, LLMResponse
from bot.ops import aio
from bot.settings import settings_from
from bot.state import connect

MESSAGES = 100_000
CONVERSATIONS = 500
MODEL_SECONDS = 0.002
SAMPLE_EVERY = 0.05
PUBLISHERS = 10  # concurrent publishers (as a gateway's many connections would be)


class SlowScripted(ScriptedProvider):
    """Answers ``ok`` after an awaited ``MODEL_SECONDS`` (a model that takes its time)."""

    def __init__(self) -> None:
        super().__init__(responder=lambda request: "ok")

    async def complete(self, request: LLMRequest) -> LLMResponse:
        await asyncio.sleep(MODEL_SECONDS)
        response = await super().complete(request)
        self.requests.clear()  # the scripted provider keeps every request: not here
        return response


def rss_mb() -> float:
    """This process's resident set size in MiB (Linux ``/proc``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


@dataclass
class Run:
    label: str
    limit: int
    published: int = 0
    answered: int = 0
    seconds: float = 0.0
    cpu_ms_per_message: float = 0.0  # process CPU: a shared machine's load barely moves it
    rss: list[float] = field(default_factory=list)
    steady: float = 0.0
    peak_in_flight: int = 0
    peak_queued: int = 0
    peak_topic: int = 0

    @classmethod
    def from_json(cls, text: str) -> Run:
        return cls(**json.loads(text))

    @property
    def peak(self) -> float:
        return max(self.rss)

    @property
    def ratio(self) -> float:
        return self.peak / self.steady

    def row(self) -> str:
        # (publishing shares the process: CPU per answer means something once all are answered)
        cpu = f"{self.cpu_ms_per_message:.2f} ms" if self.answered == self.published else "-"
        return (
            f"| {self.label} | {self.limit:,} | {self.published:,} | {self.answered:,} "
            f"| {self.seconds:.0f} s | {cpu} "
            f"| {self.steady:.0f} MiB | {self.peak:.0f} MiB "
            f"| {self.ratio:.2f} | {self.peak_in_flight:,} | {self.peak_queued:,} "
            f"| {self.peak_topic:,} |"
        )


def _message(tag: str, n: int) -> ChatMessage:
    return ChatMessage(
        platform="bench",
        id=f"{tag}-{n}",
        conversation=ConversationKey(platform="bench", channel=f"{tag}-c{n % CONVERSATIONS}"),
        author=Author(id=f"{tag}-u{n % 97}", display_name="Bench"),
        text=f"message number {n}, a line of live chat that wants an answer",
        mentions_bot=True,
    )


async def run(
    label: str, redis_url: str, *, bus: str = "memory", limit: int = 128, n: int = MESSAGES
) -> Run:
    tag = f"bp{uuid.uuid4().hex[:8]}"
    settings = settings_from(
        {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "bench",
            "CHORUS_REDIS_URL": redis_url,
            "CHORUS_BUS": bus,
            "CHORUS_BUS_NAMESPACE": tag,
            "CHORUS_INSIGHTS_ENABLED": "false",
            "CHORUS_MAX_TURNS_IN_FLIGHT": str(limit),
            "CHORUS_SHUTDOWN_GRACE": "5",
        }
    )
    app = await Chorus.from_settings(settings, provider=SlowScripted())
    result = Run(label, limit)
    answered = asyncio.Event()

    async def collect() -> None:
        async for delivery in app.bus.consume(outbound_topic("bench"), Reply, group="bench"):
            await delivery.ack()
            result.answered += 1
            if result.answered >= n:
                answered.set()

    def topic_depth() -> int:
        if isinstance(app.bus, InProcessBus):
            return app.bus.backlog().get((INBOUND, "agent"), (0, 0))[0]
        return 0

    async def sample() -> None:
        while True:
            result.rss.append(rss_mb())
            result.peak_in_flight = max(result.peak_in_flight, app.router.in_flight)
            result.peak_queued = max(result.peak_queued, app.router.queued)
            result.peak_topic = max(result.peak_topic, topic_depth())
            if not result.steady and result.published >= n // 10:
                result.steady = result.rss[-1]
            await asyncio.sleep(SAMPLE_EVERY)

    async def publish(first: int) -> None:
        """Every ``PUBLISHERS``-th message (whole conversations: their order holds)."""
        for i in range(first, n, PUBLISHERS):
            await app.bus.publish(INBOUND, _message(tag, i))
            result.published += 1

    tasks = [asyncio.create_task(collect()), asyncio.create_task(sample())]
    await app.start()
    started, cpu = time.perf_counter(), time.process_time()
    try:
        await asyncio.gather(*(publish(first) for first in range(PUBLISHERS)))
        if bus == "memory":
            await asyncio.wait_for(answered.wait(), 1800)
        result.seconds = time.perf_counter() - started
        result.cpu_ms_per_message = (time.process_time() - cpu) * 1000 / max(result.answered, 1)
        result.rss.append(rss_mb())
    finally:
        await app.aclose()  # a graceful stop: the Streams run leaves its backlog in Redis
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await _forget(redis_url, tag)
    return result


async def _forget(redis_url: str, tag: str) -> None:
    redis = await connect.open_redis(redis_url)
    try:
        doomed = [key async for key in redis.scan_iter(match=f"*{tag}*", count=1000)]
        for start in range(0, len(doomed), 1000):
            await redis.delete(*doomed[start : start + 1000])
    finally:
        await redis.aclose()


SCENARIOS = (
    ("in-process (topic of 1,000)", "memory", 128),
    ("Redis Streams", "redis", 128),
    ("in-process, unbounded (before)", "memory", 0),
)


async def main(real_redis: str, n: int = MESSAGES) -> list[str]:
    """Each scenario in a fresh process, so one run's heap never flatters the next's RSS."""
    lines = [
        "## Backpressure: memory while a burst outruns the model",
        "",
        f"{n:,} messages over {CONVERSATIONS} conversations, published by {PUBLISHERS} "
        f"publishers as fast as the bus takes them; the model answers each after "
        f"{MODEL_SECONDS * 1000:g} ms (32 at a time). One fresh process per row.",
        "",
        "| bus | turns in flight limit | published | answered | wall time | CPU per answer "
        "| RSS steady | RSS peak | peak / steady | router held, peak "
        "| queued behind a conversation, peak | topic depth, peak |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, bus, limit in SCENARIOS:
        args = [label, real_redis, bus, str(limit or 10 * n), str(n)]
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.backpressure",
            "--one",
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
        if proc.returncode != 0:
            lines.append(f"| {label} | not measured: {err.decode()[-300:]!r} |" + " |" * 10)
            continue
        lines.append(Run.from_json(out.decode()).row())
    return lines


def _one(label: str, redis_url: str, bus: str, limit: str, n: str) -> None:
    result = aio.run(run(label, redis_url, bus=bus, limit=int(limit), n=int(n)))
    print(json.dumps(dataclasses.asdict(result)))


if __name__ == "__main__":
    block_real_calls()
    if sys.argv[1:2] == ["--one"]:
        _one(*sys.argv[2:7])
    else:
        from bench.memory import REAL

        count = int(sys.argv[1]) if len(sys.argv) > 1 else MESSAGES
        print("\n".join(aio.run(main(REAL, count))))
