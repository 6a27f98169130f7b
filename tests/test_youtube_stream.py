"""The real YouTube adapter reading over gRPC ``streamList`` from a loopback gRPC server of our
own (tests/loopback/youtube_grpc.py), answering through the loopback REST server, on a fake
clock for its sleeps (backoff, pacing, polling).

Streaming is real network I/O on 127.0.0.1, so these tests wait on what the servers saw (with
a generous limit), not on the fake clock.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import grpc
import pytest
from redis.asyncio import Redis

from adapters.youtube import YouTubeAdapter
from bot.bus.base import InProcessBus
from bot.settings import ConfigError
from tests.loopback.youtube_grpc import YouTubeStreamServer
from tests.loopback.youtube_server import VIDEO_ID, YouTubeServer, text_item
from tests.platform_env import adapter_from_env
from tests.test_youtube_e2e import START, Rig

CHATTER = "UCviewer0000000000000000"


class StreamRig:
    def __init__(self, rig: Rig, stream: YouTubeStreamServer) -> None:
        self.rig = rig
        self.rest = rig.server
        self.stream = stream
        self.task: asyncio.Task[None] | None = None

    async def start(self, **overrides: Any) -> asyncio.Task[None]:
        values: dict[str, Any] = {
            "read_mode": "auto",
            "grpc_target": self.stream.target,
            "grpc_insecure": True,
        }
        self.task = await self.rig.start(**(values | overrides))
        return self.task

    async def until(self, predicate: Callable[[], bool], limit: float = 30.0) -> None:
        """Until ``predicate()`` holds; the adapter's own failure is raised, not waited out."""
        async with asyncio.timeout(limit):
            while not predicate():
                if self.task is not None and self.task.done():
                    self.task.result()
                    raise AssertionError("the adapter stopped before the condition held")
                await asyncio.sleep(0.01)

    async def park(self) -> None:
        """End the chat and park the adapter at its next (fake) sleep, so that it is cancelled
        at a known point, as test_youtube_e2e's tests do: a cancel landing anywhere (inside
        a Redis pipeline, say) is not what these tests are about."""
        self.rig.time.stop_when = lambda: True
        self.stream.push({"id": "LCC.end-of-test", "snippet": {"type": "chatEndedEvent"}})
        self.rest.pages.append([{"id": "LCC.end-of-test", "snippet": {"type": "chatEndedEvent"}}])
        if self.task is not None and not self.task.done():
            parked = asyncio.create_task(self.rig.time.parked.wait())
            await asyncio.wait({self.task, parked}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
            parked.cancel()

    def inbound_ids(self) -> list[str]:
        return [m.id for m in self.rig.inbound]

    def read_at_least(self, count: int) -> Callable[[], bool]:
        return lambda: len(self.rig.inbound) >= count


@pytest.fixture
async def srig(key_tag: str) -> AsyncIterator[StreamRig]:
    from bot.state import connect

    server = YouTubeServer()
    await server.start()
    stream = await YouTubeStreamServer(server).start()
    redis = await connect.open_redis(f"memory://yts-{key_tag}")
    rig = Rig(server, redis, key_tag)
    srig = StreamRig(rig, stream)
    try:
        yield srig
    finally:
        await srig.park()
        await rig.close()
        await stream.close()
        await redis.aclose()
        await server.close()


def line(n: int, text: str = "", author: str = CHATTER) -> dict[str, Any]:
    return text_item(f"LCC.s{n}", text or f"chat line {n}", author_id=author, name="Viewer")


def mention(n: int) -> dict[str, Any]:
    return text_item(f"LCC.q{n}", f"@Chorus question {n}", author_id="UCalice", name="Alice")


async def test_streams_the_chat_answers_mentions_and_never_polls(srig: StreamRig) -> None:
    srig.stream.push(mention(0), line(0))  # history before the bot joined: not answered
    await srig.start()
    await srig.until(lambda: bool(srig.stream.calls) and srig.stream.calls[0].responses >= 1)
    srig.stream.push(mention(1), line(1))
    await srig.until(lambda: len(srig.rest.inserted) == 1)
    srig.stream.push(line(2))
    await srig.until(lambda: "LCC.s2" in srig.inbound_ids())

    assert srig.inbound_ids() == ["LCC.q1", "LCC.s1", "LCC.s2"]  # the reply's echo is skipped
    text = srig.rest.inserted[0]["snippet"]["textMessageDetails"]["messageText"]
    assert text == "@Alice 4"
    assert srig.rest.calls["list"] == 0  # reading spent no polling quota
    [call] = srig.stream.calls
    assert call.page_token is None and call.parts == ["id", "snippet", "authorDetails"]
    assert call.authorization == "Bearer ya29.test-access-token-1"
    assert call.live_chat_id == srig.rest.live_chat_id
    adapter = srig.rig.adapter
    assert adapter is not None
    status = adapter.quota_status
    assert status.reading == "stream" and status.poll_interval_s is None
    # channels + liveBroadcasts + one insert, plus the one streamList connection (5)
    assert status.units_spent == srig.rest.units + 5 == 1 + 1 + 50 + 5


async def test_a_closed_stream_resumes_from_the_page_token_losing_and_repeating_nothing(
    srig: StreamRig,
) -> None:
    stream, time = srig.stream, srig.rig.time
    stream.close_after = 2  # the history, then one response: closed
    stream.overlap = 1  # and each resume re-sends the last item, which must not repeat
    pushed = iter(range(2, 100))

    def during_the_gap(n: int) -> None:  # messages that arrive while reconnecting
        first = next(pushed)
        stream.push(line(first), line(next(pushed)))

    time.on_sleep = during_the_gap
    await srig.start()
    await srig.until(lambda: len(stream.calls) == 1 and stream.calls[0].responses == 1)
    stream.push(line(1))
    for expected in (3, 5, 7):
        await srig.until(srig.read_at_least(expected))
        stream.push(line(next(pushed)))
    await srig.until(lambda: len(stream.calls) >= 4)

    ids = srig.inbound_ids()
    assert ids == [f"LCC.s{n}" for n in range(1, len(ids) + 1)]  # in order, once each
    assert len(ids) >= 7
    tokens = [c.page_token for c in stream.calls]
    assert tokens[0] is None and all(t and t.startswith("pos-") for t in tokens[1:])
    assert srig.rest.calls["list"] == 0
    # a reconnect waited only as long as the quota plan asks of a new connection: 4 hours over
    # what reading could use (~9,170 units, 5 a connection; in the default read mode, auto, the
    # reserve is sized for polling, since the stream may fall back to it): ~7.85 s
    assert time.sleeps and all(
        s == pytest.approx(14_400 * 5 / 9_170, rel=0.02) for s in time.sleeps
    )


async def test_unauthenticated_renews_the_access_token_once_and_reconnects(
    srig: StreamRig,
) -> None:
    srig.rest.revoke_tokens()  # nothing issued yet; the first token will be refused below
    srig.stream.fail(grpc.StatusCode.UNAUTHENTICATED)
    await srig.start()
    await srig.until(lambda: len(srig.stream.calls) == 2 and srig.stream.calls[1].responses >= 1)
    srig.stream.push(mention(1))
    await srig.until(lambda: len(srig.rest.inserted) == 1)
    auth = [c.authorization for c in srig.stream.calls]
    assert auth == ["Bearer ya29.test-access-token-1", "Bearer ya29.test-access-token-2"]
    assert srig.rest.calls["token"] == 2 and srig.rest.calls["list"] == 0
    assert srig.rig.time.sleeps == []  # renewed at once, no backoff


@pytest.mark.parametrize(
    "codes",
    [
        [grpc.StatusCode.UNIMPLEMENTED],
        [grpc.StatusCode.PERMISSION_DENIED],
        [grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.UNAUTHENTICATED],
        [grpc.StatusCode.UNAVAILABLE] * 6,  # five retries with backoff, then polling
    ],
    ids=["unimplemented", "permission-denied", "unauthenticated-twice", "unavailable"],
)
async def test_a_refused_stream_falls_back_to_polling_logged_once(
    srig: StreamRig, caplog: pytest.LogCaptureFixture, codes: list[grpc.StatusCode]
) -> None:
    for code in codes:
        srig.stream.fail(code)
    srig.rest.pages.append([mention(1)])
    caplog.set_level(logging.INFO, logger="chorus.youtube")
    await srig.start()
    await srig.until(lambda: len(srig.rest.inserted) == 1)
    await srig.until(lambda: srig.rest.calls["list"] >= 3)

    assert srig.inbound_ids() == ["LCC.q1"]
    assert len(srig.stream.calls) == len(codes)
    fallbacks = [r for r in caplog.records if "stream unavailable" in r.getMessage()]
    assert len(fallbacks) == 1
    assert codes[-1].name in fallbacks[0].reason  # type: ignore[attr-defined]
    assert srig.rig.adapter is not None and srig.rig.adapter.quota_status.reading == "poll"
    if codes[0] != grpc.StatusCode.UNAVAILABLE:  # a refusal: the stream is not tried again
        await srig.until(lambda: srig.rig.time.now - START > timedelta(minutes=11))
        assert len(srig.stream.calls) == len(codes)
    else:
        # each retry waited its backoff (1, 2, 4, 8, 16 s ceilings, equal jitter), or the
        # quota plan's ~7.4 s between charged connections when that is longer
        waits = srig.rig.time.sleeps[:5]
        assert all(2.0**n / 2 <= w <= max(2.0**n, 9.2) for n, w in enumerate(waits)), waits


async def test_after_an_outage_polling_tries_the_stream_again(srig: StreamRig) -> None:
    for _ in range(6):
        srig.stream.fail(grpc.StatusCode.UNAVAILABLE)
    await srig.start()
    await srig.until(lambda: srig.rest.calls["list"] >= 1)
    await srig.until(lambda: len(srig.stream.calls) == 7)
    polls = srig.rest.calls["list"]
    assert srig.rig.time.now - START >= timedelta(minutes=10)  # polled ten minutes first
    srig.stream.push(mention(1))
    await srig.until(lambda: len(srig.rest.inserted) == 1)
    assert srig.rest.calls["list"] == polls  # streaming again: polling stopped
    assert srig.stream.calls[6].page_token is not None  # resumed where polling left off


async def test_stream_mode_never_polls_and_keeps_retrying(srig: StreamRig) -> None:
    for _ in range(8):
        srig.stream.fail(grpc.StatusCode.UNIMPLEMENTED)
    await srig.start(read_mode="stream")
    await srig.until(lambda: len(srig.stream.calls) == 9 and srig.stream.calls[8].responses >= 1)
    srig.stream.push(mention(1))
    await srig.until(lambda: len(srig.rest.inserted) == 1)
    assert srig.rest.calls["list"] == 0
    assert max(srig.rig.time.sleeps) <= 300.0  # retried at most five minutes apart


async def test_without_grpcio_the_chat_is_polled(
    srig: StreamRig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "grpc", None)  # import grpc -> ImportError
    monkeypatch.delitem(sys.modules, "adapters.youtube.stream_list")
    srig.rest.pages.append([mention(1)])
    caplog.set_level(logging.INFO, logger="chorus.youtube")
    await srig.start()
    await srig.until(lambda: len(srig.rest.inserted) == 1)
    assert srig.stream.calls == []
    [fallback] = [r for r in caplog.records if "stream unavailable" in r.getMessage()]
    assert "grpcio is not installed" in fallback.reason  # type: ignore[attr-defined]


@pytest.mark.parametrize("how", ["offlineAt", "chatEndedEvent"])
async def test_the_end_of_the_stream_ends_the_chat(srig: StreamRig, how: str) -> None:
    task = await srig.start(video_id=VIDEO_ID)
    await srig.until(lambda: bool(srig.stream.calls) and srig.stream.calls[0].responses >= 1)
    srig.stream.push(mention(1))
    await srig.until(lambda: len(srig.rest.inserted) == 1)
    if how == "offlineAt":
        srig.stream.go_offline("2025-06-02T21:00:00Z")
    else:
        srig.stream.push({"id": "LCC.end", "snippet": {"type": "chatEndedEvent"}})
    await asyncio.wait_for(task, 30)  # run() returns by itself: the video's chat is over
    assert srig.rest.calls["list"] == 0 and srig.inbound_ids() == ["LCC.q1"]


async def test_an_open_quiet_stream_is_ready_and_a_failing_one_is_not(srig: StreamRig) -> None:
    await srig.start(read_mode="stream")  # no fallback: polling would be ready again
    await srig.until(lambda: bool(srig.stream.calls) and srig.stream.calls[0].responses >= 1)
    srig.stream.push(line(0))  # read by the adapter, not only sent by the server: connected
    await srig.until(srig.read_at_least(1))
    adapter = srig.rig.adapter
    assert adapter is not None and await adapter.ready()
    srig.rig.time.now += timedelta(hours=1)  # an hour without a message: still connected
    assert await adapter.ready()
    srig.stream.close_after = 0  # from now on every connection closes without answering
    for _ in range(3):
        srig.stream.fail(grpc.StatusCode.UNAVAILABLE)
    srig.stream.push(line(1))
    await srig.until(lambda: len(srig.stream.calls) >= 3)
    assert not await adapter.ready()


@pytest.mark.parametrize("mode", ["stream", "poll", "stream-closing"])
async def test_an_hour_of_chat_costs_one_connection_streamed_and_1000_units_polled(
    srig: StreamRig, mode: str
) -> None:
    """A line every 10 s for a simulated hour, read both ways; docs/platforms/youtube.md's quota figures.
    ``stream-closing``: a server that closes the stream after every response still costs no
    more than polling (reconnects are paced by the same plan), and loses nothing."""
    time, end = srig.rig.time, START + timedelta(hours=1)
    srig.stream.close_after = 1 if mode == "stream-closing" else None
    if mode == "poll":
        srig.rest.page_source = lambda n: [line(n)]
        time.stop_when = lambda: time.now >= end
        await srig.start(read_mode="poll")
        await srig.until(time.parked.is_set, limit=60)
    else:
        await srig.start()
        await srig.until(lambda: bool(srig.stream.calls) and srig.stream.calls[0].responses >= 1)
        for n in range(1, 361):
            time.now += timedelta(seconds=10)
            srig.stream.push(line(n))
            await srig.until(srig.read_at_least(n))
    adapter = srig.rig.adapter
    assert adapter is not None
    spent = adapter.quota_status.units_spent
    print(f"\n{mode}: {spent} quota units in a simulated hour, {len(srig.rig.inbound)} lines read")
    if mode == "stream":
        assert spent == 1 + 1 + 5  # channels.list, liveBroadcasts.list, one streamList connection
    elif mode == "poll":  # the planned ~19 s cadence (one line a poll): ~190 polls of 5 units
        assert 900 <= spent <= 1_100 and len(srig.rig.inbound) >= 180
    else:  # a connection per line, each charged 5: about what fast polling would spend
        assert len(srig.stream.calls) >= 360 and spent <= 2_100
    if mode != "poll":
        assert len(srig.rig.inbound) >= 360
        assert srig.rest.calls["list"] == 0
        assert srig.inbound_ids() == [f"LCC.s{n}" for n in range(1, 361)]


def _env(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    base = {
        "YOUTUBE_CLIENT_ID": "x.apps.googleusercontent.com",
        "YOUTUBE_CLIENT_SECRET": "secret",
        "YOUTUBE_REFRESH_TOKEN": "1//token",
    }
    for name, value in (base | values).items():
        monkeypatch.setenv(name, value)


def test_reading_defaults_to_the_stream_over_tls_at_google(monkeypatch: pytest.MonkeyPatch) -> None:
    _env(monkeypatch)
    adapter = adapter_from_env(YouTubeAdapter, InProcessBus(), Redis())
    assert adapter is not None
    settings = adapter.settings
    assert (settings.read_mode, settings.grpc_target) == ("auto", "youtube.googleapis.com:443")
    assert not settings.grpc_insecure and adapter.api.ledger.config.stream_cost == 5


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"YOUTUBE_GRPC_INSECURE": "1"}, "YOUTUBE_GRPC_INSECURE"),  # plaintext to Google: no
        (
            {"YOUTUBE_GRPC_INSECURE": "1", "YOUTUBE_GRPC_TARGET": "10.0.0.5:50051"},
            "YOUTUBE_GRPC_INSECURE",
        ),
        ({"YOUTUBE_GRPC_TARGET": "https://youtube.googleapis.com"}, "YOUTUBE_GRPC_TARGET"),
        ({"YOUTUBE_READ_MODE": "sometimes"}, "YOUTUBE_READ_MODE"),
    ],
)
def test_unsafe_or_wrong_stream_settings_are_refused(
    monkeypatch: pytest.MonkeyPatch, values: dict[str, str], named: str
) -> None:
    _env(monkeypatch, **values)
    with pytest.raises(ConfigError, match=named):
        adapter_from_env(YouTubeAdapter, InProcessBus(), Redis())


def test_stream_mode_without_grpcio_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _env(monkeypatch, YOUTUBE_READ_MODE="stream")
    monkeypatch.setitem(sys.modules, "grpc", None)
    with pytest.raises(ConfigError, match="grpcio is not installed"):
        adapter_from_env(YouTubeAdapter, InProcessBus(), Redis())
    _env(monkeypatch, YOUTUBE_READ_MODE="auto")  # auto polls without it
    assert adapter_from_env(YouTubeAdapter, InProcessBus(), Redis()) is not None
