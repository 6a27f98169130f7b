"""A user's quota holds across three ``chorus run --role worker`` processes on a real Redis: one
user writes 32 messages in 16 conversations (one per inbound partition, so every worker gets
some); with ``CHORUS_QUOTA_USER_MESSAGES_HOUR=5`` the loopback model server receives exactly 5
requests, the user gets exactly one notice, the rest are settled without a reply, and every
worker refused some of them (each read and counted the one shared limit)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import cast

from redis.asyncio import Redis

import prompts
from bot.bus.streams import FIELD, RedisStreamsBus
from bot.bus.topics import INBOUND, outbound_topic
from bot.events import Author, ChatMessage, ConversationKey, Reply
from bot.safety.audit import read_audit
from bot.state import keys
from tests.bus_leases import wait_balanced
from tests.loopback.anthropic_server import AnthropicServer
from tests.test_chat_e2e import ROOT, spawn_chorus
from tests.test_worker_takeover_e2e import worker_env

PARTITIONS = 16
LIMIT = 5


def conversations(bus: RedisStreamsBus, tag: str) -> list[ConversationKey]:
    """One conversation per inbound partition."""
    found: dict[int, ConversationKey] = {}
    n = 0
    while len(found) < PARTITIONS:
        conv = ConversationKey(platform="console", channel=f"{tag}-c{n}")
        probe = ChatMessage(
            platform="console", id="probe", conversation=conv, author=Author(id="x"), text="x"
        )
        found.setdefault(bus.partition_of(probe), conv)
        n += 1
    return [found[p] for p in sorted(found)]


async def replies(redis: Redis, tag: str) -> list[Reply]:
    found: list[Reply] = []
    for p in range(PARTITIONS):
        rows = cast(
            "list[tuple[str, dict[str, str]]]",
            await redis.xrange(keys.bus_stream(outbound_topic("console"), p, tag)),
        )
        found += [Reply.model_validate_json(fields[FIELD]) for _, fields in rows]
    return found


async def test_a_users_quota_holds_across_three_workers(
    production_store: tuple[str, Redis], key_tag: str, tmp_path: Path
) -> None:
    real_redis_url, real_redis = production_store  # one server, then a cluster
    tag = key_tag
    async with AnthropicServer() as model:
        model.default_reply = lambda body: "answered"
        env = worker_env(tmp_path, real_redis_url, tag, model.base_url)
        env |= {"CHORUS_QUOTA_USER_MESSAGES_HOUR": str(LIMIT), "PYTHONPATH": str(ROOT)}
        logs = [tmp_path / f"w{n}.log" for n in range(3)]
        workers = [await spawn_chorus(["run", "--role", "worker"], env, ROOT) for _ in range(3)]
        drains = [
            asyncio.create_task(_copy(pipe, path))
            for proc, path in zip(workers, logs, strict=True)
            for pipe in (proc.stdout, proc.stderr)
        ]
        publisher = RedisStreamsBus(real_redis, consumer="test", namespace=tag)
        try:
            await asyncio.wait_for(wait_balanced(real_redis, tag, PARTITIONS, 3), 60)
            ada = Author(id=f"ada-{tag}", display_name="Ada")
            for round_ in range(2):
                for conv in conversations(publisher, tag):
                    message = ChatMessage(
                        platform="console",
                        id=f"{conv.channel}-{round_}",
                        conversation=conv,
                        author=ada,
                        text=f"question {round_}",
                        is_direct=True,
                    )
                    await publisher.publish(INBOUND, message)
            await publisher.drain(timeout=90)  # every message acked: answered or settled
            found = await replies(real_redis, tag)
            audit = await read_audit(real_redis, namespace=tag, count=1000)
        finally:
            await publisher.close()
            for proc in workers:
                proc.send_signal(signal.SIGTERM)
            for proc in workers:
                await asyncio.wait_for(proc.wait(), 60)
            await asyncio.gather(*drains, return_exceptions=True)

    assert [proc.returncode for proc in workers] == [0, 0, 0]
    assert len(model.requests) == LIMIT  # no model call over the limit, on any worker
    notice = prompts.render("safety/quota_user", limit="5 messages an hour", wait="").split(
        " I can"
    )[0]
    notices = [r for r in found if r.text.startswith(notice)]
    assert len(notices) == 1, [r.text for r in found]
    assert len(found) == LIMIT + 1
    quota = [e for e in audit if e.direction == "quota"]
    assert sorted(e.action for e in quota) == ["noticed"] + ["silenced"] * (2 * PARTITIONS - 6)
    refusing = [path for path in logs if "quota:user_messages_hour" in path.read_text()]
    assert len(refusing) == 3, "every worker applied the shared limit"


async def _copy(stream: asyncio.StreamReader | None, path: Path) -> None:
    if stream is None:
        return
    with path.open("ab") as sink:
        while chunk := await stream.read(65536):
            sink.write(chunk)
            sink.flush()
