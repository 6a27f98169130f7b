"""Scale-out benchmark: answered messages per second with one and with two worker processes.

Real ``chorus run --role worker`` processes consume the Redis Streams bus on a real Redis and
answer through the anthropic SDK against a loopback server; this process publishes a burst of
messages over many conversations and times until every reply is on the outbound stream.

Why CPU is counted too: on a small machine the load generator, the loopback model server,
Redis and the workers share the same cores, so wall-clock throughput stops at the machine, not
at the bus. Each run therefore also reports where the CPU went (the workers' own CPU from
``/proc/<pid>/stat``, Redis's from ``INFO cpu``, this process's from ``process_time``) and how
busy the machine was, plus the Redis commands executed per answered message (``INFO
commandstats``). CPU per message rises whenever processes compete for cores, so the
machine-independent test of coordination cost is the command count: if it stays flat from one
worker to two, a second worker adds no shared work, and throughput scales with the cores the
workers get; if the machine is already saturated with one worker, a second cannot add speed.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from redis.asyncio import Redis

from bot.bus.streams import RedisStreamsBus
from bot.bus.topics import INBOUND, outbound_topic
from bot.events import Author, ChatMessage, ConversationKey, Reply
from bot.state import connect
from tests.bus_leases import wait_balanced
from tests.loopback.anthropic_server import AnthropicServer

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS: int = inspect.signature(RedisStreamsBus).parameters["partitions"].default  # as run
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class ScaleRun:
    workers: int
    messages: int
    elapsed: float
    worker_cpu: float | None  # seconds, all workers together; None where /proc is missing
    redis_cpu: float | None
    harness_cpu: float  # load generator, collector and loopback model server (this process)
    commands: Counter[str]  # Redis commands executed during the burst, by name (all clients)

    @property
    def rate(self) -> float:
        return self.messages / self.elapsed

    def per_message_ms(self, seconds: float | None) -> float | None:
        return None if seconds is None else seconds / self.messages * 1000

    @property
    def worker_cores(self) -> float | None:
        """How many cores' worth of CPU the workers used together during the burst."""
        return None if self.worker_cpu is None else self.worker_cpu / self.elapsed

    @property
    def machine_busy(self) -> float | None:
        """The share of the machine's cores in use during the timed burst."""
        if self.worker_cpu is None or self.redis_cpu is None:
            return None
        total = self.worker_cpu + self.redis_cpu + self.harness_cpu
        return total / (self.elapsed * (os.cpu_count() or 1))


def _proc_cpu(pid: int) -> float | None:
    """User plus system CPU seconds of a live process (Linux ``/proc``; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (stat fields 14 and 15)


async def _redis_cpu(redis: Redis) -> float | None:
    """Redis's own CPU seconds (``INFO cpu``); None when the server hides them."""
    info = await redis.info("cpu")
    try:
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    except (KeyError, TypeError, ValueError):
        return None


async def _redis_commands(redis: Redis) -> Counter[str]:
    """Commands Redis has executed so far, by name (``INFO commandstats``)."""
    stats = await redis.info("commandstats")
    return Counter(
        {
            name.removeprefix("cmdstat_"): int(row["calls"])
            for name, row in stats.items()
            if isinstance(row, dict) and "calls" in row
        }
    )


def _delta(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else after - before


def _workers_cpu(procs: list[asyncio.subprocess.Process]) -> float | None:
    readings = [_proc_cpu(p.pid) for p in procs]
    return None if None in readings else sum(r for r in readings if r is not None)


async def _run(url: str, workers: int, messages: int) -> ScaleRun:
    namespace = f"scale{uuid.uuid4().hex[:8]}"
    async with AnthropicServer() as server:
        server.default_reply = lambda body: "ok"
        env = {k: v for k, v in os.environ.items() if k in {"PATH", "HOME", "LANG"}} | {
            "CHORUS_BLOCK_REAL_LLM": "1",
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "bench",
            "ANTHROPIC_BASE_URL": server.base_url,
            "CHORUS_REDIS_URL": url,
            "CHORUS_BUS": "redis",
            "CHORUS_BUS_NAMESPACE": namespace,
            "CHORUS_INSIGHTS_ENABLED": "false",
            "CHORUS_HEALTH_PORT": "0",
            "CHORUS_LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(ROOT),
        }
        procs = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "bot.cli",
                "run",
                "--role",
                "worker",
                env=env,
                cwd=ROOT,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
            for _ in range(workers)
        ]
        redis = await connect.open_redis(url)
        bus = RedisStreamsBus(redis, consumer="bench", namespace=namespace, block_ms=100)
        seen: set[str] = set()
        all_in = asyncio.Event()
        warm = asyncio.Event()
        warm_ids: set[str] = set()

        async def collect() -> None:
            async for delivery in bus.consume(outbound_topic("bench"), Reply, group="outbound"):
                rid = delivery.event.reply_to_id or ""
                if rid.startswith("warm"):
                    warm_ids.add(rid)
                    if len(warm_ids) >= workers * 8:
                        warm.set()
                else:
                    seen.add(rid)
                    if len(seen) >= messages:
                        all_in.set()
                await delivery.ack()

        collector = asyncio.create_task(collect())
        tag = uuid.uuid4().hex[:6]

        def message(i: int, prefix: str = "") -> ChatMessage:
            return ChatMessage(
                platform="bench",
                id=f"{prefix}{tag}-{i}",
                conversation=ConversationKey(platform="bench", channel=f"{tag}-{i % 64}"),
                author=Author(id=f"u{i % 64}"),
                text=f"hello {i}",
                mentions_bot=True,
            )

        try:
            for i in range(workers * 8):  # every worker up, holding partitions, imports warm
                await bus.publish(INBOUND, message(i, "warm"))
            await asyncio.wait_for(warm.wait(), 120)
            await asyncio.wait_for(wait_balanced(redis, namespace, PARTITIONS, workers), 120)
            cpu_before = (_workers_cpu(procs), await _redis_cpu(redis), time.process_time())
            commands_before = await _redis_commands(redis)
            started = time.perf_counter()
            for i in range(messages):
                await bus.publish(INBOUND, message(i))
            await asyncio.wait_for(all_in.wait(), 600)
            elapsed = time.perf_counter() - started
            cpu_after = (_workers_cpu(procs), await _redis_cpu(redis), time.process_time())
            commands = await _redis_commands(redis) - commands_before
        finally:
            for proc in procs:
                proc.terminate()
            await asyncio.gather(*(p.wait() for p in procs))
            await bus.close()
            await asyncio.gather(collector, return_exceptions=True)
            doomed = [k async for k in redis.scan_iter(match=f"*{namespace}*")]
            if doomed:
                await redis.delete(*doomed)
            await redis.aclose()
    return ScaleRun(
        workers=workers,
        messages=messages,
        elapsed=elapsed,
        worker_cpu=_delta(cpu_after[0], cpu_before[0]),
        redis_cpu=_delta(cpu_after[1], cpu_before[1]),
        harness_cpu=cpu_after[2] - cpu_before[2],
        commands=commands,
    )


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} ms"


def _row(run: ScaleRun, base: ScaleRun) -> str:
    busy = run.machine_busy
    return (
        f"| {run.workers} | {run.rate:,.0f} | {run.rate / base.rate:.2f} "
        f"| {_ms(run.per_message_ms(run.worker_cpu))} | {_ms(run.per_message_ms(run.redis_cpu))} "
        f"| {_ms(run.per_message_ms(run.harness_cpu))} "
        f"| {'n/a' if run.worker_cores is None else f'{run.worker_cores:.2f}'} "
        f"| {'n/a' if busy is None else f'{busy:.0%}'} |"
    )


def _commands_table(one: ScaleRun, two: ScaleRun) -> list[str]:
    """Redis commands per answered message, by command: what a second worker adds in work that
    does not depend on how fast the machine is (the harness's publishes and reads included)."""
    names = sorted(
        {n for run in (one, two) for n, c in run.commands.items() if c / run.messages >= 0.05},
        key=lambda n: -two.commands[n],
    )
    rows = [
        "| Redis commands per answered message | 1 worker | 2 workers |",
        "|---|---|---|",
    ]
    for name in names:
        rows.append(
            f"| {name} | {one.commands[name] / one.messages:.2f} "
            f"| {two.commands[name] / two.messages:.2f} |"
        )
    total = [sum(run.commands.values()) / run.messages for run in (one, two)]
    rows.append(f"| all commands | {total[0]:.2f} | {total[1]:.2f} |")
    return rows


async def main(url: str, messages: int = 600) -> list[str]:
    lines = [
        "## Scale-out: worker processes over the Redis Streams bus",
        "",
        f"| workers | answered messages/s | speed-up | worker CPU per message (all workers) "
        f"| Redis CPU per message | harness CPU per message | cores used by workers "
        f"| machine busy ({os.cpu_count()} cores) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    try:
        one = await _run(url, 1, messages)
        two = await _run(url, 2, messages)
    except Exception as exc:
        return [*lines, f"| not measured: {exc!r} | | | | | | | |"]
    lines += [_row(one, one), _row(two, one)]
    lines += ["", *_commands_table(one, two)]
    return lines
