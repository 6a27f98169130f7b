"""A rolling restart of the workers under load: nothing lost, nothing doubled, nobody waits.

Real parts: three ``chorus run --role worker`` processes on the Redis Streams bus of a real
Redis, answering through the official Anthropic SDK against a loopback server that takes
300 ms per answer. A steady load over 20 conversations runs while each worker in turn gets
SIGTERM, exits, and is started again (the next one only once the new process has taken its
share of the partitions, as a Deployment's rolling update does).

What a graceful stop promises (docs/architecture.md, "Failure semantics"): each worker exits 0
after finishing its turns in flight (its drain log line says none was abandoned), every message
is answered exactly once and in order per conversation, and no message waits for a lease to
lapse: the claim lease is set to 60 s and the partition lease to 30 s here, and the slowest
message (inbound ``XADD`` to reply ``XADD``, both on Redis's clock) takes well under either.
No worker ever logs that it waited for another worker's claim.
"""

from __future__ import annotations

import asyncio
import re
import signal
import socket
from collections import Counter
from pathlib import Path
from typing import IO

from redis.asyncio import Redis

from bot.bus.streams import RedisStreamsBus
from bot.bus.topics import INBOUND
from bot.events import Author, ChatMessage, ConversationKey
from tests.bus_leases import wait_balanced
from tests.test_chat_e2e import ROOT, spawn_chorus
from tests.test_worker_takeover_e2e import (
    PARTITIONS,
    ThinkingAnthropic,
    _copy,
    _pending,
    _replies,
    worker_env,
)

CONVERSATIONS = 20
WORKERS = 3
CLAIM_LEASE_MS = 60_000
PARTITION_LEASE_MS = 30_000
SLOWEST_MS = (
    25_000  # under both leases: nothing waited for one to lapse (slack for a loaded machine)
)


class Worker:
    """One ``chorus run --role worker`` process, its log kept in a file."""

    def __init__(self, proc: asyncio.subprocess.Process, log: IO[bytes]) -> None:
        self.proc, self.log = proc, log
        self.pipes = [asyncio.create_task(_copy(p, log)) for p in (proc.stdout, proc.stderr)]

    @classmethod
    async def start(cls, env: dict[str, str], log: Path) -> Worker:
        proc = await spawn_chorus(["run", "--role", "worker"], env, ROOT)
        return cls(proc, log.open("wb"))

    async def stop(self) -> int:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(self.proc.wait(), 60)
        await asyncio.gather(*self.pipes, return_exceptions=True)
        self.log.close()
        return code


async def _busy(redis: Redis, tag: str, worker: Worker) -> None:
    """Return once ``worker`` holds delivered, unacked messages (it is mid-turn)."""
    name = f"{socket.gethostname()}-{worker.proc.pid}"
    while True:
        if (await _pending(redis, tag)).get(name):
            return
        await asyncio.sleep(0.05)  # another process's state


def _ms(entry_id: str) -> int:
    return int(entry_id.rpartition(":")[2].split("-")[0])


async def test_a_rolling_restart_under_load_loses_doubles_and_delays_nothing(
    production_store: tuple[str, Redis], key_tag: str, tmp_path: Path
) -> None:
    real_redis_url, real_redis = production_store  # one server, then a cluster
    tag = key_tag
    async with ThinkingAnthropic() as model:
        model.default_reply = lambda body: "noted"
        env = worker_env(tmp_path, real_redis_url, tag, model.base_url)
        env.update(
            CHORUS_LOG_LEVEL="INFO",
            CHORUS_CLAIM_LEASE_MS=str(CLAIM_LEASE_MS),
            CHORUS_PARTITION_LEASE_MS=str(PARTITION_LEASE_MS),
        )
        logs = [tmp_path / f"w{n}.log" for n in range(2 * WORKERS)]
        workers = [await Worker.start(env, logs[n]) for n in range(WORKERS)]
        stopped: list[Worker] = []
        publisher = RedisStreamsBus(real_redis, consumer="test", namespace=tag)
        convs = [
            ConversationKey(platform="console", channel=f"{tag}-c{c}") for c in range(CONVERSATIONS)
        ]
        order: dict[str, list[str]] = {conv.channel: [] for conv in convs}
        sent_ms: dict[str, int] = {}
        restarted = asyncio.Event()

        async def load() -> None:
            """One message per conversation every 0.5 s, until two rounds after the restarts."""
            n, after = 0, 0
            while after < 2:
                for conv in convs:
                    message = ChatMessage(
                        platform="console",
                        id=f"{conv.channel}-{n}",
                        conversation=conv,
                        author=Author(id="ada"),
                        text=f"message {n}",
                        is_direct=True,
                    )
                    order[conv.channel].append(message.id)
                    sent_ms[message.id] = _ms(await publisher.publish(INBOUND, message))
                n, after = n + 1, after + restarted.is_set()
                await asyncio.sleep(0.5)  # the load's pace, not a wait for an outcome

        try:
            await asyncio.wait_for(wait_balanced(real_redis, tag, PARTITIONS, WORKERS), 60)
            loading = asyncio.create_task(load())
            for n in range(WORKERS):  # each in turn, the next once the new one has its share
                old = workers[n]
                await asyncio.wait_for(_busy(real_redis, tag, old), 60)  # mid-turn
                stopped.append(old)
                assert await old.stop() == 0, f"worker {n} did not exit cleanly"
                workers[n] = await Worker.start(env, logs[WORKERS + n])
                await asyncio.wait_for(wait_balanced(real_redis, tag, PARTITIONS, WORKERS), 60)
            restarted.set()
            await asyncio.wait_for(loading, 60)
            await publisher.drain(timeout=90)  # every inbound entry acked by the group
            replies = await _replies(real_redis, tag)
        finally:
            await publisher.close()
            for worker in workers:
                await worker.stop()

    answered = Counter(reply.reply_to_id for _, reply in replies)
    assert [m for m, count in answered.items() if count > 1] == [], "doubled replies"
    assert set(answered) == set(sent_ms), "lost replies"
    for channel, ids in order.items():
        got = [r.reply_to_id for _, r in replies if r.conversation.channel == channel]
        assert got == ids, f"{channel} answered out of order"
    waits = sorted(at - sent_ms[r.reply_to_id or ""] for at, r in replies)
    assert waits[-1] < SLOWEST_MS, f"slowest answers took {waits[-5:]} ms"

    texts = {path.name: path.read_text(errors="replace") for path in logs}
    assert not any("claimed by another worker" in text for text in texts.values())
    assert not any("lost partition leases" in text for text in texts.values())
    finished = 0
    for path in logs[:WORKERS]:  # the stopped ones: one drain each, nothing abandoned
        drains = re.findall(r"shutdown drain finished.*", texts[path.name])
        assert len(drains) == 1, texts[path.name][-2000:]
        assert "abandoned=0" in drains[0], drains[0]
        finished += int(re.findall(r" finished=(\d+)", drains[0])[0])
    assert finished > 0, "the workers were stopped mid-turn and finished those turns"
