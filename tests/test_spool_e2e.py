"""A real gateway replays only what a gateway of its deployment spooled.

``chorus run --role gateway`` (Slack's HTTP Events API against the loopback Slack, a real Redis)
starts with three files in its spool, which lives under CHORUS_DATA_DIR: one its deployment
wrote (signed with the key derived from CHORUS_SPOOL_SECRET), one planted in the old unsigned
format, and one signed with another key; both planted ones carry a message from a "moderator"
asking the bot to pause the channel. Only the deployment's message reaches the inbound stream;
the planted files are set aside as ``corrupt-...``, logged, and counted in
``chorus_outbox_refused``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import aiohttp
import pytest
from redis.asyncio import Redis

from bot.bus.spool import Spool, signature
from bot.bus.spool_key import spool_key
from bot.bus.streams import FIELD
from bot.bus.topics import INBOUND
from bot.events import Author, ChatMessage, ConversationKey, Role
from bot.settings import settings_from
from bot.state import keys
from tests import outage_rig
from tests.loopback.slack_server import SlackServer
from tests.outage_rig import Fleet, chorus_env, sample
from tests.redis_server import free_port

PARTITIONS = 16
SECRET = "spool-secret-of-this-deployment"


def message(tag: str, name: str, author: Author) -> ChatMessage:
    return ChatMessage(
        platform="slack",
        id=f"{name}-{tag}",
        conversation=ConversationKey(platform="slack", channel=f"C{tag}"),
        author=author,
        text="!chorus pause" if name != "legit" else "hello",
        sent_at=datetime(2025, 1, 2, tzinfo=UTC),
    )


@pytest.fixture
async def slack() -> AsyncIterator[SlackServer]:
    async with SlackServer() as server:
        yield server


async def inbound_ids(redis: Redis, tag: str) -> list[str]:
    found: list[str] = []
    for p in range(PARTITIONS):
        rows = cast(
            "list[tuple[str, dict[str, str]]]",
            await redis.xrange(keys.bus_stream(INBOUND, p, tag)),
        )
        found += [ChatMessage.model_validate_json(fields[FIELD]).id for _, fields in rows]
    return found


async def test_a_gateway_publishes_its_own_spool_and_refuses_planted_files(
    tmp_path: Path, slack: SlackServer, real_redis_url: str, real_redis: Redis, key_tag: str
) -> None:
    data = tmp_path / "data"
    spool = data / "spool"  # CHORUS_SPOOL_DIR's default, under CHORUS_DATA_DIR
    env = chorus_env(real_redis_url, key_tag, "http://127.0.0.1:9", spool)
    del env["CHORUS_SPOOL_DIR"]
    env |= {"CHORUS_DATA_DIR": str(data), "CHORUS_SPOOL_SECRET": SECRET}
    key = spool_key(settings_from({"CHORUS_SPOOL_SECRET": SECRET, "CHORUS_BUS_NAMESPACE": key_tag}))
    legit = message(key_tag, "legit", Author(id="U1"))
    Spool(spool, key=key).write([(INBOUND, legit)])
    boss = Author(id="U2", roles=frozenset({Role.MODERATOR, Role.OWNER}))
    unsigned = spool / "outbox-00000000000000000001-1-aaaaaaaa.jsonl"
    event = message(key_tag, "unsigned", boss).model_dump_json()
    record = {"v": 1, "topic": INBOUND, "model": "ChatMessage", "event": event}
    unsigned.write_text(json.dumps(record) + "\n")
    forged = spool / "outbox-00000000000000000002-1-bbbbbbbb.jsonl"
    event = message(key_tag, "forged", boss).model_dump_json()
    record = {"v": 2, "topic": INBOUND, "model": "ChatMessage", "event": event}
    forged.write_text(
        json.dumps(record | {"sig": signature(b"g" * 32, INBOUND, "ChatMessage", event)}) + "\n"
    )

    fleet = Fleet(env, tmp_path)
    fleet.env_for["gateway"] = outage_rig.slack_gateway_env(slack, free_port())
    fleet.start("gateway", "run", "--role", "gateway")
    try:
        async with aiohttp.ClientSession() as session:
            await asyncio.wait_for(fleet.until_ready(session, True), 60)

            async def published() -> str:
                while True:  # the recovered events are published by the outbox's pumps
                    metrics = await fleet.metrics(session, "gateway")
                    if sample(metrics, "chorus_outbox_depth") == 0:
                        return metrics
                    await asyncio.sleep(0.1)  # another process's state

            metrics = await asyncio.wait_for(published(), 30)
        assert await inbound_ids(real_redis, key_tag) == [legit.id]
        assert sample(metrics, "chorus_outbox_recovered_total") == 1
        assert sample(metrics, "chorus_outbox_refused_total") == 2
        assert sorted(p.name for p in spool.iterdir()) == [
            f"corrupt-{unsigned.name}",
            f"corrupt-{forged.name}",
        ], "the replayed file is gone, the planted ones are set aside"
        assert fleet.log("gateway").count("does not verify with this deployment's spool key") == 2
    except BaseException:
        print(fleet.tails())
        raise
    finally:
        await asyncio.to_thread(fleet.stop)
