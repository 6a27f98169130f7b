"""A pause from the admin dashboard reaches two real worker processes holding busy channels.

Real parts: two ``chorus run --role worker`` processes on the Redis Streams bus of a real Redis
(answering through the Anthropic SDK against its loopback server), and the dashboard's web app
in this test's process, neither worker, over the same Redis. Two Twitch channels are chosen so
that each worker holds one (their bus partitions are leased by different workers), and both
are kept busy: a chat line every half second, so neither worker ever re-reads a channel's
state on its own. The dashboard pauses both; a mention sent afterwards in each is then
decided ``quiet``/``paused`` by whichever worker holds it (the pause feed, followed once a
second), and after the dashboard's resume a mention is answered again in each.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import cast

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from bot.admin.server import AdminServer
from bot.admin.views import Sources
from bot.bus.streams import RedisStreamsBus
from bot.bus.topics import INBOUND
from bot.events import Author, ChatMessage, ConversationKey
from bot.memory.buffers import MemoryStore
from bot.safety.audit import Audit
from bot.settings import Settings
from bot.state import keys, turnlog
from bot.state.history import HistoryStore
from tests.bus_leases import wait_balanced
from tests.loopback.anthropic_server import AnthropicServer
from tests.test_chat_e2e import ROOT, spawn_chorus
from tests.test_worker_takeover_e2e import PARTITIONS, worker_env

TOKEN = "admin-token-0123456789abcdef"
LIMIT = 90.0  # generous: a loaded 2-core machine; each wait ends as soon as its event happens


async def holders(redis: Redis, tag: str) -> list[str]:
    """The consumer leasing each inbound partition."""
    names = [keys.bus_lease(INBOUND, "agent", p, tag) for p in range(PARTITIONS)]
    found = cast("list[str | None]", await redis.mget(names))
    return [(h or "").split(":")[0] for h in found]


async def decided(redis: Redis, conv: ConversationKey, message_id: str) -> turnlog.TurnRecord:
    """The worker's decision about one message (from the turn log), once it is made."""
    while True:
        for record in await turnlog.read_log(redis, conv):
            if record.message_id == message_id:
                return record
        await asyncio.sleep(0.1)  # another process's state: a modest poll


@asynccontextmanager
async def dashboard(
    redis: Redis, tag: str
) -> AsyncIterator[TestClient[web.Request, web.Application]]:
    sources = Sources(
        settings=Settings(),
        redis=redis,
        memory=MemoryStore(redis),
        history=HistoryStore(redis, max_messages=20, ttl_seconds=3600),
        audit=Audit(redis, namespace=tag),
    )
    async with TestClient(TestServer(AdminServer(sources, TOKEN).app())) as http:
        yield http


async def test_a_dashboard_pause_reaches_both_workers_while_their_channels_are_busy(
    real_redis_url: str, real_redis: Redis, key_tag: str, tmp_path: Path
) -> None:
    tag = key_tag
    async with AnthropicServer() as model:
        model.default_reply = lambda body: "noted"
        env = worker_env(tmp_path, real_redis_url, tag, model.base_url)
        env.update(
            CHORUS_ENGAGE_MIN_PENDING="1000",  # chat lines wait; only mentions are answered
            CHORUS_ENGAGE_CHANNEL_COOLDOWN_SECONDS="0",
            CHORUS_ENGAGE_MIN_GAP_SECONDS="0",
        )
        workers = [await spawn_chorus(["run", "--role", "worker"], env, ROOT) for _ in range(2)]
        publisher = RedisStreamsBus(real_redis, consumer="test", namespace=tag)
        ids = itertools.count()

        def message(conv: ConversationKey, text: str, *, mention: bool) -> ChatMessage:
            n = next(ids)
            return ChatMessage(
                platform="twitch",
                id=f"{tag}-{n}",
                conversation=conv,
                author=Author(id=f"viewer{n}", display_name=f"viewer{n}"),
                text=text,
                mentions_bot=mention,
                ambient=not mention,
            )

        async def mention(conv: ConversationKey) -> turnlog.TurnRecord:
            sent = message(conv, "hey bot, still there?", mention=True)
            await publisher.publish(INBOUND, sent)
            return await decided(real_redis, conv, sent.id)

        try:
            await asyncio.wait_for(wait_balanced(real_redis, tag, PARTITIONS, 2), LIMIT)
            held = await holders(real_redis, tag)
            convs: dict[str, ConversationKey] = {}
            for n in itertools.count():  # one channel held by each worker
                conv = ConversationKey(platform="twitch", channel=f"{tag}c{n}")
                owner = held[publisher.partition_of(message(conv, "x", mention=False))]
                convs.setdefault(owner, conv)
                if len(convs) == 2:
                    break
            channels = list(convs.values())

            async def chatter() -> None:
                """A line in each channel every half second: neither is ever quiet."""
                while True:
                    for conv in channels:
                        await publisher.publish(INBOUND, message(conv, "gg", mention=False))
                    await asyncio.sleep(0.5)  # the chat's pace, not a wait for an outcome

            chatting = asyncio.create_task(chatter())
            try:
                async with asyncio.timeout(LIMIT):
                    for conv in channels:  # each worker holds its channel, live
                        assert (await mention(conv)).decision == "answered"
                    async with dashboard(real_redis, tag) as http:
                        bearer = {"Authorization": f"Bearer {TOKEN}"}
                        for paused in ("1", "0"):
                            started = time.monotonic()
                            for conv in channels:
                                form = {"paused": paused}
                                done = await http.post(
                                    f"/live/{conv}/pause", data=form, headers=bearer
                                )
                                assert done.status == 200
                            want = "quiet" if paused == "1" else "answered"
                            for conv in channels:
                                while (record := await mention(conv)).decision != want:
                                    assert record.decision == (
                                        "answered" if want == "quiet" else "quiet"
                                    )
                                if want == "quiet":
                                    assert record.reason == "paused"
                            print(  # informational: how long the change took to show
                                f"{'pause' if paused == '1' else 'resume'} seen in both "
                                f"workers after {time.monotonic() - started:.2f}s"
                            )
            finally:
                chatting.cancel()
                await asyncio.gather(chatting, return_exceptions=True)
        finally:
            codes = []
            for proc in workers:
                proc.send_signal(signal.SIGTERM)
                _, stderr = await asyncio.wait_for(proc.communicate(), 60)
                codes.append((proc.returncode, stderr.decode()[-2000:]))
            await publisher.close()
        for code, err in codes:
            assert code == 0, err
