"""The gateway's ordered outbox (``bot.bus.outbox``) over the real Redis Streams bus on a private
``redis-server`` that is killed and restarted: each conversation's order survives an outage,
``publish`` returns once the event is held and waits at the limit, ``close`` spools what Redis
did not take and the next start publishes it first, and ``drain``/``consume`` keep the
``EventBus`` contract. The spool's own file handling is in ``test_spool``.

Waiting is on the bus's drain, tasks and predicates, never on the clock; the one bounded
``asyncio.wait`` checks that a publish is still waiting, as ``test_bus_redis`` does.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import BaseModel

from bot.app import Chorus
from bot.bus.base import BusClosed
from bot.bus.outbox import Outbox
from bot.bus.spool import Spool
from bot.bus.spool_key import spool_key
from bot.bus.streams import RedisStreamsBus
from bot.bus.topics import DELETIONS, INBOUND
from bot.events import Author, ChatMessage, ConversationKey, MessageDeleted
from bot.settings import settings_from
from bot.state import connect
from tests import outage_rig
from tests.redis_server import free_port, start_redis, stop_redis

pytestmark = pytest.mark.e2e  # every test here starts processes

CONVERSATIONS, EACH = 6, 8
T0 = datetime(2025, 1, 2, tzinfo=UTC)
KEY = b"k" * 32


def message(conversation: int, n: int) -> ChatMessage:
    return ChatMessage(
        platform="slack",
        id=f"m-{conversation}-{n}",
        conversation=ConversationKey(platform="slack", channel=f"C{conversation}"),
        author=Author(id="U1"),
        text=f"{conversation}:{n}",
        sent_at=T0,
    )


@dataclass
class Rig:
    """A private Redis that the test kills and restarts, and the buses over it."""

    binary: str
    workdir: Path
    port: int = field(default_factory=free_port)
    server: subprocess.Popen[bytes] | None = None
    closing: list[RedisStreamsBus | Outbox] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.server = start_redis(self.binary, self.port, self.workdir, *outage_rig.AOF)

    def kill(self) -> None:
        assert self.server is not None
        os.kill(self.server.pid, signal.SIGKILL)
        self.server.wait()

    async def outbox(self, spool: Path, **options: float) -> Outbox:
        client = await connect.open_redis(self.url)
        bus = RedisStreamsBus(
            client, consumer="gw", partitions=4, block_ms=50, lease_ms=600, backoff_cap=0.3
        )
        outbox = Outbox(bus, spool=Spool(spool, key=KEY), **options)  # type: ignore[arg-type]
        self.closing.append(outbox)
        return outbox


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    rig = Rig(outage_rig.redis_binary(), tmp_path)
    await asyncio.to_thread(rig.start)
    try:
        yield rig
    finally:
        for bus in rig.closing:
            await bus.close()
        if rig.server is not None:
            await asyncio.to_thread(stop_redis, rig.server)


async def consume(outbox: Outbox, into: list[str], topic: str = INBOUND) -> None:
    """A worker stand-in: every inbound event's text, in the order it is consumed."""
    async for delivery in outbox.consume(topic, ChatMessage, group="agent"):
        into.append(delivery.event.text)
        await delivery.ack()


async def take(outbox: Outbox, count: int) -> list[str]:
    """The texts of the next ``count`` inbound events (another process's publishes)."""
    got: list[str] = []
    async for delivery in outbox.consume(INBOUND, ChatMessage, group="agent"):
        got.append(delivery.event.text)
        await delivery.ack()
        if len(got) == count:
            break
    return got


def per_conversation(texts: list[str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for text in texts:
        conversation, n = text.split(":")
        out.setdefault(conversation, []).append(int(n))
    return out


async def test_each_conversation_stays_in_order_through_an_outage(rig: Rig, tmp_path: Path) -> None:
    outbox = await rig.outbox(tmp_path / "spool")
    got: list[str] = []
    worker = asyncio.create_task(consume(outbox, got))
    await outbox.publish(INBOUND, message(0, 0))
    await outbox.drain(timeout=30)
    await asyncio.to_thread(rig.kill)
    for n in range(1, EACH):  # interleaved, as several chats arrive at once
        for conversation in range(CONVERSATIONS):
            # returns once held: the adapter may acknowledge the platform now
            await asyncio.wait_for(outbox.publish(INBOUND, message(conversation, n)), 5)
    assert outbox.depth == CONVERSATIONS * (EACH - 1)
    await asyncio.to_thread(rig.start)
    await outbox.drain(timeout=30)
    worker.cancel()
    expected = {str(c): list(range(1, EACH)) for c in range(CONVERSATIONS)}
    expected["0"].insert(0, 0)  # published before the outage
    assert per_conversation(got) == expected
    assert outbox.published == CONVERSATIONS * (EACH - 1) + 1


async def test_publish_waits_while_the_outbox_holds_more_than_its_limit(
    rig: Rig, tmp_path: Path
) -> None:
    outbox = await rig.outbox(tmp_path / "spool", limit=3)
    got: list[str] = []
    worker = asyncio.create_task(consume(outbox, got))
    await asyncio.to_thread(rig.kill)
    for n in range(3):
        await asyncio.wait_for(outbox.publish(INBOUND, message(0, n)), 5)
    blocked = asyncio.create_task(outbox.publish(INBOUND, message(0, 3)))
    await asyncio.wait({blocked}, timeout=0.5)
    assert not blocked.done(), "a fourth event waits for room"
    assert outbox.depth == 4  # in line already: its place is kept
    await asyncio.to_thread(rig.start)
    await asyncio.wait_for(blocked, 30)
    await outbox.drain(timeout=30)
    worker.cancel()
    assert got == [f"0:{n}" for n in range(4)]


async def test_drain_waits_for_what_the_outbox_holds(rig: Rig, tmp_path: Path) -> None:
    outbox = await rig.outbox(tmp_path / "spool")
    await asyncio.to_thread(rig.kill)
    await outbox.publish(INBOUND, message(0, 0))
    with pytest.raises(TimeoutError, match="outbox did not empty.*1 events held"):
        await outbox.drain(timeout=0.2)


async def test_close_in_an_outage_spools_what_is_held_and_the_next_start_sends_it_first(
    rig: Rig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = tmp_path / "spool"
    first = await rig.outbox(spool, flush_seconds=0.2)
    await asyncio.to_thread(rig.kill)
    sent = [message(c, n) for n in range(3) for c in range(2)]
    deleted = MessageDeleted(conversation=sent[0].conversation, message_id=sent[0].id)
    for event in sent:
        await first.publish(INBOUND, event)
    await first.publish(DELETIONS, deleted)
    with caplog.at_level(logging.INFO, logger="chorus.bus"):
        await asyncio.wait_for(first.close(), 10)  # flushes for 0.2 s, then spools
    closed = [r for r in caplog.records if r.getMessage() == "outbox closed"]
    assert [(r.published, r.spooled) for r in closed] == [(0, 7)]  # type: ignore[attr-defined]
    files = sorted(spool.glob("outbox-*.jsonl"))
    assert len(files) == 1
    assert Spool(spool, key=KEY).parse(files[0].read_text()) == [
        *((INBOUND, e) for e in sent),
        (DELETIONS, deleted),
    ]
    with pytest.raises(BusClosed):
        await first.publish(INBOUND, message(0, 9))

    await asyncio.to_thread(rig.start)
    second = await rig.outbox(spool)
    with caplog.at_level(logging.INFO, logger="chorus.bus"):
        assert await second.recover() == 7
    assert any(r.getMessage().startswith("outbox recovered") for r in caplog.records)
    await second.publish(INBOUND, message(0, 3))  # new: behind the spooled ones of its chat
    got: list[str] = []
    removed: list[MessageDeleted] = []
    worker = asyncio.create_task(consume(second, got))
    deletions = asyncio.create_task(_deletions(second, removed))
    await second.drain(timeout=30)
    worker.cancel()
    deletions.cancel()
    assert per_conversation(got) == {"0": [0, 1, 2, 3], "1": [0, 1, 2]}
    assert removed == [deleted]
    assert list(spool.iterdir()) == [], "the replayed file is removed"
    assert second.recovered == 7


async def test_close_publishes_what_it_can_within_the_flush_window(
    rig: Rig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = tmp_path / "spool"
    outbox = await rig.outbox(spool, flush_seconds=30)
    await asyncio.to_thread(rig.kill)
    for n in range(4):
        await outbox.publish(INBOUND, message(0, n))
    await asyncio.to_thread(rig.start)
    with caplog.at_level(logging.INFO, logger="chorus.bus"):
        await outbox.close()  # Redis is back: everything goes out, nothing is spooled
    closed = [r for r in caplog.records if r.getMessage() == "outbox closed"]
    assert [(r.published, r.spooled) for r in closed] == [(4, 0)]  # type: ignore[attr-defined]
    assert not spool.exists() or list(spool.iterdir()) == []
    reader = await rig.outbox(tmp_path / "unused")
    assert await asyncio.wait_for(take(reader, 4), 30) == [f"0:{n}" for n in range(4)]


async def test_close_lets_a_publisher_waiting_for_room_go_and_spools_its_event(
    rig: Rig, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    outbox = await rig.outbox(spool, limit=1, flush_seconds=0)
    await asyncio.to_thread(rig.kill)
    await outbox.publish(INBOUND, message(0, 0))
    waiting = asyncio.create_task(outbox.publish(INBOUND, message(0, 1)))
    await asyncio.wait({waiting}, timeout=0.2)
    assert not waiting.done()
    await asyncio.wait_for(outbox.close(), 10)
    await asyncio.wait_for(waiting, 5)  # held, so the adapter may acknowledge it
    (file,) = spool.glob("outbox-*.jsonl")
    events = Spool(spool, key=KEY).parse(file.read_text())
    assert [e for _, e in events] == [message(0, 0), message(0, 1)]


async def test_an_event_the_spool_could_not_read_back_is_refused_at_publish(
    rig: Rig, tmp_path: Path
) -> None:
    class Custom(BaseModel):
        text: str

    outbox = await rig.outbox(tmp_path / "spool")
    with pytest.raises(TypeError, match="Custom cannot be spooled"):
        await outbox.publish(INBOUND, Custom(text="x"))
    assert outbox.depth == 0


async def _deletions(outbox: Outbox, into: list[MessageDeleted]) -> None:
    async for delivery in outbox.consume(DELETIONS, MessageDeleted, group="agent"):
        into.append(delivery.event)
        await delivery.ack()


@pytest.mark.parametrize(
    ("bus", "gateway", "wrapped"),
    [("redis", True, True), ("redis", False, False), ("memory", True, False)],
    ids=["gateway-on-streams", "worker-on-streams", "in-process-bus"],
)
async def test_only_the_platform_side_on_redis_streams_publishes_through_an_outbox(
    rig: Rig, tmp_path: Path, bus: str, gateway: bool, wrapped: bool
) -> None:
    """``chorus run`` asks for the outbox in every role that runs adapters; the app builds it
    only over Redis Streams, and the router keeps publishing through the bus itself."""
    spool = tmp_path / "spool"
    settings = settings_from(
        {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "CHORUS_REDIS_URL": rig.url if bus == "redis" else "memory://outbox-wiring",
            "CHORUS_BUS": bus,
            "CHORUS_SPOOL_DIR": str(spool),
        }
    )
    key = spool_key(settings)  # what a gateway of this deployment signed its spool with
    await asyncio.to_thread(Spool(spool, key=key).write, [(INBOUND, message(0, 0))])
    app = await Chorus.from_settings(settings, outbox=gateway)
    try:
        assert (app.outbox is not None) is wrapped
        assert (app.ingress_bus is app.outbox) if wrapped else (app.ingress_bus is app.bus)
        assert app.router.bus is app.bus
        if app.outbox is not None:  # the spool of an earlier run is published at start
            assert app.outbox.recovered == 1
            assert await asyncio.wait_for(take(app.outbox, 1), 30) == ["0:0"]
    finally:
        await app.aclose()
    left = await asyncio.to_thread(lambda: len(list(spool.glob("outbox-*"))))
    assert left == (0 if wrapped else 1), "only a gateway replays (and removes) the spool"
