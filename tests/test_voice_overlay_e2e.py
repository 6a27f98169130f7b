"""The stream overlay speaks, end to end: ``chorus run`` as a real process with Twitch (twitchio
against the loopback EventSub websocket and Helix), the Anthropic SDK against its loopback
(streaming its answer slowly, word by word), the speech providers' SDK against the loopback
speech server, state in a real Redis, and the overlay page in a real Chromium started the way
OBS's browser source runs (autoplay allowed, no user gesture).

Checked through the page (``window.chorusOverlay``, what the page itself did): a mention and the
bot's answer are shown, and its ``<audio>`` plays the loopback provider's bytes sentence by
sentence (each item ended, its duration the one the server's WAV has), the first one starting
before the model sent its last chunk. A 500-bit cheer is read aloud with the viewer's name; a
cheer with a blocked word never reaches the speech provider. A moderator's ``!skip`` stops the
item playing; ``!tts pause`` stops speech (nothing more is queued), ``!tts resume`` brings it
back. With the provider down the chain falls back to espeak-ng and the overlay still speaks.
Without its key, with a wrong one, or with the old key after ``chorus overlay key --rotate``,
the page and its events answer 403 with an empty body.
"""

from __future__ import annotations

import json
import shutil
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from playwright.async_api import Page, async_playwright
from redis.asyncio import Redis

from bot.events import ConversationKey
from bot.state import keys, turnlog
from bot.state.voice import OverlayKeys
from tests.loopback.anthropic_server import AnthropicServer, _pieces
from tests.loopback.speech_server import SpeechServer
from tests.loopback.twitch_server import TwitchServer
from tests.loopback.youtube_grpc import YouTubeStreamServer
from tests.loopback.youtube_server import LIVE_CHAT_ID, VIDEO_ID, YouTubeServer
from tests.redis_server import free_port
from tests.test_admin_browser_e2e import dashboard_up
from tests.test_chat_e2e import ROOT, base_env, spawn_chorus, stopped
from tests.test_live_pause_e2e import channel, line, subscribed
from tests.test_twitch_e2e import BOT_ID, BOT_LOGIN, CHAT, chat_event
from tests.test_twitch_reconnect_e2e import twitch_env
from tests.waiting import until

pytestmark = pytest.mark.e2e

__all__ = ["channel"]  # the fixture: a Twitch channel of this test alone, cleaned up after

LIMIT = 90.0  # generous: a loaded 2-core machine; every wait ends as soon as its event happens
BLOCKED = "zorblax"
ANSWER = (
    "Hello there, friend of the stream. "
    "Kappa is an emote of a grey face that people use for sarcasm and irony in chat. "
    "It was made from a photo of a Justin.tv employee long ago and is still everywhere today "
    "in every channel you visit on the site."
)
SENTENCES = [
    "Hello there, friend of the stream.",
    "Kappa is an emote of a grey face that people use for sarcasm and irony in chat.",
    "It was made from a photo of a Justin.tv employee long ago and is still everywhere today "
    "in every channel you visit on the site.",
]


async def state(page: Page) -> dict[str, Any]:
    found: dict[str, Any] = await page.evaluate("() => window.chorusOverlay || null") or {}
    return found


async def status(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        return response.status, await response.text()


def viewer_line(channel_: tuple[str, str], msg_id: str, text: str, user: str, **extra: Any) -> Any:
    channel_id, login = channel_
    return chat_event(
        msg_id,
        text,
        broadcaster_user_id=channel_id,
        broadcaster_user_login=login,
        broadcaster_user_name=login,
        chatter_user_id=user,
        chatter_user_login=f"fan{user}",
        chatter_user_name=f"Fan{user}",
        badges=[],
        **extra,
    )


async def test_the_overlay_speaks_answers_cheers_and_obeys_moderators(
    tmp_path: Path, real_redis_url: str, real_redis: Redis, channel: tuple[str, str]
) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "install the distribution's chromium (tests/prereqs.sh does)"
    channel_id, login = channel
    conv = ConversationKey(platform="twitch", channel=channel_id)
    tag = uuid.uuid4().hex[:8]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    async with AnthropicServer() as model, TwitchServer() as twitch, SpeechServer() as speech:
        twitch.add_user(BOT_ID, BOT_LOGIN)
        twitch.add_user(channel_id, login)
        twitch.grant(BOT_ID, "access-0", "refresh-0")
        env = base_env(tmp_path) | twitch_env(twitch)
        env |= {
            "TWITCH_CHANNELS": login,
            "CHORUS_REDIS_URL": real_redis_url,
            "CHORUS_INSIGHTS_ENABLED": "false",
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "CHORUS_ADMIN_PORT": str(port),
            "CHORUS_ADMIN_TOKEN": "admin-token-0123456789abcdef",
            "CHORUS_ENGAGE_USER_COOLDOWN_SECONDS": "0",
            "CHORUS_ENGAGE_MIN_GAP_SECONDS": "0",
            "CHORUS_ENGAGE_CHANNEL_COOLDOWN_SECONDS": "0",
            "CHORUS_MODERATION_WORDS": BLOCKED,
            "CHORUS_VOICE": "true",
            "CHORUS_TTS": "openai:alloy",
            "CHORUS_TTS_CHEER_MIN_BITS": "100",
            "OPENAI_API_KEY": "k",
            "OPENAI_BASE_URL": f"{speech.url}/v1",
        }
        proc = await spawn_chorus(["run"], env, tmp_path)
        try:
            await twitch.wait_until(lambda: subscribed(twitch) >= 1, LIMIT)

            await until(lambda: dashboard_up(base), limit=LIMIT)
            key = await OverlayKeys(real_redis).get(conv)
            page_url = f"{base}/overlay/{conv}"

            # No key, a wrong key: 403 and nothing shown.
            for url in (page_url, f"{page_url}?key=wrong", f"{page_url}/events?key=wrong"):
                assert await status(url) == (403, ""), url

            async with async_playwright() as pw:
                browser = await pw.chromium.launch(
                    executable_path=chromium,
                    args=[
                        "--no-sandbox",
                        "--disable-gpu",
                        "--autoplay-policy=no-user-gesture-required",
                    ],
                )
                page = await browser.new_page(viewport={"width": 1280, "height": 300})
                await page.goto(f"{page_url}?key={key}")
                assert await page.evaluate(
                    "() => [getComputedStyle(document.body).backgroundColor, "
                    "getComputedStyle(document.body).overflow]"
                ) == ["rgba(0, 0, 0, 0)", "hidden"]
                await until(lambda: real_redis.exists(keys.voice_watching(conv)), limit=LIMIT)

                # 1. A mention, answered as it streams: spoken sentence by sentence.
                model.replies.append({"text": ANSWER, "chunk_delay": 0.4})
                pieces = len(_pieces(ANSWER))
                event = line(channel, f"{tag}-m1", "what is Kappa?", f"{tag}1", mention=True)
                assert await twitch.notify(CHAT, event)
                await until(lambda: _started(page), limit=LIMIT)
                chunks_when_speaking = len(model.chunk_times)
                assert chunks_when_speaking < pieces, "speech started before the last chunk"
                # The line being answered is on screen with the answer as it is spoken.
                assert await page.is_visible("#card")
                assert await page.inner_text("#who") == f"fan{tag}1"
                assert "what is Kappa?" in await page.inner_text("#said")
                assert (await page.inner_text("#answer")).startswith(SENTENCES[0])
                done = await until(lambda: _played(page, 3), limit=LIMIT)
                assert [item["text"] for item in done[:3]] == SENTENCES
                for item in done[:3]:
                    assert item["ended"] is True
                    assert item["provider"] == "openai"
                    assert item["duration"] == pytest.approx(
                        speech.seconds_for(item["text"]), abs=0.05
                    )
                seen = (await state(page))["shown"]
                assert seen[:3] == SENTENCES, seen
                print(f"first audio started after {chunks_when_speaking} of {pieces} chunks")

                # 2. A 500-bit cheer read aloud with the viewer's name; a blocked one never sent.
                cheer = viewer_line(
                    channel, f"{tag}-c1", "Cheer500 love the stream", f"{tag}2", cheer={"bits": 500}
                )
                assert await twitch.notify(CHAT, cheer)
                played = await until(lambda: _played(page, 4), limit=LIMIT)
                assert played[3]["text"].startswith(f"Fan{tag}2 cheered 500 bits")
                assert played[3]["ended"] is True
                bad = viewer_line(
                    channel, f"{tag}-c2", f"Cheer500 {BLOCKED} you", f"{tag}3", cheer={"bits": 500}
                )
                assert await twitch.notify(CHAT, bad)
                after = viewer_line(
                    channel,
                    f"{tag}-c3",
                    "Cheer600 after the bad one",
                    f"{tag}4",
                    cheer={"bits": 600},
                )
                assert await twitch.notify(CHAT, after)
                played = await until(lambda: _played(page, 5), limit=LIMIT)
                assert played[4]["text"].startswith(f"Fan{tag}4 cheered 600 bits")
                assert not any(BLOCKED in text for _, text in speech.texts)

                # 3. A moderator's !skip stops the item playing.
                speech.seconds_per_word = 2.0  # a long item, to be skipped
                long_cheer = viewer_line(
                    channel,
                    f"{tag}-c4",
                    "Cheer700 a very long line to skip",
                    f"{tag}5",
                    cheer={"bits": 700},
                )
                assert await twitch.notify(CHAT, long_cheer)
                await until(lambda: _started(page, 6), limit=LIMIT)
                skip_sent = time.monotonic()
                moderator = line(channel, f"{tag}-s1", "!skip", f"{tag}6")  # moderator badge
                assert await twitch.notify(CHAT, moderator)
                skipped = await until(lambda: _skipped(page, 1), limit=LIMIT)
                print(
                    f"!skip stopped the item {time.monotonic() - skip_sent:.2f}s after it was sent"
                )
                assert skipped[0]["text"].startswith(f"Fan{tag}5 cheered 700 bits")
                speech.seconds_per_word = 0.12

                # 4. !tts pause: nothing is queued or spoken; !tts resume brings it back.
                assert await twitch.notify(
                    CHAT, line(channel, f"{tag}-p1", "!tts pause", f"{tag}6")
                )
                await until(lambda: _paused(real_redis, conv), limit=LIMIT)
                asked_before = len(speech.texts)
                paused_cheer = viewer_line(
                    channel, f"{tag}-c5", "Cheer800 while paused", f"{tag}7", cheer={"bits": 800}
                )
                assert await twitch.notify(CHAT, paused_cheer)
                assert await twitch.notify(
                    CHAT, line(channel, f"{tag}-p2", "!tts resume", f"{tag}6")
                )
                await until(lambda: _unpaused(real_redis, conv), limit=LIMIT)
                resumed = viewer_line(
                    channel, f"{tag}-c6", "Cheer900 after resume", f"{tag}8", cheer={"bits": 900}
                )
                assert await twitch.notify(CHAT, resumed)
                played = await until(lambda: _played(page, 6), limit=LIMIT)
                assert played[5]["text"].startswith(f"Fan{tag}8 cheered 900 bits")
                assert all("while paused" not in text for _, text in speech.texts[asked_before:])

                # 5. The provider is down: espeak-ng speaks instead.
                speech.down = True
                model.replies.append("Still here. Speaking locally now.")
                event = line(channel, f"{tag}-m2", "are you there?", f"{tag}1", mention=True)
                assert await twitch.notify(CHAT, event)
                played = await until(lambda: _played(page, 8), limit=LIMIT)
                assert [p["provider"] for p in played[6:8]] == ["espeak", "espeak"]
                assert [p["text"] for p in played[6:8]] == ["Still here.", "Speaking locally now."]
                assert all(p["ended"] and p["duration"] > 0.3 for p in played[6:8])
                await browser.close()

            # The turn log has a spoken record per item: provider, times, characters, cost.
            spoken = [r for r in await turnlog.read_log(real_redis, conv) if r.decision == "spoken"]
            by_provider = {r.model.split(":")[0] for r in spoken}
            assert by_provider == {"openai", "espeak"}
            for record in spoken:
                assert record.speech_ms > 0 and record.speech_chars > 0
                paid = record.model.startswith("openai:")
                assert (record.cost_usd > 0) == paid, record

            # 6. Rotation: the old key gets 403 at once, the new one works.
            rotated = await spawn_chorus(["overlay", "key", str(conv), "--rotate"], env, tmp_path)
            out, err = await stopped(rotated)
            assert rotated.returncode == 0, err.decode()[-2000:]
            new_key = await OverlayKeys(real_redis).get(conv)
            assert new_key != key and new_key in out.decode()
            assert await status(f"{page_url}?key={key}") == (403, "")
            assert await status(f"{page_url}/events?key={key}") == (403, "")
            assert (await status(f"{page_url}?key={new_key}"))[0] == 200
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = await stopped(proc)
        assert proc.returncode == 0, err.decode()[-3000:]


async def _started(page: Page, count: int = 1) -> bool:
    return len((await state(page)).get("started", [])) >= count


async def _played(page: Page, count: int) -> list[dict[str, Any]] | None:
    played: list[dict[str, Any]] = (await state(page)).get("played", [])
    return played if len(played) >= count else None


async def _skipped(page: Page, count: int) -> list[dict[str, Any]] | None:
    skipped: list[dict[str, Any]] = (await state(page)).get("skipped", [])
    return skipped if len(skipped) >= count else None


async def _paused(redis: Redis, conv: ConversationKey) -> bool:
    return await redis.hget(keys.voice_control(conv), "paused") in (b"1", "1")


async def _unpaused(redis: Redis, conv: ConversationKey) -> bool:
    return await redis.hget(keys.voice_control(conv), "paused") in (b"0", "0")


async def test_a_super_chat_on_youtube_is_read_aloud_with_the_viewers_name(
    tmp_path: Path, real_redis_url: str, real_redis: Redis
) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "install the distribution's chromium (tests/prereqs.sh does)"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    conv = ConversationKey(platform="youtube", channel=LIVE_CHAT_ID)
    await real_redis.delete(keys.voice_queue(conv), keys.voice_control(conv))
    async with (
        AnthropicServer() as model,
        YouTubeServer() as youtube,
        SpeechServer() as speech,
    ):
        stream = await YouTubeStreamServer(youtube).start()
        env = base_env(tmp_path) | {
            "CHORUS_REDIS_URL": real_redis_url,
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
            "CHORUS_ADMIN_PORT": str(port),
            "CHORUS_ADMIN_TOKEN": "admin-token-0123456789abcdef",
            "CHORUS_VOICE": "true",
            "CHORUS_TTS": "openai:alloy",
            "OPENAI_API_KEY": "k",
            "OPENAI_BASE_URL": f"{speech.url}/v1",
        }
        proc = await spawn_chorus(["run"], env, tmp_path)
        try:
            await stream.wait_for(
                lambda: bool(stream.calls) and stream.calls[0].responses >= 1, LIMIT
            )

            await until(lambda: dashboard_up(base), limit=LIMIT)
            key = await OverlayKeys(real_redis).get(conv)
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(
                    executable_path=chromium,
                    args=[
                        "--no-sandbox",
                        "--disable-gpu",
                        "--autoplay-policy=no-user-gesture-required",
                    ],
                )
                page = await browser.new_page()
                await page.goto(f"{base}/overlay/{conv}?key={key}")
                await until(lambda: real_redis.exists(keys.voice_watching(conv)), limit=LIMIT)
                items = [
                    item
                    for item in _youtube_items()
                    if item["snippet"]["type"] in ("superChatEvent", "superStickerEvent")
                ]
                # The live call answering now (a call's first answer is the history it found).
                await stream.wait_for(
                    lambda: bool(stream.calls) and stream.calls[-1].responses >= 1, LIMIT
                )
                stream.push(*items)
                try:
                    played = await until(lambda: _played(page, 2), limit=LIMIT)
                except AssertionError:
                    print("overlay:", await state(page), "asked:", speech.texts)
                    print("calls:", [(c.responses) for c in stream.calls])
                    raise
                await browser.close()
            texts = [p["text"] for p in played]
            assert texts[0] == "A sent a Super Chat of $5.00: love the stream", texts
            assert texts[1].startswith("A sent a Super Sticker of "), texts
            assert all(p["ended"] and p["provider"] == "openai" for p in played)
            assert [text for _, text in speech.texts] == texts
        finally:
            await stream.close()
            proc.send_signal(signal.SIGTERM)
            _, err = await stopped(proc)
            await real_redis.delete(
                keys.voice_queue(conv), keys.voice_control(conv), keys.voice_overlay_key(conv)
            )
        assert proc.returncode == 0, err.decode()[-3000:]


def _youtube_items() -> list[dict[str, Any]]:
    path = (
        ROOT / "tests" / "fixtures" / "youtube" / "youtube_livechatmessages_list_stream_events.json"
    )
    items: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))["items"]
    return items
