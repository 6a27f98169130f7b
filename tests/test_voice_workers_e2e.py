"""``!tts pause`` holds on every worker: two real ``chorus run --role worker`` processes on the
Redis Streams bus of a real Redis, speech on, the Anthropic SDK against its loopback.

The worker holding a Twitch channel applies a moderator's ``!tts pause``; it is then stopped, and
the other worker, which takes the channel over, must honour the pause it never saw applied: a
500-bit cheer and an answered mention put nothing on the channel's speech queue. After ``!tts
resume`` (applied by the new holder) a cheer is queued again. An overlay is connected all along
(the channel's watching flag, which the overlay's server keeps, is kept here)."""

from __future__ import annotations

import asyncio
import itertools
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from bot.bus.streams import RedisStreamsBus
from bot.bus.topics import INBOUND
from bot.events import Author, ChatMessage, ConversationKey, Role, StreamEvent, StreamEventKind
from bot.state import keys, turnlog
from bot.state.voice import VoiceQueue
from tests.bus_leases import wait_balanced
from tests.loopback.anthropic_server import AnthropicServer
from tests.test_admin_pause_workers_e2e import decided, holders
from tests.test_chat_e2e import ROOT, spawn_chorus, stopped
from tests.test_worker_takeover_e2e import PARTITIONS, worker_env
from tests.waiting import until

LIMIT = 90.0  # generous: a loaded 2-core machine; each wait ends as soon as its event happens


async def test_a_pause_holds_on_the_worker_that_takes_the_channel_over(
    real_redis_url: str, real_redis: Redis, key_tag: str, tmp_path: Path
) -> None:
    tag = key_tag
    queue = VoiceQueue(real_redis)
    async with AnthropicServer() as model:
        model.default_reply = lambda body: "Sure thing. Here you go."
        env = worker_env(tmp_path, real_redis_url, tag, model.base_url)
        env |= {
            "CHORUS_VOICE": "true",
            "CHORUS_ENGAGE_USER_COOLDOWN_SECONDS": "0",
            "CHORUS_ENGAGE_CHANNEL_COOLDOWN_SECONDS": "0",
            "CHORUS_ENGAGE_MIN_GAP_SECONDS": "0",
        }
        workers = [await spawn_chorus(["run", "--role", "worker"], env, ROOT) for _ in range(2)]
        publisher = RedisStreamsBus(real_redis, consumer="test", namespace=tag)
        ids = itertools.count()
        conv = ConversationKey(platform="twitch", channel=f"{tag}voice")

        def message(text: str, *, mod: bool = False, **extra: Any) -> ChatMessage:
            n = next(ids)
            roles = frozenset({Role.MODERATOR}) if mod else frozenset()
            return ChatMessage(
                platform="twitch",
                id=f"{tag}-{n}",
                conversation=conv,
                author=Author(id=f"viewer{n}", display_name=f"Viewer{n}", roles=roles),
                text=text,
                **extra,
            )

        def cheer(text: str) -> ChatMessage:
            event = StreamEvent(kind=StreamEventKind.CHEER, user_name="Ada", bits=500)
            return message(text, stream_event=event, ambient=True)

        async def kinds() -> list[tuple[str, str]]:
            return [(e["kind"], e.get("text", "")) for e in await queue.recent(conv, 100)]

        async def watching() -> None:
            while True:
                await queue.watched(conv)
                await asyncio.sleep(2)  # the overlay server's refresh, well inside the TTL

        async def control_is(paused: bool) -> bool:
            return (await queue.control(conv)).paused is paused

        async def answered(sent: ChatMessage) -> turnlog.TurnRecord:
            await publisher.publish(INBOUND, sent)
            return await decided(real_redis, conv, sent.id)

        survivors: list[asyncio.subprocess.Process] = []
        watch = asyncio.create_task(watching())
        try:
            await asyncio.wait_for(wait_balanced(real_redis, tag, PARTITIONS, 2), LIMIT)
            first = await answered(message("@bot hello?", mentions_bot=True))
            assert first.decision == "answered"
            await until(lambda: _has(kinds, ("answer", "Sure thing.")), limit=LIMIT)
            held = await holders(real_redis, tag)
            owner = held[publisher.partition_of(message("x"))]
            await publisher.publish(INBOUND, message("!tts pause", mod=True))
            await until(lambda: control_is(True), limit=LIMIT)

            # The worker holding the channel stops; the other takes the channel over.
            stopping = [w for w in workers if owner.endswith(f"-{w.pid}")]
            assert len(stopping) == 1, (owner, [w.pid for w in workers])
            for proc in stopping:
                proc.send_signal(signal.SIGTERM)
                await stopped(proc)
            survivors = [w for w in workers if w not in stopping]
            await asyncio.wait_for(wait_balanced(real_redis, tag, PARTITIONS, 1), LIMIT)
            before = await kinds()
            await publisher.publish(INBOUND, cheer("Cheer500 while paused"))
            second = await answered(message("@bot still there?", mentions_bot=True))
            assert second.decision == "answered"
            assert await kinds() == before, "nothing spoken while paused"

            await publisher.publish(INBOUND, message("!tts resume", mod=True))
            await until(lambda: control_is(False), limit=LIMIT)
            await publisher.publish(INBOUND, cheer("Cheer500 after resume"))
            await until(
                lambda: _has(kinds, ("cheer", "Ada cheered 500 bits: Cheer500 after")), limit=LIMIT
            )
        finally:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)
            codes = []
            for proc in workers:
                if proc.returncode is None:
                    proc.send_signal(signal.SIGTERM)
                    _, tail = await stopped(proc)
                    codes.append((proc.returncode, tail.decode()[-2000:]))
            await publisher.close()
            await real_redis.delete(keys.voice_queue(conv), keys.voice_control(conv))
        assert survivors, "one worker kept running"
        for code, err in codes:
            assert code == 0, err


async def _has(
    kinds: Callable[[], Awaitable[list[tuple[str, str]]]], want: tuple[str, str]
) -> bool:
    return any(kind == want[0] and text.startswith(want[1]) for kind, text in await kinds())
