"""Plugin events (``bot.plugins.events``): handlers start in the background and never delay
the caller; one that raises, hangs or calls ``sys.exit()`` is contained and counted; a plugin
whose handlers are all busy drops further events (counted) instead of queueing them; shutdown
waits for the running ones within their time limit."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from bot.events import Author, ChatMessage, ConversationKey, StreamEvent, StreamEventKind
from bot.plugins.events import EventContext, PluginEvents, Subscriber, on_message
from bot.plugins.loader import Source, load_plugins
from bot.settings import PluginSettings
from bot.state.plugin_store import MemoryPluginStore
from tests.plugin_samples import listener


def line(text: str, event: StreamEvent | None = None) -> ChatMessage:
    return ChatMessage(
        platform="twitch",
        id=f"m-{text}",
        conversation=ConversationKey(platform="twitch", channel="#c"),
        author=Author(id="7", display_name="ada"),
        text=text,
        stream_event=event,
    )


def listening(log: Path, monkeypatch: pytest.MonkeyPatch) -> PluginEvents:
    monkeypatch.setenv("LISTENER_LOG", str(log))
    source = Source("listener", "tests.plugin_samples.listener", "test")
    loaded = load_plugins(PluginSettings(), sources=[source])
    loaded.bind(MemoryPluginStore())
    return PluginEvents(loaded.subscribers(), timeout=2.0, concurrency=32)


async def settled(events: PluginEvents) -> None:
    for _ in range(600):
        if not events.running:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("handlers still running")


async def test_every_kind_reaches_its_handlers_with_the_plugin_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = listening(tmp_path / "log", monkeypatch)
    events.seen(line("hello"))
    await settled(events)
    raid = StreamEvent(kind=StreamEventKind.RAID, count=5)
    events.seen(line("raid!", raid))
    events.replied(line("hello"), "hi there")
    await settled(events)
    seen = (tmp_path / "log").read_text().splitlines()
    assert seen[0] == "seen 1: hello"
    assert set(seen[1:]) == {"seen 2: raid!", "stream event: raid", "replied: hi there"}
    assert events.counts["listener", "message", "ok"] == 8  # 2 lines x 4 handlers
    assert events.counts["listener", "stream_event", "ok"] == 1
    assert events.counts["listener", "reply", "ok"] == 1


async def test_a_channel_point_redemption_reaches_on_stream_event_with_its_reward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = listening(tmp_path / "log", monkeypatch)
    redeemed = StreamEvent(
        kind=StreamEventKind.REDEMPTION, user_id="7", reward="Hydrate", reward_id="r-1", cost=300
    )
    events.seen(line("drink water", redeemed))
    await settled(events)
    seen = set((tmp_path / "log").read_text().splitlines())
    assert seen == {"seen 1: drink water", "stream event: redemption Hydrate (300)"}
    assert events.counts["listener", "stream_event", "ok"] == 1


async def test_raising_hanging_and_exiting_handlers_are_contained_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    events = listening(tmp_path / "log", monkeypatch)
    started = time.monotonic()
    for text in (listener.RAISE, listener.HANG, listener.EXIT):
        events.seen(line(text))
    assert time.monotonic() - started < 1.0  # emit only starts tasks (generous: a loaded box)
    await settled(events)
    assert events.counts["listener", "message", "error"] == 2  # the raise and the sys.exit
    assert events.counts["listener", "message", "timeout"] == 1
    assert events.series()[("listener", "message", "timeout")] == 1.0
    messages = [r.getMessage() for r in caplog.records]
    assert "plugin event handler raised" in messages
    assert "plugin event handler raised a BaseException; contained" in messages
    assert "plugin event handler timed out" in messages


async def test_a_busy_plugin_drops_events_instead_of_queueing_them() -> None:
    release = asyncio.Event()

    @on_message
    async def slow(ctx: EventContext) -> None:
        await release.wait()

    events = PluginEvents([Subscriber("slow", [slow])], timeout=30, concurrency=2)
    for n in range(5):
        events.seen(line(f"line {n}"))
    assert events.counts["slow", "message", "dropped"] == 3
    release.set()
    await settled(events)
    assert events.counts["slow", "message", "ok"] == 2


async def test_shutdown_gives_running_handlers_their_time_then_cancels_them() -> None:
    @on_message
    async def forever(ctx: EventContext) -> None:
        await asyncio.sleep(3600)

    events = PluginEvents([Subscriber("p", [forever])], timeout=0.2, concurrency=2)
    events.seen(line("x"))
    await asyncio.sleep(0)
    await asyncio.wait_for(events.aclose(), 60)
    assert not events.running


def test_a_sync_handler_is_refused() -> None:
    def sync(ctx: EventContext) -> None: ...

    with pytest.raises(TypeError, match="async def"):
        on_message(sync)  # type: ignore[arg-type]
