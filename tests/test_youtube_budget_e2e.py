"""``chorus run`` as a real process on a YouTube chat whose reply budget is nearly spent.

The loopback YouTube server is polled (``YOUTUBE_READ_MODE=poll``, a poll every 5 s at most);
the day's ledger in a real Redis is filled beforehand so that, beyond what reading needs until
the quota resets, one reply is left. Then, in the order the chat is read:

1. three ambient lines (a room batch is due) and a mention: the mention is answered, the room
   batch is held back (logged, counted): mentions come before room batches;
2. a second mention: the budget cannot pay for it, so it is declined with reason ``quota``
   (logged, counted in ``chorus_engagement_decisions_total``);
3. a third mention: the chat is still read (polls go on, paid from the reading reserve) and it
   is declined too.

The spend is in Redis (the day's hash, by kind) and in ``/metrics``. Every wait is on a
condition; nothing depends on how fast the machine is.
"""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from bot.quota.day import quota_day
from bot.quota.plan import QuotaConfig, StreamView, Usage, plan_budget
from bot.state import keys
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.youtube_server import VIDEO_ID, YouTubeServer, text_item
from tests.redis_server import free_port
from tests.test_chat_e2e import ROOT, base_env, spawn_chorus
from tests.waiting import until

LIMIT = 90.0
CONFIG = QuotaConfig(
    list_cost=1, max_pieces=1, reserved_sends=0, stream_hours=0.5, poll_floor_seconds=5
)


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


async def metrics(port: int) -> dict[tuple[str, str], float]:
    """``{(series, label value): value}`` of the YouTube decisions and quota series."""
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        body = await response.text()
    found: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "chorus_engagement_decisions_total":
                if labels.get("platform") == "youtube":
                    found[sample.name, labels["decision"]] = sample.value
            elif sample.name.startswith("chorus_youtube_"):
                found[sample.name, labels.get("kind") or labels.get("part", "")] = sample.value
    return found


async def test_mentions_first_then_declined_for_quota_while_reading_goes_on(
    tmp_path: Path, real_redis_url: str, tag: str
) -> None:
    port = free_port()
    now = datetime.now(UTC).replace(microsecond=0)
    async with AnthropicServer() as model, YouTubeServer(polling_ms=1000) as youtube:
        youtube.client_id = f"{tag}.apps.googleusercontent.com"
        youtube.live_chat_id = f"chat-{tag}"
        youtube.actual_start = now.isoformat().replace("+00:00", "Z")
        model.replies.extend(["Here you go."] * 5)
        # beyond what reading needs until the reset, 80 units: one one-piece reply (50)
        budget = plan_budget(CONFIG, Usage(), StreamView(now, "poll"), now)
        day = keys.quota("youtube", youtube.client_id, quota_day(now))
        client = redis.Redis.from_url(real_redis_url, decode_responses=True)
        spent_before = budget.reply_limit - 80
        client.hset(day, mapping={"units": spent_before, "read": spent_before})
        client.expire(day, 3 * 86400)
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "CHORUS_REDIS_URL": real_redis_url,
            "CHORUS_HEALTH_HOST": "127.0.0.1",
            "CHORUS_HEALTH_PORT": str(port),
            "CHORUS_LOG_FORMAT": "json",
            "YOUTUBE_CLIENT_ID": youtube.client_id,
            "YOUTUBE_CLIENT_SECRET": youtube.client_secret,
            "YOUTUBE_REFRESH_TOKEN": youtube.refresh_token,
            "YOUTUBE_VIDEO_ID": VIDEO_ID,
            "YOUTUBE_API_BASE_URL": youtube.api_base,
            "GOOGLE_OAUTH_TOKEN_URL": youtube.token_url,
            "YOUTUBE_READ_MODE": "poll",
            "YOUTUBE_COST_LIST": "1",
            "YOUTUBE_MAX_PIECES": "1",
            "YOUTUBE_RESERVED_SENDS": "0",
            "YOUTUBE_STREAM_HOURS": "0.5",
            "YOUTUBE_POLL_FLOOR_SECONDS": "5",
            # a room batch is due as soon as three lines wait
            "CHORUS_ENGAGE_YOUTUBE_MIN_PENDING": "3",
            "CHORUS_ENGAGE_YOUTUBE_MIN_GAP_SECONDS": "0",
            "CHORUS_ENGAGE_CHANNEL_COOLDOWN_SECONDS": "0",
            "PYTHONPATH": str(ROOT),
        }

        def line(n: int, user: str, text: str) -> dict[str, Any]:
            chat, author = youtube.live_chat_id, f"UC{tag}{user}"
            return text_item(f"LCC.{tag}-{n}", text, author_id=author, name=user, live_chat_id=chat)

        proc = await spawn_chorus(["run"], env, tmp_path)
        try:
            await youtube.wait_for(lambda: youtube.calls["list"] >= 1, LIMIT)  # the backlog
            youtube.pages.append(
                [line(1, "Ann", "gg"), line(2, "Bob", "so good"), line(3, "Cat", "lol")]
                + [line(4, "Dan", "@Chorus what is the boss weak to?")]
            )
            await youtube.wait_for(lambda: len(youtube.inserted) == 1, LIMIT)

            async def held() -> bool:
                return (await metrics(port)).get(
                    ("chorus_engagement_decisions_total", "held_budget"), 0
                ) >= 1

            await until(held, limit=LIMIT, every=0.2)  # the room batch was due with the mention
            youtube.pages.append([line(5, "Eve", "@Chorus and the second phase?")])

            async def declined(n: float) -> bool:
                seen = await metrics(port)
                return seen.get(("chorus_engagement_decisions_total", "declined_quota"), 0) >= n

            await until(lambda: declined(1), limit=LIMIT, every=0.2)  # the second mention
            polls = youtube.calls["list"]
            youtube.pages.append([line(6, "Fay", "@Chorus still there?")])
            await until(
                lambda: declined(2), limit=LIMIT, every=0.2
            )  # the third: read, and declined too
            assert youtube.calls["list"] > polls  # reading went on without the reply budget
            seen = await metrics(port)
            assert seen["chorus_youtube_quota_units", "reply"] == 50
            assert seen["chorus_youtube_quota_units", "read"] > spent_before
            assert seen["chorus_youtube_reply_budget_units", "replies_left"] < 50
            assert seen["chorus_youtube_reply_budget_units", "reading_reserve"] > 0
            ledger = {str(k): int(v) for k, v in client.hgetall(day).items()}
            assert (ledger["inserts"], ledger["reply"], ledger["replies"]) == (1, 50, 1)
            assert ledger["units"] == ledger["read"] + ledger["lookup"] + ledger["reply"]
            calls = youtube.calls  # every call charged once, at this test's costs
            lookups = calls["channels"] + calls["videos"]
            assert ledger["units"] == spent_before + lookups + calls["list"] + 50 * calls["insert"]
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 60)
            client.close()
        assert proc.returncode == 0, err.decode()[-3000:]
        texts = [b["snippet"]["textMessageDetails"]["messageText"] for b in youtube.inserted]
        assert texts == ["@Dan Here you go."]  # the mention; never the room batch
        records = [json.loads(x) for x in err.decode().splitlines() if x.startswith("{")]
        declines = [r for r in records if r.get("msg") == "live chat: mention declined"]
        assert [(r["message_id"], r["reason"]) for r in declines] == [
            (f"LCC.{tag}-5", "quota"),
            (f"LCC.{tag}-6", "quota"),
        ]
        held_back = [r for r in records if "held back for the reply budget" in r.get("msg", "")]
        assert len(held_back) == 1 and held_back[0]["pending"] == 3
