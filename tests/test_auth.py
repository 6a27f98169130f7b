"""``chorus auth twitch`` and ``chorus auth youtube`` as an operator meets them: real processes
against loopback Twitch and Google servers speaking their wire formats, the test playing the
operator in the browser (approving the device code; following the consent redirect). Then the
next ``chorus run`` connects with what was stored; refusals, expiry and timeouts end with a
clear message and exit code 1, and no token is ever printed."""

from __future__ import annotations

import asyncio
import re
import signal
import stat
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest

from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.openai_server import OpenAIServer
from tests.loopback.twitch_device import TwitchDeviceServer
from tests.loopback.twitch_server import CLIENT_ID, CLIENT_SECRET
from tests.loopback.youtube_server import BOT_CHANNEL_ID, BOT_TITLE, VIDEO_ID, YouTubeServer
from tests.redis_server import free_port
from tests.test_chat_e2e import base_env, spawn_chorus, stopped
from tests.test_init import Terminal

# It starts processes (tests/suite_rules.py): `make test-fast` leaves it out.
pytestmark = pytest.mark.e2e

BOT_ID, BOT_LOGIN = "2914196", "mybot"
CHANNEL, CHANNEL_LOGIN = "1971641", "streamer"
SCOPES = {"user:read:chat", "user:write:chat", "user:bot"}
MODERATION = {"moderator:manage:chat_messages", "moderator:manage:banned_users"}
KEPT = "# my own notes stay\nCHORUS_HISTORY_MAX=60\n"


async def read_until(proc: asyncio.subprocess.Process, pattern: str) -> re.Match[str]:
    """Read ``proc``'s stdout line by line until ``pattern`` matches what was printed."""
    seen = ""
    assert proc.stdout is not None
    async with asyncio.timeout(60):
        while not (found := re.search(pattern, seen)):
            line = await proc.stdout.readline()
            assert line, f"chorus ended without printing {pattern!r}:\n{seen}"
            seen += line.decode()
    return found


def dotenv(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {name: value for name, value in pairs if not name.startswith("#")}


async def twitch_server(**options: int) -> TwitchDeviceServer:
    server = TwitchDeviceServer(**options)
    await server.start()
    server.add_user(BOT_ID, BOT_LOGIN)
    server.add_user(CHANNEL, CHANNEL_LOGIN)
    return server


def twitch_setup(tmp_path: Path, server: TwitchDeviceServer) -> dict[str, str]:
    (tmp_path / ".env").write_text(
        f"TWITCH_CLIENT_ID={CLIENT_ID}\nTWITCH_CLIENT_SECRET={CLIENT_SECRET}\n"
        f"TWITCH_CHANNELS={CHANNEL_LOGIN}\n{KEPT}"
    )
    return base_env(tmp_path) | {"TWITCH_AUTH_BASE_URL": server.auth_url}


async def test_twitch_device_code_tokens_are_stored_and_used_by_the_next_run(
    tmp_path: Path,
) -> None:
    server = await twitch_server(interval=1)
    try:
        env = twitch_setup(tmp_path, server)
        server.failing_polls = 1  # the first poll meets a 503: it polls on
        server.slow_down_polls = 1  # the second is told to slow down
        proc = await spawn_chorus(["auth", "twitch"], env, tmp_path)
        shown = await read_until(proc, r"open (\S+) in a browser.*code shown is (\w+)")
        assert shown[1].startswith("https://www.twitch.tv/activate")
        await server.wait_until(lambda: len(server.polls) >= 3, 60)  # pending after slow_down
        await server.approve(shown[2], BOT_ID)  # the operator enters the code and authorises
        out, err = await stopped(proc)
        assert proc.returncode == 0, err.decode()
        (device_request,) = [r for r in server.requests if r.path == "/id/oauth2/device"]
        assert set(parse_qs(str(device_request.body))["scopes"][0].split()) == SCOPES | MODERATION
        token_polls = [r for r in server.requests if r.path == "/id/oauth2/token"]
        assert all(parse_qs(str(r.body))["client_secret"] == [CLIENT_SECRET] for r in token_polls)
        polls = server.polls
        gaps = [later - earlier for earlier, later in zip(polls, polls[1:], strict=False)]
        assert len(polls) >= 4 and gaps[1] >= 1 + 5 - 0.5, gaps  # slow_down added 5 s
        assert all(gap >= 1 - 0.5 for gap in gaps), gaps  # never faster than the interval

        ((access, refresh),) = server.issued
        stored = dotenv(tmp_path / ".env")
        assert stored["TWITCH_ACCESS_TOKEN"] == access
        assert stored["TWITCH_REFRESH_TOKEN"] == refresh
        assert stored["CHORUS_HISTORY_MAX"] == "60" and stored["TWITCH_CLIENT_ID"] == CLIENT_ID
        assert "# my own notes stay" in (tmp_path / ".env").read_text()
        assert stat.S_IMODE((tmp_path / ".env").stat().st_mode) == 0o600
        printed = out.decode() + err.decode()
        assert access not in printed and refresh not in printed
        assert f"Signed in as {BOT_LOGIN}" in printed
        link = re.search(r"(http://127\.0\.0\.1:\d+/id/oauth2/authorize\S+)", printed)
        assert link, printed
        query = parse_qs(urlsplit(link[1]).query)
        assert query["client_id"] == [CLIENT_ID] and query["scope"] == ["channel:bot"]
        assert query["response_type"] == ["token"] and query["redirect_uri"]

        async with AnthropicServer() as model:
            run_env = base_env(tmp_path) | {
                "CHORUS_MODEL": "anthropic:claude-test",
                "ANTHROPIC_API_KEY": "k",
                "ANTHROPIC_BASE_URL": model.base_url,
                "TWITCH_API_BASE_URL": server.helix_url,
                "TWITCH_AUTH_BASE_URL": server.auth_url,
                "TWITCH_EVENTSUB_WS_URL": server.ws_url,
            }
            run = await spawn_chorus(["run"], run_env, tmp_path)
            try:
                await server.wait_until(lambda: len(server.subscriptions) >= 4, 90)
            finally:
                run.send_signal(signal.SIGTERM)
                _, run_err = await stopped(run)
        tokens = {sub.token for sub in server.subscriptions.values()}
        assert tokens == {access}, run_err.decode()[-3000:]
    finally:
        await server.close()


async def test_twitch_denied_expired_or_short_of_scopes_stores_nothing(tmp_path: Path) -> None:
    server = await twitch_server(interval=1, expires_in=3)
    try:
        env = twitch_setup(tmp_path, server)
        before = (tmp_path / ".env").read_text()

        proc = await spawn_chorus(["auth", "twitch"], env, tmp_path)
        shown = await read_until(proc, r"code shown is (\w+)")
        await server.deny(shown[1])
        _, err = await stopped(proc)
        assert proc.returncode == 1 and "the authorisation was denied at Twitch" in err.decode()

        proc = await spawn_chorus(["auth", "twitch"], env, tmp_path)  # nobody enters the code
        _, err = await stopped(proc)
        assert proc.returncode == 1 and "nobody entered the code within 3 s" in err.decode()

        server.expires_in = 1800
        server.grant_scopes = ("user:read:chat",)
        proc = await spawn_chorus(["auth", "twitch"], env, tmp_path)
        shown = await read_until(proc, r"code shown is (\w+)")
        await server.approve(shown[1], BOT_ID)
        _, err = await stopped(proc)
        assert proc.returncode == 1, err.decode()
        assert "the token lacks the scopes user:write:chat, user:bot" in err.decode()
        assert (tmp_path / ".env").read_text() == before

        server.failing_polls = 3
        proc = await spawn_chorus(["auth", "twitch"], env, tmp_path)
        _, err = await stopped(proc)
        assert proc.returncode == 1, err.decode()
        assert "token endpoint failed 3 polls in a row (503)" in err.decode()
        assert (tmp_path / ".env").read_text() == before

        del env["TWITCH_AUTH_BASE_URL"]
        (tmp_path / ".env").write_text(KEPT)
        proc = await spawn_chorus(["auth", "twitch"], env, tmp_path)
        _, err = await stopped(proc)
        assert proc.returncode == 2 and "TWITCH_CLIENT_ID is not set" in err.decode()
    finally:
        await server.close()


def youtube_setup(tmp_path: Path, youtube: YouTubeServer) -> dict[str, str]:
    (tmp_path / ".env").write_text(
        f"YOUTUBE_CLIENT_ID={youtube.client_id}\nYOUTUBE_CLIENT_SECRET={youtube.client_secret}\n"
        f"{KEPT}"
    )
    return base_env(tmp_path) | {
        "GOOGLE_OAUTH_AUTH_URL": youtube.auth_url,
        "GOOGLE_OAUTH_TOKEN_URL": youtube.token_url,
        "YOUTUBE_API_BASE_URL": youtube.api_base,
    }


async def play_the_browser(url: str) -> tuple[int, str]:
    """Open the consent link; Google's redirect lands on chorus's loopback listener."""
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        return response.status, await response.text()


async def test_youtube_refresh_token_is_stored_and_used_by_the_next_run(tmp_path: Path) -> None:
    async with YouTubeServer() as youtube:
        env = youtube_setup(tmp_path, youtube)
        proc = await spawn_chorus(["auth", "youtube", "--timeout", "60"], env, tmp_path)
        link = await read_until(proc, r"\n  (http\S+)\n")
        query = parse_qs(urlsplit(link[1]).query)
        assert query["code_challenge_method"] == ["S256"] and query["access_type"] == ["offline"]
        redirect = query["redirect_uri"][0]
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", redirect), redirect
        wrong = redirect + "?code=forged&state=not-ours"  # another page cannot inject a code
        assert (await play_the_browser(wrong))[0] == 400
        status, page = await play_the_browser(link[1])
        assert status == 200 and "You can close this tab" in page
        out, err = await stopped(proc)
        assert proc.returncode == 0, err.decode()
        issued = youtube.refresh_token
        assert issued.startswith("1//issued-refresh-")
        stored = dotenv(tmp_path / ".env")
        assert stored["YOUTUBE_REFRESH_TOKEN"] == issued and stored["CHORUS_HISTORY_MAX"] == "60"
        assert stat.S_IMODE((tmp_path / ".env").stat().st_mode) == 0o600
        assert f"Authorised the channel {BOT_TITLE} ({BOT_CHANNEL_ID})" in out.decode()
        assert issued not in out.decode() + err.decode()

        async with AnthropicServer() as model:
            run_env = env | {
                "CHORUS_MODEL": "anthropic:claude-test",
                "ANTHROPIC_API_KEY": "k",
                "ANTHROPIC_BASE_URL": model.base_url,
                "YOUTUBE_VIDEO_ID": VIDEO_ID,
                "YOUTUBE_READ_MODE": "poll",
            }
            run = await spawn_chorus(["run"], run_env, tmp_path)
            try:  # the chat is read with an access token refreshed from the stored token
                await youtube.wait_for(
                    lambda: any(r.path.endswith("/liveChat/messages") for r in youtube.requests),
                    limit=90,
                )
            finally:
                run.send_signal(signal.SIGTERM)
                _, run_err = await stopped(run)
        refreshes = [r for r in youtube.requests if r.path == "/token"]
        forms = [parse_qs(str(r.body)) for r in refreshes]
        used = [f["refresh_token"][0] for f in forms if f.get("grant_type") == ["refresh_token"]]
        assert used and set(used) == {issued}, run_err.decode()[-3000:]


async def test_youtube_refused_consent_or_no_browser_ends_clearly(tmp_path: Path) -> None:
    async with YouTubeServer() as youtube:
        env = youtube_setup(tmp_path, youtube)
        before = (tmp_path / ".env").read_text()
        youtube.consent = "deny"
        port = free_port()  # a fixed port (for ssh -L from another machine's browser)
        proc = await spawn_chorus(["auth", "youtube", "--port", str(port)], env, tmp_path)
        link = await read_until(proc, r"\n  (http\S+)\n")
        redirect = parse_qs(urlsplit(link[1]).query)["redirect_uri"]
        assert redirect == [f"http://127.0.0.1:{port}/"]
        await play_the_browser(link[1])
        _, err = await stopped(proc)
        assert proc.returncode == 1 and "Google answered access_denied" in err.decode()

        proc = await spawn_chorus(["auth", "youtube", "--timeout", "1"], env, tmp_path)
        _, err = await stopped(proc)
        assert proc.returncode == 1 and "no answer from the browser within 1 s" in err.decode()
        assert (tmp_path / ".env").read_text() == before


def init_then_sign_in(
    env: dict[str, str], cwd: Path, server: TwitchDeviceServer, loop: asyncio.AbstractEventLoop
) -> tuple[int, str]:
    """``chorus init`` at a terminal choosing Twitch, then its offer to sign the bot in."""
    term = Terminal(["init"], env, cwd)
    for prompt, reply in [
        (r"Model vendor .*\[anthropic\]: ", "openai"),
        (r"Model \[gpt-4\.1-mini\]: ", ""),
        (r"openai API key: ", "sk-test"),
        (r"Platforms to connect .*: ", "twitch"),
        (r"Twitch application client id: ", CLIENT_ID),
        (r"Twitch application client secret: ", CLIENT_SECRET),
        (r"Twitch access token of the bot account \(empty: .*\): ", ""),
        (r"Twitch refresh token of the bot account \(empty: .*\): ", ""),
        (r"Twitch channels to join .*: ", CHANNEL_LOGIN),
        (r"The bot's name \[Chorus\]: ", ""),
        (r"Persona: .*: ", ""),
        (r"Plugins to load .*: ", ""),
        (r"Turn on the web dashboard .*\[y/N\]: ", "n"),
        (r"Sign the bot's Twitch account in now, in a browser\? \[y/N\]: ", "y"),
    ]:
        term.expect(prompt)
        term.send(reply)
    code = re.search(r"code shown is (\w+)", term.expect(r"code shown is \w+"))
    assert code
    asyncio.run_coroutine_threadsafe(server.approve(code[1], BOT_ID), loop).result(30)
    term.expect(r"Next:")
    return term.wait(), term.seen


async def test_init_at_a_terminal_offers_the_twitch_sign_in(tmp_path: Path) -> None:
    server = await twitch_server(interval=1)
    try:
        async with OpenAIServer() as model:
            env = base_env(tmp_path) | {
                "OPENAI_BASE_URL": model.base_url,
                "TWITCH_AUTH_BASE_URL": server.auth_url,
                "TERM": "dumb",
            }
            loop = asyncio.get_running_loop()
            code, screen = await asyncio.to_thread(init_then_sign_in, env, tmp_path, server, loop)
        assert code == 0, screen
        ((access, refresh),) = server.issued
        stored = dotenv(tmp_path / ".env")
        assert stored["TWITCH_ACCESS_TOKEN"] == access
        assert stored["TWITCH_REFRESH_TOKEN"] == refresh
        assert stored["TWITCH_CLIENT_ID"] == CLIENT_ID and stored["CHORUS_MODEL"]
        assert access not in screen and refresh not in screen and CLIENT_SECRET not in screen
        assert f"Signed in as {BOT_LOGIN}" in screen
        assert "if its tokens ever stop working" in screen  # the closing lines know
    finally:
        await server.close()
