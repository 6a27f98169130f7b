"""Channel-point redemptions read aloud, end to end: the broadcaster signs in with ``chorus auth
twitch --broadcaster`` (a real process, Twitch's device code flow against the loopback, the test
playing the broadcaster at twitch.tv/activate), then ``chorus run`` (twitchio against the loopback
EventSub websocket, which accepts the redemption subscription only from the broadcaster's own
token with ``channel:read:redemptions``, on a session of that user), the speech provider's SDK
against the loopback speech server, state in a real Redis, and the overlay in a real Chromium
started the way OBS's browser source runs (the rig of ``tests/test_voice_overlay_e2e.py``).

Checked: a sign-in short of the scope stores nothing and names the command to run again; the
stored pair is the one Twitch issued, never printed. A redemption of the configured reward plays
"<viewer> redeemed <reward>: <text>" on the overlay, and what it shows is what the provider was
asked to say; a redemption of another reward is not spoken; one whose text holds a blocked word
never reaches the speech provider (the loopback provider's received requests).
"""

from __future__ import annotations

import json
import shutil
import signal
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
from playwright.async_api import async_playwright
from redis.asyncio import Redis

from bot.events import ConversationKey
from bot.state import keys, keys_twitch
from bot.state.voice import OverlayKeys
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.speech_server import SpeechServer
from tests.loopback.twitch_device import TwitchDeviceServer
from tests.loopback.twitch_server import CLIENT_ID, REDEMPTION
from tests.redis_server import free_port
from tests.test_admin_browser_e2e import dashboard_up
from tests.test_auth import read_until
from tests.test_chat_e2e import base_env, spawn_chorus, stopped
from tests.test_live_pause_e2e import channel, subscribed
from tests.test_twitch_e2e import BOT_ID, BOT_LOGIN
from tests.test_twitch_reconnect_e2e import twitch_env
from tests.test_twitch_redemptions import redemption_event
from tests.test_voice_overlay_e2e import LIMIT, _played, state
from tests.waiting import until

pytestmark = pytest.mark.e2e

__all__ = ["channel"]  # the fixture: a Twitch channel of this test alone, cleaned up after

BLOCKED = "zorblax"
SCOPE = "channel:read:redemptions"


def redeemed(
    channel_: tuple[str, str], n: str, viewer: str, reward: str, text: str
) -> dict[str, Any]:
    channel_id, login = channel_
    return redemption_event(
        id=n,
        broadcaster_user_id=channel_id,
        broadcaster_user_login=login,
        broadcaster_user_name=login,
        user_id=viewer,
        user_login=f"fan{viewer}",
        user_name=f"Fan{viewer}",
        user_input=text,
        reward={"id": f"reward-{reward.lower().replace(' ', '-')}", "title": reward, "cost": 300},
    )


async def sign_in(
    twitch: TwitchDeviceServer, env: dict[str, str], cwd: Path, broadcaster: str
) -> tuple[int | None, str, str]:
    """``chorus auth twitch --broadcaster``, the broadcaster authorising the code shown."""
    proc = await spawn_chorus(["auth", "twitch", "--broadcaster"], env, cwd)
    shown = await read_until(proc, r"code shown is (\w+)")
    await twitch.approve(shown[1], broadcaster)
    out, err = await stopped(proc)
    return proc.returncode, shown.string + out.decode(), err.decode()


async def test_a_broadcaster_signs_in_and_the_chosen_rewards_redemptions_are_spoken(
    tmp_path: Path, real_redis_url: str, real_redis: Redis, channel: tuple[str, str]
) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "install the distribution's chromium (tests/prereqs.sh does)"
    channel_id, login = channel
    conv = ConversationKey(platform="twitch", channel=channel_id)
    stored_at = keys_twitch.broadcaster_tokens(CLIENT_ID, channel_id)
    tag = str(uuid.uuid4().int % 10**6)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    async with (
        AnthropicServer() as model,
        TwitchDeviceServer(interval=1) as twitch,
        SpeechServer() as speech,
    ):
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
            "CHORUS_MODERATION_WORDS": BLOCKED,
            "CHORUS_VOICE": "true",
            "CHORUS_TTS": "openai:alloy",
            "CHORUS_TTS_ANSWERS": "false",  # only the redemptions speak
            "CHORUS_TTS_REWARDS": "hydrate",  # a title, in any case
            "OPENAI_API_KEY": "k",
            "OPENAI_BASE_URL": f"{speech.url}/v1",
        }

        # 1. The broadcaster declines the scope: nothing is stored, the command is named.
        twitch.grant_scopes = ("user:read:chat",)
        code, _, err = await sign_in(twitch, env, tmp_path, channel_id)
        assert code == 1, err
        assert f"the token lacks the scope {SCOPE}" in err
        assert "Run `chorus auth twitch --broadcaster` again" in err
        assert not await real_redis.exists(stored_at)

        # 2. Authorised: the pair Twitch issued is stored beside the bot's, never printed.
        twitch.grant_scopes = None
        code, out, err = await sign_in(twitch, env, tmp_path, channel_id)
        assert code == 0, err
        asked = [r for r in twitch.requests if r.path == "/id/oauth2/device"]
        assert parse_qs(str(asked[-1].body))["scopes"] == [SCOPE]
        access, refresh = twitch.issued[-1]
        raw = await real_redis.get(stored_at)
        assert raw is not None
        stored = json.loads(raw)
        assert (stored["access_token"], stored["refresh_token"]) == (access, refresh)
        assert stored["user_id"] == channel_id
        assert f"Signed in as the broadcaster {login}" in out
        assert access not in out + err and refresh not in out + err

        proc = await spawn_chorus(["run"], env, tmp_path)
        try:
            # Chat on the bot's socket, redemptions on the broadcaster's own.
            await twitch.wait_until(lambda: subscribed(twitch) >= 5, LIMIT)
            (sub,) = [s for s in twitch.subscriptions.values() if s.type == REDEMPTION]
            assert sub.user_id == channel_id and sub.condition["broadcaster_user_id"] == channel_id
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
                page = await browser.new_page(viewport={"width": 1280, "height": 300})
                await page.goto(f"{base}/overlay/{conv}?key={key}")
                await until(lambda: real_redis.exists(keys.voice_watching(conv)), limit=LIMIT)

                # 3. The configured reward: read aloud with the viewer's name and text.
                event = redeemed(channel, f"{tag}-r1", f"{tag}1", "Hydrate", "drink some water")
                sent_ms = time.time() * 1000
                assert await twitch.notify(REDEMPTION, event) == 1
                played = await until(lambda: _played(page, 1), limit=LIMIT)
                started_ms = (await state(page))["started"][0]["at"]
                print(f"redemption sent -> overlay audio started: {started_ms - sent_ms:.0f} ms")
                first = f"Fan{tag}1 redeemed Hydrate: drink some water"
                assert played[0]["text"] == first and played[0]["ended"] is True
                assert played[0]["provider"] == "openai"
                assert (await state(page))["shown"][0] == first  # shown = spoken
                assert [text for _, text in speech.texts] == [first]

                # 4. Another reward is not spoken; a blocked word never reaches the provider.
                other = redeemed(channel, f"{tag}-r2", f"{tag}2", "Sound alert", "boo")
                assert await twitch.notify(REDEMPTION, other) == 1
                bad = redeemed(channel, f"{tag}-r3", f"{tag}3", "Hydrate", f"say {BLOCKED} now")
                assert await twitch.notify(REDEMPTION, bad) == 1
                after = redeemed(channel, f"{tag}-r4", f"{tag}4", "Hydrate", "after the others")
                assert await twitch.notify(REDEMPTION, after) == 1
                played = await until(lambda: _played(page, 2), limit=LIMIT)
                last = f"Fan{tag}4 redeemed Hydrate: after the others"
                assert played[1]["text"] == last, played
                await browser.close()
            asked_for = [text for _, text in speech.texts]
            assert asked_for == [first, last], asked_for
            assert not any(BLOCKED in text or "Sound alert" in text for text in asked_for)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, run_err = await stopped(proc)
        assert proc.returncode == 0, run_err.decode()[-3000:]
        assert access not in run_err.decode()
