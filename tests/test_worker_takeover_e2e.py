"""A SIGKILLed worker's messages are answered by the others within 15 s, on default settings.

Why this test exists: a dead worker holds two things, the partitions it read (a partition
lease) and the messages it had started (a claim each). Both used to last a minute (60 s claims,
10 s partition leases): its messages waited p95 62 s. The defaults are now a 5 s partition lease
and a 10 s claim, renewed every third of a lease while a turn runs, so the survivors take the
partitions over after at most ~5 s and each started message after at most ~10 s.

Real parts: three ``chorus run --role worker`` processes with the default lease settings (none
is set here), real Redis, the official Anthropic SDK against a loopback server that answers
after 300 ms (so turns are in flight when the kill comes). A steady load over 30
conversations; once a worker holds pending entries it is SIGKILLed. Every message must be
answered exactly once, in order per conversation, and each message the victim held is answered
within 15 s of the kill, read off Redis's own clock (the reply's stream id against ``TIME`` at
the kill), never the test's.
"""

from __future__ import annotations

import asyncio
import signal
import socket
from collections import Counter
from pathlib import Path
from typing import Any, cast

from aiohttp import web
from redis.asyncio import Redis

from bot.bus.streams import FIELD, RedisStreamsBus
from bot.bus.topics import INBOUND, outbound_topic
from bot.events import Author, ChatMessage, ConversationKey, Reply
from bot.state import keys
from tests.bus_leases import wait_balanced
from tests.loopback.anthropic_server import AnthropicServer
from tests.test_chat_e2e import ROOT, base_env, spawn_chorus

PARTITIONS = 16  # the default
CONVERSATIONS = 30
ROUNDS = 16  # one message per conversation per round
TAKEOVER_LIMIT_MS = 15_000


class ThinkingAnthropic(AnthropicServer):
    """Answers after 300 ms, so a worker always has turns in flight."""

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(0.3)
        return await super()._messages(request)


def worker_env(tmp_path: Path, redis_url: str, namespace: str, model_url: str) -> dict[str, str]:
    """The environment of a ``chorus run --role worker`` on the Streams bus and a loopback
    Anthropic model, insights off (shared with the rolling-restart test)."""
    env = base_env(tmp_path)
    env.update(
        CHORUS_REDIS_URL=redis_url,
        CHORUS_BUS="redis",
        CHORUS_BUS_NAMESPACE=namespace,
        CHORUS_MODEL="anthropic:claude-test",
        ANTHROPIC_API_KEY="test-key-0123456789",
        ANTHROPIC_BASE_URL=model_url,
        CHORUS_INSIGHTS_ENABLED="false",
    )
    return env


async def _pending(redis: Redis, tag: str) -> dict[str, list[str]]:
    """Consumer name -> the inbound entry ids it holds unacknowledged."""
    held: dict[str, list[str]] = {}
    for p in range(PARTITIONS):
        rows = cast(
            "list[dict[str, Any]]",
            await redis.xpending_range(keys.bus_stream(INBOUND, p, tag), "agent", "-", "+", 1000),
        )
        for row in rows:
            held.setdefault(str(row["consumer"]), []).append(f"{p}:{row['message_id']}")
    return held


async def _message_ids(redis: Redis, tag: str, entries: list[str]) -> set[str]:
    ids: set[str] = set()
    for entry in entries:
        partition, entry_id = entry.split(":", 1)
        rows = cast(
            "list[tuple[str, dict[str, str]]]",
            await redis.xrange(keys.bus_stream(INBOUND, int(partition), tag), entry_id, entry_id),
        )
        ids.update(ChatMessage.model_validate_json(f[FIELD]).id for _, f in rows)
    return ids


async def _replies(redis: Redis, tag: str) -> list[tuple[int, Reply]]:
    """(Redis time of the XADD in ms, reply) for every reply, each stream in order."""
    found: list[tuple[int, Reply]] = []
    for p in range(PARTITIONS):
        rows = cast(
            "list[tuple[str, dict[str, str]]]",
            await redis.xrange(keys.bus_stream(outbound_topic("console"), p, tag)),
        )
        found.extend(
            (int(entry_id.split("-")[0]), Reply.model_validate_json(fields[FIELD]))
            for entry_id, fields in rows
        )
    return found


async def test_a_killed_workers_messages_are_answered_by_the_others_within_15s(
    production_store: tuple[str, Redis], key_tag: str, tmp_path: Path
) -> None:
    (real_redis_url, redis_client), tag = production_store, key_tag
    async with ThinkingAnthropic() as model:
        model.default_reply = lambda body: "noted"
        env = worker_env(tmp_path, real_redis_url, tag, model.base_url)
        env.update(CHORUS_LOG_LEVEL="WARNING")
        logs = [(tmp_path / f"w{n}.log").open("wb") for n in range(3)]
        workers = [await spawn_chorus(["run", "--role", "worker"], env, ROOT) for _ in range(3)]
        drains = [
            asyncio.create_task(_copy(pipe, log))
            for proc, log in zip(workers, logs, strict=True)
            for pipe in (proc.stdout, proc.stderr)
        ]
        publisher = RedisStreamsBus(redis_client, consumer="test", namespace=tag)
        convs = [ConversationKey(platform="console", channel=f"{tag}-c{c}") for c in range(30)]
        order: dict[str, list[str]] = {conv.channel: [] for conv in convs}
        try:
            await asyncio.wait_for(wait_balanced(redis_client, tag, PARTITIONS, 3), 60)
            victim_pid, held, killed_ms = 0, set[str](), 0
            for n in range(ROUNDS):
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
                    await publisher.publish(INBOUND, message)
                if n == ROUNDS // 2:  # replies flow: kill a worker that is mid-turn
                    victim_pid, held, killed_ms = await _kill_a_busy_worker(
                        redis_client, tag, workers
                    )
                await asyncio.sleep(0.5)
            await publisher.drain(timeout=90)  # every inbound entry acked by the group
            replies = await _replies(redis_client, tag)
        finally:
            await publisher.close()
            for proc in workers:
                if proc.returncode is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in workers:
                await asyncio.wait_for(proc.wait(), 30)
            await asyncio.gather(*drains, return_exceptions=True)
            for log in logs:
                log.close()

    answered = Counter(reply.reply_to_id for _, reply in replies)
    assert [m for m, count in answered.items() if count > 1] == [], "doubled replies"
    assert set(answered) == {mid for ids in order.values() for mid in ids}, "lost replies"
    for channel, ids in order.items():
        got = [r.reply_to_id for _, r in replies if r.conversation.channel == channel]
        assert got == ids, f"{channel} answered out of order"
    assert victim_pid and held, "the victim held messages when it died"
    waits = sorted(at - killed_ms for at, r in replies if r.reply_to_id in held)
    assert len(waits) == len(held)
    assert waits[-1] <= TAKEOVER_LIMIT_MS, f"held messages answered after {waits} ms"


async def _kill_a_busy_worker(
    redis: Redis, tag: str, workers: list[asyncio.subprocess.Process]
) -> tuple[int, set[str], int]:
    """SIGKILL a worker that holds pending entries; (its pid, the message ids it held, the
    Redis time of the kill in ms)."""
    host = socket.gethostname()
    by_name = {f"{host}-{proc.pid}": proc for proc in workers}
    while True:
        pending = await _pending(redis, tag)
        busy = [name for name in by_name if pending.get(name)]
        if busy:
            break
        await asyncio.sleep(0.05)  # other processes' state
    victim = by_name[busy[0]]
    victim.send_signal(signal.SIGKILL)
    await victim.wait()
    seconds, micros = await redis.time()
    held = await _message_ids(redis, tag, (await _pending(redis, tag)).get(busy[0], []))
    return victim.pid, held, seconds * 1000 + micros // 1000


async def _copy(stream: asyncio.StreamReader | None, sink: Any) -> None:
    """Keep a child's pipe drained (into its log file) so it never blocks on a full pipe."""
    if stream is None:
        return
    while chunk := await stream.read(65536):
        sink.write(chunk)
