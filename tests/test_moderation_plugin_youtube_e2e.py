"""The ``moderation`` plugin on YouTube: a real ``chorus run`` with ``[plugins.moderation]``
reading the loopback YouTube live chat by polling, the quota ledger in a real Redis. A viewer
posts a link three times: each message is deleted through ``liveChatMessages.delete``, the viewer
is warned once, and the third offence is a temporary ban (``liveChatBans.insert``, ``type:
temporary`` with ``banDurationSeconds``). Every moderation call is paid from the day's quota
ledger as a reply (``YOUTUBE_COST_MODERATION`` units each), beside the bot's messages."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis

from bot.quota.day import quota_day
from bot.state import keys
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.youtube_server import VIDEO_ID, YouTubeServer, text_item
from tests.test_chat_e2e import ROOT, base_env, spawn_chorus, stopped

pytestmark = pytest.mark.e2e

LIMIT = 90.0
MODERATION_COST = 7  # distinct from every other cost, so the ledger's sum tells it apart
INSERT_COST = 50


@pytest.fixture
def tag(real_redis_url: str) -> Iterator[str]:
    tag = uuid.uuid4().hex[:10]
    yield tag
    client = redis.Redis.from_url(real_redis_url)
    try:
        doomed = list(client.scan_iter(match=f"*{tag}*"))
        if doomed:
            client.delete(*doomed)
    finally:
        client.close()


async def test_a_link_poster_is_deleted_warned_and_temporarily_banned_on_youtube(
    tmp_path: Path, real_redis_url: str, tag: str
) -> None:
    (tmp_path / "chorus.toml").write_text("[plugins.moderation]\ntimeout_seconds = 300\n")
    now = datetime.now(UTC).replace(microsecond=0)
    async with AnthropicServer() as model, YouTubeServer(polling_ms=1000) as youtube:
        youtube.client_id = f"{tag}.apps.googleusercontent.com"
        youtube.live_chat_id = f"chat-{tag}"
        youtube.actual_start = now.isoformat().replace("+00:00", "Z")
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "CHORUS_REDIS_URL": real_redis_url,
            "CHORUS_INSIGHTS_ENABLED": "false",
            "YOUTUBE_CLIENT_ID": youtube.client_id,
            "YOUTUBE_CLIENT_SECRET": youtube.client_secret,
            "YOUTUBE_REFRESH_TOKEN": youtube.refresh_token,
            "YOUTUBE_VIDEO_ID": VIDEO_ID,
            "YOUTUBE_API_BASE_URL": youtube.api_base,
            "GOOGLE_OAUTH_TOKEN_URL": youtube.token_url,
            "YOUTUBE_READ_MODE": "poll",
            "YOUTUBE_POLL_FLOOR_SECONDS": "5",
            "YOUTUBE_COST_LIST": "1",
            "YOUTUBE_MAX_PIECES": "1",
            "YOUTUBE_RESERVED_SENDS": "0",
            "YOUTUBE_STREAM_HOURS": "0.5",
            "YOUTUBE_COST_MODERATION": str(MODERATION_COST),
            "YOUTUBE_COST_INSERT": str(INSERT_COST),
            "PYTHONPATH": str(ROOT),
        }
        viewer = f"UC{tag}linky"
        ids = [f"LCC.{tag}-{n}" for n in range(3)]
        proc = await spawn_chorus(["run"], env, tmp_path)
        failure: Exception | None = None
        try:
            await youtube.wait_for(lambda: youtube.calls["list"] >= 1, LIMIT)  # the backlog
            for n, msg_id in enumerate(ids):
                youtube.chat_messages.add(msg_id)
                text = f"free subs at https://subs{n}.example.com"
                item = text_item(
                    msg_id, text, author_id=viewer, name="Linky", live_chat_id=youtube.live_chat_id
                )
                youtube.pages.append([item])
                await youtube.wait_for(lambda m=msg_id: m not in youtube.chat_messages, LIMIT)  # type: ignore[misc]
            await youtube.wait_for(lambda: youtube.banned(viewer) is not None, LIMIT)
            ban = youtube.banned(viewer)
            assert ban is not None
            assert ban["type"] == "temporary" and int(ban["banDurationSeconds"]) == 300
            paths = [(c.method, c.path) for c in youtube.moderation_calls]
            assert paths == [("DELETE", "/youtube/v3/liveChat/messages")] * 3 + [
                ("POST", "/youtube/v3/liveChat/bans")
            ]
            await youtube.wait_for(lambda: len(youtube.inserted) >= 2, LIMIT)  # warn, ban notice
            said = [
                str(i["snippet"]["textMessageDetails"]["messageText"]) for i in youtube.inserted
            ]
            assert len([s for s in said if "please stop" in s]) == 1
            client = redis.Redis.from_url(real_redis_url, decode_responses=True)
            try:
                day = client.hgetall(keys.quota("youtube", youtube.client_id, quota_day(now)))
            finally:
                client.close()
            # the replies' share of the day: the bot's messages and the four moderation calls
            assert int(day["reply"]) == INSERT_COST * len(youtube.inserted) + 4 * MODERATION_COST
        except Exception as exc:
            failure = exc
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGINT)
            _, err = await stopped(proc)
        if failure is not None:
            raise AssertionError(err.decode(errors="replace")[-6000:]) from failure
        assert proc.returncode == 0, err.decode(errors="replace")[-3000:]
