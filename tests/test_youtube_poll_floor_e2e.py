"""``chorus run`` reading four busy hours of a YouTube chat by polling, on an accelerated clock.

The process runs under libfaketime (``LD_PRELOAD``, Debian package ``faketime``): its clocks --
``time.time``, ``datetime.now``, the event loop's monotonic clock and the timeouts of its
``epoll_wait`` -- run ``SPEED`` times faster than real time, starting at 10:00 Pacific, so four
hours of stream take four real minutes and the quota day, the reply budget and every
sleep run on the accelerated clock together. Nothing else is faked: the loopback YouTube
server refuses ``streamList`` (``PERMISSION_DENIED``: the default ``auto`` read mode falls back
to polling), serves a busy chat (1.5 lines a second of stream time, about one in forty a
mention) page by page, takes the inserts and charges every call; the model is the loopback
Anthropic server; the ledger is in the real Redis. Default quota and budget settings.

The issue's "Done when": the chat is polled in every 10 minutes of the four hours (the reading
reserve, sized for polling, is never spent by replies) and mentions are still answered in the
last hour (the replies are paced over the stream)."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.youtube_grpc import YouTubeStreamServer
from tests.loopback.youtube_server import VIDEO_ID, YouTubeServer, text_item
from tests.test_chat_e2e import ROOT, base_env
from tests.test_youtube_budget_e2e import tag  # noqa: F401 (the fixture)

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
HAVE_FAKETIME = LIBFAKETIME.exists()
SPEED = 60.0  # stream seconds per real second
START = datetime(2025, 6, 2, 17, 0, tzinfo=UTC)  # 10:00 Pacific: the reset is 14 hours away
HOURS = 4
LINES_PER_S = 1.5
MENTION_SHARE = 0.025
WINDOW_S = 600.0  # the "Done when": a poll in every 10 minutes of the stream


class BusyChat:
    """The chat said between two polls, on the stream's clock (real seconds x ``SPEED``)."""

    def __init__(self, key: str, live_chat_id: str) -> None:
        self.rng = random.Random(38)
        self.tag, self.live_chat_id = key, live_chat_id
        self.began: float | None = None  # real monotonic time of the first page (stream t = 0)
        self.polls: list[float] = []  # stream seconds of each poll after the backlog
        self.said = 0.0
        self.n = 0
        self.mentions: dict[str, float] = {}  # message id -> stream second said

    def stream_now(self) -> float:
        assert self.began is not None
        return (time.monotonic() - self.began) * SPEED

    def page(self, number: int) -> list[dict[str, Any]]:
        if self.began is None:
            self.began = time.monotonic()
        now = self.stream_now()
        self.polls.append(now)
        items = []
        while self.said < now:  # ``said``: when the next line is said
            self.n += 1
            user = f"UC{self.tag}{self.rng.randrange(200):03d}"
            mention = self.rng.random() < MENTION_SHARE
            text = "@Chorus what is the boss weak to?" if mention else "gg that was close"
            message_id = f"LCC.{self.tag}-{self.n}"
            if mention:
                self.mentions[message_id] = self.said
            published = (START + timedelta(seconds=self.said)).isoformat()
            items.append(
                text_item(
                    message_id,
                    text,
                    author_id=user,
                    name=f"viewer{user[-3:]}",
                    published=published.replace("+00:00", "Z"),
                    live_chat_id=self.live_chat_id,
                )
            )
            self.said += self.rng.expovariate(LINES_PER_S)
        return items


@pytest.mark.timeout(1200)
async def test_four_busy_hours_polled_on_an_accelerated_clock_never_go_deaf(
    tmp_path: Path,
    real_redis_url: str,
    tag: str,  # noqa: F811
) -> None:
    if not HAVE_FAKETIME:
        missing = f"{LIBFAKETIME} is missing: apt-get install faketime"
        if os.environ.get("CI") == "true":
            pytest.fail(missing)
        pytest.skip(missing)
    async with AnthropicServer() as model, YouTubeServer(polling_ms=5000) as youtube:
        stream = await YouTubeStreamServer(youtube).start()
        stream.fail(grpc.StatusCode.PERMISSION_DENIED)  # streamList refused: polling it is
        youtube.client_id = f"{tag}.apps.googleusercontent.com"
        youtube.live_chat_id = f"chat-{tag}"
        youtube.actual_start = START.isoformat().replace("+00:00", "Z")
        chat = BusyChat(tag, youtube.live_chat_id)
        youtube.page_source = chat.page
        sent: list[float] = []  # stream seconds of each insert
        youtube.on_insert.append(lambda _: sent.append(chat.stream_now()))
        env = base_env(tmp_path) | {
            "LD_PRELOAD": str(LIBFAKETIME),
            "FAKETIME": f"@{START:%Y-%m-%d %H:%M:%S} x{SPEED:g}",
            "FAKETIME_DONT_RESET": "1",
            "TZ": "UTC",
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "CHORUS_REDIS_URL": real_redis_url,
            "YOUTUBE_CLIENT_ID": youtube.client_id,
            "YOUTUBE_CLIENT_SECRET": youtube.client_secret,
            "YOUTUBE_REFRESH_TOKEN": youtube.refresh_token,
            "YOUTUBE_VIDEO_ID": VIDEO_ID,
            "YOUTUBE_API_BASE_URL": youtube.api_base,
            "GOOGLE_OAUTH_TOKEN_URL": youtube.token_url,
            "YOUTUBE_GRPC_TARGET": stream.target,
            "YOUTUBE_GRPC_INSECURE": "true",
            "PYTHONPATH": str(ROOT),
        }
        # Four stream hours of INFO lines outgrow a pipe nobody reads until the end, and a full
        # pipe blocks the bot's next log line: they go to a file instead.
        log_file = tmp_path / "chorus.log"
        with log_file.open("wb") as log_out:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bot.cli", "run",
                stdin=asyncio.subprocess.DEVNULL, stdout=log_out, stderr=log_out,
                env=env, cwd=tmp_path,
            )  # fmt: skip

        try:
            limit = HOURS * 3600 / SPEED * 4 + 120  # generous: a loaded machine runs slower
            await youtube.wait_for(lambda: chat.began is not None, 120)
            await youtube.wait_for(
                lambda: bool(chat.polls) and chat.polls[-1] >= HOURS * 3600, limit
            )
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 60)
            except TimeoutError:
                proc.kill()
                await proc.wait()
            await stream.close()
        assert proc.returncode == 0, log_file.read_text(errors="replace")[-3000:]
    assert stream.calls  # the stream was tried, refused, and the chat polled instead
    polls = [t for t in chat.polls if t < HOURS * 3600]
    windows = {int(t // WINDOW_S) for t in polls}
    assert windows == set(range(int(HOURS * 3600 // WINDOW_S))), sorted(windows)
    assert len(chat.mentions) >= 300
    # replies were made in every hour, the last included (paced over the stream)
    hours = {int(t // 3600) for t in sent if t < HOURS * 3600}
    assert hours == set(range(HOURS)), sorted(hours)
    assert youtube.units <= 10_000
