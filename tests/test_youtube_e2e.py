"""The real YouTube adapter against a loopback Data API + OAuth server, on a fake clock.

The adapter's every ``sleep`` advances a fake clock (no real waiting) and first drains the bus, so
a reply the stand-in router publishes is inserted before time moves on. A test stops the
adapter by parking its poller at a sleep once a condition holds, asserts, then closes it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from redis.asyncio import Redis

from adapters.youtube import YouTubeAdapter
from adapters.youtube.api import YouTubeAuthError, quota_key
from bot.bus.base import InProcessBus
from bot.bus.topics import DELETIONS, INBOUND, outbound_topic
from bot.events import ChatMessage, MessageDeleted, Reply
from bot.quota.day import RESET_SLACK, next_reset, quota_day
from bot.settings import ConfigError, YouTubeSettings
from bot.state import connect
from tests.loopback.youtube_server import (
    LIVE_CHAT_ID,
    VIDEO_ID,
    YouTubeServer,
    text_item,
)
from tests.platform_env import adapter_from_env
from tests.test_youtube_convert import MIXED

START = datetime(2025, 6, 2, 17, 0, tzinfo=UTC)  # 10:00 Pacific; the stream started now


class FakeTime:
    def __init__(self, bus: InProcessBus, start: datetime = START) -> None:
        self.now = start
        self.bus = bus
        self.sleeps: list[float] = []
        self.stop_when: Callable[[], bool] = lambda: False
        self.on_sleep: Callable[[int], None] = lambda n: None
        self.parked = asyncio.Event()

    def clock(self) -> datetime:
        return self.now

    async def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += timedelta(seconds=seconds)
        task = asyncio.current_task()
        if task is None or task.get_name() != "youtube-sender":  # the sender may be mid-delivery
            await self.bus.drain(timeout=10)
        await asyncio.sleep(0)  # a real sleep always yields; so must this one
        self.on_sleep(len(self.sleeps))
        if self.stop_when():
            self.parked.set()
            await asyncio.Future()  # until the adapter is closed


class Rig:
    def __init__(self, server: YouTubeServer, redis: Redis, tag: str) -> None:
        self.server = server
        self.redis = redis
        self.bus = InProcessBus()
        self.time = FakeTime(self.bus)
        self.client_id = f"{tag}.apps.googleusercontent.com"
        server.client_id = self.client_id
        self.inbound: list[ChatMessage] = []
        self.channel_events: list[ChatMessage] = []  # the chat began / ended being followed
        self.deletions: list[MessageDeleted] = []
        self.answer: Callable[[ChatMessage], str | None] = lambda m: "4" if m.mentions_bot else None
        self.adapter: YouTubeAdapter | None = None
        self._tasks: list[asyncio.Task[None]] = []

    def settings(self, **overrides: Any) -> YouTubeSettings:
        values: dict[str, Any] = {
            "client_id": self.client_id,
            "client_secret": self.server.client_secret,
            "refresh_token": self.server.refresh_token,
            "api_base_url": self.server.api_base,
            "token_url": self.server.token_url,
            "read_mode": "poll",  # these tests poll; test_youtube_stream.py streams
        }
        return YouTubeSettings(**(values | overrides))

    async def start(self, **overrides: Any) -> asyncio.Task[None]:
        self.adapter = YouTubeAdapter.from_settings(
            self.bus,
            self.redis,
            self.settings(**overrides),
            clock=self.time.clock,
            sleep=self.time.sleep,
        )
        self._tasks += [asyncio.create_task(self._router()), asyncio.create_task(self._deletions())]
        task = asyncio.create_task(self.adapter.run())
        self._tasks.append(task)
        return task

    async def run_until(self, condition: Callable[[], bool], **overrides: Any) -> None:
        self.time.stop_when = condition
        task = await self.start(**overrides)
        parked = asyncio.create_task(self.time.parked.wait())
        done, _ = await asyncio.wait(
            {task, parked}, timeout=60, return_when=asyncio.FIRST_COMPLETED
        )
        if task in done:
            parked.cancel()
            task.result()  # surface the adapter's exception
        assert done, "the adapter neither stopped nor reached the condition"

    async def _router(self) -> None:
        """Stands in for the router: answers mentions with a scripted reply."""
        async for delivery in self.bus.consume(INBOUND, ChatMessage, group="router"):
            message = delivery.event
            if message.channel_event is not None:
                self.channel_events.append(message)
                await delivery.ack()
                continue
            self.inbound.append(message)
            text = self.answer(message)
            if text is not None:
                reply = Reply(
                    conversation=message.conversation,
                    text=text,
                    reply_to_id=message.id,
                    addressed_user_ids=(message.author.id,),
                )
                await self.bus.publish(outbound_topic("youtube"), reply)
            await delivery.ack()

    async def _deletions(self) -> None:
        async for delivery in self.bus.consume(DELETIONS, MessageDeleted, group="router"):
            self.deletions.append(delivery.event)
            await delivery.ack()

    async def close(self) -> None:
        if self.adapter is not None:
            await self.adapter.aclose()
        await self.bus.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


@pytest.fixture
async def rig(key_tag: str) -> AsyncIterator[Rig]:
    server = YouTubeServer()
    await server.start()
    redis = await connect.open_redis(f"memory://yt-{key_tag}")
    rig = Rig(server, redis, key_tag)
    try:
        yield rig
    finally:
        await rig.close()
        await redis.aclose()
        await server.close()


def _mention(message_id: str, text: str = "@Chorus what is 2+2?") -> dict[str, Any]:
    return text_item(message_id, text, author_id="UCalice0000000000000000", name="Alice")


def _list_requests(server: YouTubeServer) -> list[Any]:
    return [
        r for r in server.requests if r.path.endswith("/liveChat/messages") and r.method == "GET"
    ]


async def test_finds_the_broadcast_skips_the_backlog_and_answers_a_mention(rig: Rig) -> None:
    server = rig.server
    server.backlog = [_mention("LCC.old", "@Chorus an old question")]
    server.pages.append([_mention("LCC.1"), text_item("LCC.2", "nice stream")])
    await rig.run_until(lambda: server.calls["list"] >= 3)

    token_request = next(r for r in server.requests if r.path == "/token")
    assert token_request.body is not None
    assert "grant_type=refresh_token" in token_request.body
    assert "refresh_token=1%2F%2Ftest-refresh-token" in token_request.body
    broadcasts = next(r for r in server.requests if r.path.endswith("/liveBroadcasts"))
    assert broadcasts.query == {
        "part": "snippet",
        "broadcastStatus": "active",
        "broadcastType": "all",
    }
    assert broadcasts.headers["authorization"] == "Bearer ya29.test-access-token-1"

    # the backlog is skipped, the bot's echoed message too; the mention is addressed
    assert [(m.id, m.mentions_bot, m.ambient) for m in rig.inbound] == [
        ("LCC.1", True, False),
        ("LCC.2", False, True),
    ]
    assert rig.inbound[0].author.id == "UCalice0000000000000000"
    assert rig.inbound[0].conversation.channel == LIVE_CHAT_ID
    assert server.inserted == [
        {
            "snippet": {
                "liveChatId": LIVE_CHAT_ID,
                "type": "textMessageEvent",
                "textMessageDetails": {"messageText": "@Alice 4"},
            }
        }
    ]
    lists = _list_requests(server)
    assert lists[0].query == {
        "liveChatId": LIVE_CHAT_ID,
        "part": "snippet,authorDetails",
        "maxResults": "2000",
    }
    assert server.page_tokens == [None, "page-1", "page-2"]
    assert server.token_mismatches == []
    # never faster than pollingIntervalMillis (5 s); a fresh day plans ~19 s per poll: the
    # floor of one every 30 s (480 polls in 4 hours) and half of what the replies leave free
    assert rig.time.sleeps[0] == pytest.approx(14_400 / 757, rel=0.01)
    assert min(rig.time.sleeps) >= 5.0
    assert rig.adapter is not None
    status = rig.adapter.quota_status
    assert status.units_spent == server.units == 1 + 1 + 3 * 5 + 50
    assert status.inserts == 1 and status.units_remaining == 10_000 - server.units
    assert status.limited_by == "budget"


async def test_video_mode_reads_the_videos_chat_and_stops_when_it_ends(rig: Rig) -> None:
    rig.server.pages.append([_mention("LCC.1")])
    rig.time.on_sleep = lambda n: rig.server.fail("list", 403, "liveChatEnded") if n == 2 else None
    task = await rig.start(video_id=VIDEO_ID)
    await asyncio.wait_for(task, 10)  # run() returns by itself
    assert rig.server.calls["videos"] == 1 and rig.server.calls["liveBroadcasts"] == 0
    video = next(r for r in rig.server.requests if r.path.endswith("/videos"))
    assert video.query == {"part": "liveStreamingDetails", "id": VIDEO_ID}
    assert rig.server.calls["list"] == 3
    assert [m.id for m in rig.inbound] == ["LCC.1"] and len(rig.server.inserted) == 1
    await rig.bus.drain(timeout=10)
    kinds = [m.channel_event.kind.value for m in rig.channel_events if m.channel_event]
    assert kinds == ["stream_online", "stream_offline"]  # the plugins heard it begin and end


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (403, "liveChatEnded"),
        (404, "liveChatNotFound"),
        (403, "liveChatDisabled"),
        (403, "forbidden"),
    ],
)
async def test_channel_mode_stops_a_gone_chat_and_looks_for_the_next_broadcast(
    rig: Rig, caplog: pytest.LogCaptureFixture, status: int, reason: str
) -> None:
    rig.server.pages.append([])
    calls = rig.server.calls

    def on_sleep(n: int) -> None:
        if n == 1:
            rig.server.fail("list", status, reason)

    rig.time.on_sleep = on_sleep
    caplog.set_level(logging.INFO, logger="chorus.youtube")
    await rig.run_until(lambda: calls["liveBroadcasts"] >= 2 and calls["list"] >= 3)
    assert 300.0 in rig.time.sleeps  # YOUTUBE_BROADCAST_CHECK_SECONDS before looking again
    stopped = [r for r in caplog.records if "stopped following" in r.getMessage()]
    assert stopped and stopped[0].reason == reason  # type: ignore[attr-defined]
    # the new chat starts over: a fresh backlog read without a page token
    assert rig.server.page_tokens[-1] is None


@pytest.mark.parametrize("how", ["offlineAt", "chatEndedEvent"])
async def test_offline_stream_or_chat_end_event_stops_following(rig: Rig, how: str) -> None:
    def on_sleep(n: int) -> None:
        if n == 1 and how == "offlineAt":
            rig.server.offline_at = "2025-06-02T17:01:00Z"
        elif n == 1:
            rig.server.pages.append([{"id": "LCC.end", "snippet": {"type": "chatEndedEvent"}}])

    rig.time.on_sleep = on_sleep
    rig.server.broadcast_live = True
    await rig.run_until(lambda: rig.server.calls["liveBroadcasts"] >= 2, video_id=None)
    # the poll that saw the end is followed by the wait before looking for a broadcast again
    assert rig.time.sleeps[1] == 300.0
    assert rig.server.page_tokens[:3] == [None, "page-1", None]
    # the plugins hear the broadcast begin, end, and the next one begin (the same chat here)
    kinds = [m.channel_event.kind.value for m in rig.channel_events if m.channel_event]
    assert kinds[:3] == ["stream_online", "stream_offline", "stream_online"]
    first = rig.channel_events[0]
    assert first.id == f"stream-stream_online-{LIVE_CHAT_ID}" and first.text == ""
    assert first.conversation.channel == LIVE_CHAT_ID and first.platform == "youtube"


async def test_deletions_and_bans_are_published(rig: Rig) -> None:
    rig.server.pages.append([MIXED[0], MIXED[4], MIXED[5]])
    await rig.run_until(lambda: rig.server.calls["list"] >= 2)
    assert [m.id for m in rig.inbound] == [MIXED[0]["id"]]
    assert [(d.message_id, d.author_id) for d in rig.deletions] == [
        (MIXED[0]["id"], None),
        (None, "UCZneZy3197k3ErGxVjKFZSg"),
    ]
    assert all(d.conversation.channel == LIVE_CHAT_ID for d in rig.deletions)


async def test_quota_exceeded_pauses_until_the_pacific_midnight_reset(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    rig.server.fail("list", 403, "quotaExceeded")  # the backlog read already fails
    caplog.set_level(logging.INFO, logger="chorus.youtube")
    await rig.run_until(lambda: rig.server.calls["list"] >= 3)
    reset = next_reset(START)
    wait = (reset - START + RESET_SLACK).total_seconds()
    assert rig.time.sleeps[0] == pytest.approx(wait, abs=1)
    assert any(
        r.levelno == logging.ERROR and "quota exhausted" in r.getMessage() for r in caplog.records
    )
    # the spent day is remembered (a restart would not ask again), the new day starts fresh
    old = await rig.redis.hgetall(quota_key(rig.client_id, quota_day(START)))
    assert int(old["units"]) == 10_000
    assert rig.adapter is not None
    assert (
        rig.adapter.quota_status.day == quota_day(reset)
        and rig.adapter.quota_status.units_spent == 10
    )


async def test_rate_limit_backs_off_honouring_retry_after(rig: Rig) -> None:
    def on_sleep(n: int) -> None:
        if n == 1:
            rig.server.fail("list", 403, "rateLimitExceeded", headers={"Retry-After": "7"})
            rig.server.fail("list", 429, "rateLimitExceeded")

    rig.time.on_sleep = on_sleep
    await rig.run_until(lambda: rig.server.calls["list"] >= 5)
    backoffs = rig.time.sleeps[1:3]
    assert backoffs[0] >= 7.0  # Retry-After wins over the shorter jittered backoff
    assert 2.0 <= backoffs[1] <= 4.0  # attempt 2: 2 s base doubled, equal jitter
    assert rig.server.token_mismatches == []  # the same page was asked for again


async def test_access_token_is_refreshed_before_expiry_and_on_401(rig: Rig) -> None:
    rig.server.token_expires_in = 100  # refreshed a minute early: every ~40 s

    def on_sleep(n: int) -> None:
        if n == 2:
            rig.server.revoke_tokens()

    rig.time.on_sleep = on_sleep
    await rig.run_until(lambda: rig.server.calls["list"] >= 12)
    tokens = [r.headers.get("authorization") for r in _list_requests(rig.server)]
    unauthorised = [r for r in rig.server.requests if r.path.endswith("/messages")]
    assert rig.server.calls["token"] >= 3
    assert tokens[0] == "Bearer ya29.test-access-token-1"
    assert tokens[2] == "Bearer ya29.test-access-token-1"  # rejected (revoked) ...
    assert tokens[3] == "Bearer ya29.test-access-token-2"  # ... refreshed and retried at once
    assert len(unauthorised) == rig.server.calls["list"]
    assert rig.server.token_mismatches == []


async def test_a_rejected_refresh_token_stops_the_adapter_naming_the_variable(rig: Rig) -> None:
    task = await rig.start(refresh_token="1//a-revoked-token")
    with pytest.raises(YouTubeAuthError, match="YOUTUBE_REFRESH_TOKEN"):
        await asyncio.wait_for(task, 10)


@pytest.mark.parametrize("reason", ["liveChatEnded", "forbidden", "messageTextInvalid"])
async def test_a_failed_send_is_logged_and_acked(
    rig: Rig, caplog: pytest.LogCaptureFixture, reason: str
) -> None:
    rig.server.pages.append([_mention("LCC.1")])
    rig.server.pages.append([_mention("LCC.2")])
    rig.server.fail("insert", 400 if reason == "messageTextInvalid" else 403, reason)
    await rig.run_until(lambda: rig.server.calls["list"] >= 4)
    assert rig.server.calls["insert"] == 2  # the second reply still went out
    assert len(rig.server.inserted) == 1
    failed = [r for r in caplog.records if r.name == "chorus.youtube" and "reply" in r.getMessage()]
    assert failed and failed[0].reply_to_id == "LCC.1"  # type: ignore[attr-defined]


async def test_a_simulated_four_hour_stream_keeps_reading_while_replies_spend_their_share(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """Four hours of a busy chat polled on the default budget, with far more mentions than the
    day can answer: replies take everything beyond what reading needs, then are dropped with a
    log; polls never slow past their 30 s floor; the reading reserve for the rest is left."""

    def page(number: int) -> list[dict[str, Any]]:
        items = [text_item(f"LCC.{number}", f"chat line {number}")]
        if number % 5 == 0:
            items.append(_mention(f"LCC.q{number}", f"@Chorus question {number}"))
        return items

    rig.server.page_source, server = page, rig.server
    caplog.set_level(logging.INFO, logger="chorus.youtube")
    await rig.run_until(lambda: rig.time.now >= START + timedelta(hours=4))
    polls, sends = server.calls["list"], server.calls["insert"]
    assert server.units == 2 + 5 * polls + 50 * sends  # lookups, every poll, every send
    assert all(5.0 <= s <= 30.0 + 1e-6 for s in rig.time.sleeps)  # the floor, never slower
    assert polls >= 480
    mentions = sum(1 for m in rig.inbound if m.mentions_bot)
    dropped = [r for r in caplog.records if "reply budget is spent" in r.getMessage()]
    assert sends == len(server.inserted) and sends + len(dropped) == mentions
    assert dropped and sends >= 60
    # what is left is what reading needs until the reset, 10 hours later (a poll per 5 min
    # and a broadcast lookup per 5 min), and the 1% safety margin
    left = 10_000 - server.units
    assert 120 * 5 + 120 <= left <= 120 * 5 + 120 + 100 + 50 + 30 * 5


@pytest.mark.redis
async def test_the_days_spend_survives_a_restart(redis_client: Redis, key_tag: str) -> None:
    server = YouTubeServer()
    await server.start()
    try:
        first = Rig(server, redis_client, key_tag)
        await first.run_until(lambda: server.calls["list"] >= 3)
        spent = server.units
        await first.close()
        second = Rig(server, redis_client, key_tag)
        second.time.now = first.time.now
        await second.run_until(lambda: server.calls["list"] >= 4)
        assert second.adapter is not None
        assert second.adapter.quota_status.units_spent == server.units > spent
        await second.close()
    finally:
        await server.close()


def test_from_env_is_off_without_a_refresh_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("YOUTUBE_CLIENT_ID", "x.apps.googleusercontent.com")
    assert adapter_from_env(YouTubeAdapter, InProcessBus(), Redis()) is None


def test_from_env_names_the_missing_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("YOUTUBE_REFRESH_TOKEN", "1//token")
    with pytest.raises(ConfigError, match="YOUTUBE_CLIENT_ID"):
        adapter_from_env(YouTubeAdapter, InProcessBus(), Redis())
    monkeypatch.setenv("YOUTUBE_CLIENT_ID", "x.apps.googleusercontent.com")
    with pytest.raises(ConfigError, match="YOUTUBE_CLIENT_SECRET"):
        adapter_from_env(YouTubeAdapter, InProcessBus(), Redis())
    monkeypatch.setenv("YOUTUBE_CLIENT_SECRET", "secret")
    monkeypatch.setenv("YOUTUBE_DAILY_QUOTA", "lots")
    with pytest.raises(ConfigError, match="YOUTUBE_DAILY_QUOTA"):
        adapter_from_env(YouTubeAdapter, InProcessBus(), Redis())
    monkeypatch.setenv("YOUTUBE_DAILY_QUOTA", "2500")
    with pytest.raises(ConfigError, match="YOUTUBE_RESERVED_SENDS"):
        adapter_from_env(YouTubeAdapter, InProcessBus(), Redis())


def test_from_env_builds_the_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "YOUTUBE_CLIENT_ID": "x.apps.googleusercontent.com",
        "YOUTUBE_CLIENT_SECRET": "secret",
        "YOUTUBE_REFRESH_TOKEN": "1//token",
        "YOUTUBE_VIDEO_ID": VIDEO_ID,
        "YOUTUBE_STREAM_HOURS": "6",
        "YOUTUBE_API_BASE_URL": "http://127.0.0.1:9/youtube/v3",
    }.items():
        monkeypatch.setenv(name, value)
    adapter = adapter_from_env(YouTubeAdapter, InProcessBus(), Redis())
    assert adapter is not None and adapter.platform == "youtube"
    assert adapter.settings.video_id == VIDEO_ID
    assert adapter.api.ledger.config.stream_hours == 6
    assert adapter.settings.api_base_url == "http://127.0.0.1:9/youtube/v3"
