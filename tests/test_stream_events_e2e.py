"""``chorus run`` as a real process thanking stream events on Twitch and YouTube.

Twitch: the loopback EventSub socket delivers recorded ``channel.chat.notification`` frames - a
community gift of five subs (the announcement, then one notice per recipient, each with its own
ids), a sub of a kind left off, late notices of the same gift, a resub whose message mentions the
bot, a raid - to the real twitchio; the router, the live-chat policies and the Anthropic SDK
(against its loopback server) are wired by the composition root. YouTube: the loopback gRPC
``streamList`` pushes the recorded paid and membership items. Each burst must become ONE sent
message, and with ``CHORUS_THANKS`` unset nothing is thanked at all.

"Nothing more was sent" is observed through ordering, never by waiting: a channel's messages are
decided in arrival order, so once a mention sent after some events is answered, those events
have been decided; ``/metrics`` then says how (``thanks_event`` counts the events kept).
"""

from __future__ import annotations

import asyncio
import copy
import json
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.twitch_server import TwitchServer, fixture
from tests.loopback.youtube_grpc import YouTubeStreamServer
from tests.loopback.youtube_server import VIDEO_ID, YouTubeServer, text_item
from tests.redis_server import free_port
from tests.test_chat_e2e import ROOT, base_env, spawn_chorus
from tests.test_live_pause_e2e import decisions, subscribed
from tests.test_twitch_e2e import BOT_ID, BOT_LOGIN, CHANNEL, CHANNEL_LOGIN, CHAT, chat_event
from tests.test_twitch_reconnect_e2e import twitch_env

LIMIT = 90.0  # generous: a loaded 2-core machine; each wait ends as soon as its event happens
NOTICE = "channel.chat.notification"
GIFT_ID = "12111455614691086753"
FAST = {"CHORUS_THANKS_SETTLE_SECONDS": "1", "CHORUS_THANKS_MIN_GAP_SECONDS": "0"}


def notice(name: str, message_id: str, **changes: Any) -> dict[str, Any]:
    event: dict[str, Any] = copy.deepcopy(
        fixture(f"twitch_channel_chat_notification_{name}")["payload"]["event"]
    )
    event.update(message_id=message_id, **changes)
    return event


def gift_part(n: int) -> dict[str, Any]:
    """Recipient ``n``'s notice of the fixture's community gift (by the same gifter)."""
    gift = notice("sub_gift", f"part-{n}")
    gift["sub_gift"] = dict(
        gift["sub_gift"],
        community_gift_id=GIFT_ID,
        recipient_user_id=str(9_000_000 + n),
        recipient_user_login=f"lucky{n}",
        recipient_user_name=f"Lucky{n}",
    )
    return gift


def mention_resub() -> dict[str, Any]:
    text = f"@{BOT_LOGIN} nine months! what's the plan?"
    mention = {"user_id": BOT_ID, "user_name": "MyBot", "user_login": BOT_LOGIN}
    fragments = [
        {"type": "mention", "text": f"@{BOT_LOGIN}", "cheermote": None, "emote": None}
        | {"mention": mention},
        {"type": "text", "text": text.split(" ", 1)[1], "cheermote": None, "emote": None}
        | {"mention": None},
    ]
    return notice("resub", "resub-1", message={"text": text, "fragments": fragments})


def prompts_seen(model: AnthropicServer) -> list[str]:
    """The last user turn of each model request, as text."""
    seen = []
    for request in model.requests:
        content = request.body["messages"][-1]["content"]
        parts = [content] if isinstance(content, str) else [p.get("text", "") for p in content]
        seen.append("\n".join(parts))
    return seen


@asynccontextmanager
async def chorus(env: dict[str, str], tmp_path: Path) -> AsyncIterator[None]:
    proc = await spawn_chorus(["run"], env, tmp_path)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()[-3000:]


@asynccontextmanager
async def twitch_run(
    tmp_path: Path, **extra: str
) -> AsyncIterator[tuple[TwitchServer, AnthropicServer, int]]:
    port = free_port()
    async with AnthropicServer() as model, TwitchServer() as twitch:
        twitch.add_user(BOT_ID, BOT_LOGIN)
        twitch.add_user(CHANNEL, CHANNEL_LOGIN)
        twitch.grant(BOT_ID, "access-0", "refresh-0")
        env = base_env(tmp_path) | twitch_env(twitch) | extra
        env |= {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "CHORUS_HEALTH_HOST": "127.0.0.1",
            "CHORUS_HEALTH_PORT": str(port),
        }
        async with chorus(env, tmp_path):
            await twitch.wait_until(lambda: subscribed(twitch) == 4, LIMIT)
            yield twitch, model, port


def sent_to(twitch: TwitchServer) -> Callable[[int], Awaitable[None]]:
    async def until(count: int) -> None:
        await twitch.wait_until(lambda: len(twitch.sent) >= count, LIMIT)

    return until


async def test_twitch_a_gift_burst_is_one_thanks_and_late_notices_add_none(tmp_path: Path) -> None:
    async with twitch_run(tmp_path, CHORUS_THANKS="gift_sub,raid", **FAST) as (twitch, model, port):
        until = sent_to(twitch)
        burst = [notice("community_sub_gift", "gift-1"), *(gift_part(n) for n in range(5))]
        for event in [*burst, notice("sub", "sub-1")]:  # subs are not thanked: kind off
            assert await twitch.notify(NOTICE, event) == 1
        await until(1)
        thanks = twitch.sent[0]
        assert thanks.get("reply_parent_message_id") is None
        (asked,) = prompts_seen(model)
        assert "Deleterr: gifted 5 subs to the community (Tier 1)" in asked
        assert "Lucky" not in asked and "viewer32" not in asked  # recipients; the sub (off)
        assert "STREAM EVENTS:" in asked

        for event in (gift_part(5), gift_part(6), mention_resub()):  # late parts, a mention
            assert await twitch.notify(NOTICE, event) == 1
        await until(2)  # the resub's mention: answered at once, unthreaded (notices cannot be)
        answer = twitch.sent[1]
        assert answer.get("reply_parent_message_id") is None
        assert str(answer["message"]).startswith("@keepcalmcallsoul ")

        assert await twitch.notify(NOTICE, notice("raid", "raid-1")) == 1
        await until(3)
        raid = prompts_seen(model)[-1]
        assert "TwitchDev: raided the channel with 42 viewers" in raid and "gifted" not in raid
        seen = await decisions(port)
        assert seen["thanks"] == 2  # two thanks turns: the burst, the raid
        assert seen["thanks_event"] == 7  # the gift, its 5 parts, the raid; late parts absorbed
    assert len(twitch.sent) == 3


async def test_twitch_kinds_off_by_default_thank_nobody(tmp_path: Path) -> None:
    async with twitch_run(tmp_path) as (twitch, model, port):
        events = [
            notice("raid", "raid-1"),
            notice("community_sub_gift", "gift-1"),
            *(gift_part(n) for n in range(3)),
            notice("sub", "sub-1"),
            notice("resub", "resub-1"),
        ]
        for event in events:
            assert await twitch.notify(NOTICE, event) == 1
        cheer = fixture("twitch_channel_chat_message_cheer")["payload"]["event"]
        assert await twitch.notify(CHAT, cheer) == 1
        assert await twitch.notify(CHAT, chat_event("last", f"@{BOT_LOGIN} anyone there?")) == 1
        await twitch.wait_until(lambda: len(twitch.sent) >= 1, LIMIT)
        seen = await decisions(port)  # every event before the mention was decided: none kept
        assert "thanks_event" not in seen and "thanks" not in seen, seen
    assert [s.get("reply_parent_message_id") for s in twitch.sent] == ["last"]
    assert len(prompts_seen(model)) == 1


def _stream_items() -> list[dict[str, Any]]:
    path = (
        ROOT / "tests" / "fixtures" / "youtube" / "youtube_livechatmessages_list_stream_events.json"
    )
    items: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))["items"]
    received = items[-1]
    for n in range(2, 6):  # the other four recipients of the five gifted memberships
        part = copy.deepcopy(received)
        part["id"] = f"LCC.fixture-giftreceived-000{n}"
        part["snippet"]["authorChannelId"] = part["authorDetails"]["channelId"] = f"UCgift{n}"
        part["authorDetails"]["displayName"] = f"Recipient{n}"
        items.append(part)
    return items


async def test_youtube_super_chats_and_memberships_are_one_thanks(tmp_path: Path) -> None:
    async with AnthropicServer() as model, YouTubeServer() as youtube:
        stream = await YouTubeStreamServer(youtube).start()
        env = base_env(tmp_path) | FAST
        env |= {
            "CHORUS_THANKS": "all",
            "CHORUS_THANKS_MAX_NAMES": "2",
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "YOUTUBE_CLIENT_ID": youtube.client_id,
            "YOUTUBE_CLIENT_SECRET": youtube.client_secret,
            "YOUTUBE_REFRESH_TOKEN": youtube.refresh_token,
            "YOUTUBE_VIDEO_ID": VIDEO_ID,
            "YOUTUBE_API_BASE_URL": youtube.api_base,
            "GOOGLE_OAUTH_TOKEN_URL": youtube.token_url,
            "YOUTUBE_GRPC_TARGET": stream.target,
            "YOUTUBE_GRPC_INSECURE": "true",
        }
        try:
            async with chorus(env, tmp_path):
                await stream.wait_for(
                    lambda: bool(stream.calls) and stream.calls[0].responses >= 1, LIMIT
                )
                stream.push(*_stream_items())
                await youtube.wait_for(lambda: len(youtube.inserted) == 1, limit=LIMIT)
                mention = text_item(
                    "LCC.after", "@Chorus still there?", author_id="UCz", name="Zed"
                )
                stream.push(mention)
                await youtube.wait_for(lambda: len(youtube.inserted) == 2, limit=LIMIT)
        finally:
            await stream.close()
    (asked, _) = prompts_seen(model)
    lines = asked.split("<user_message", 2)[-1]
    assert (
        "A: gifted 5 memberships to the community (Gold Club); sent a Super Chat ($5.00)" in lines
    )
    assert "B: has been a member for 12 months (Gold Club); became a member (Gold Club)" in lines
    assert "and wrote: love the stream" in lines and "and wrote: still here!" in lines
    assert "Recipient" not in lines  # the gift's recipients are not thanked, the gifter is
    texts = [b["snippet"]["textMessageDetails"]["messageText"] for b in youtube.inserted]
    assert texts[1].startswith("@Zed ")
    assert youtube.calls["insert"] == 2  # one insert (50 units) for the whole burst
