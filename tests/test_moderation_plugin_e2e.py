"""The ``moderation`` plugin end to end: a real ``chorus run`` with ``[plugins.moderation]`` in its
``chorus.toml``, the real Twitch adapter (twitchio 3) against the loopback Twitch, state and the
audit trail in a real Redis, the dashboard in real Chromium (Playwright).

A viewer posts a link without ``!permit`` three times: the first is deleted through Helix's
``DELETE /moderation/chat`` (seen on the loopback server) and the viewer warned in chat, the
second deleted, the third deleted and the viewer timed out through ``POST /moderation/bans``.
The Moderation page lists the actions, and its Undo lifts the timeout through ``DELETE
/moderation/bans``. A second run, where the bot is no moderator of the channel, logs the
missing permission once and asks Helix once, however many links follow; there the safety
screen denies links too, so the plugin sees them through ``on_screened``.
"""

from __future__ import annotations

import shutil
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from playwright.async_api import async_playwright

from bot.safety.audit import AuditEntry, read_audit
from bot.state import connect
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.twitch_server import TwitchServer
from tests.moderation_rigs import TWITCH_SCOPES
from tests.redis_server import free_port
from tests.test_admin_browser_e2e import TOKEN, dashboard_up
from tests.test_chat_e2e import base_env, spawn_chorus, stopped
from tests.test_live_pause_e2e import line, subscribed
from tests.test_twitch_e2e import BOT_ID, BOT_LOGIN, CHAT
from tests.test_twitch_reconnect_e2e import twitch_env
from tests.waiting import until

pytestmark = pytest.mark.e2e

LIMIT = 90.0  # generous: a loaded 2-core machine; each wait ends as soon as its event happens
DELETE_CHAT = ("DELETE", "/helix/moderation/chat")
BAN = ("POST", "/helix/moderation/bans")
UNBAN = ("DELETE", "/helix/moderation/bans")


@pytest.fixture
def people(real_redis_url: str) -> Iterator[tuple[str, str, str, str]]:
    """A broadcaster (id, login), a viewer id and a key namespace of this test alone."""
    suffix = uuid.uuid4().int % 10**9
    ids = (str(8_100_000_000 + suffix), f"streamer{suffix}", str(7_400_000_000 + suffix))
    namespace = f"mod{uuid.uuid4().hex[:8]}"
    yield (*ids, namespace)
    client = redis.Redis.from_url(real_redis_url)
    try:
        doomed = [k for p in (*ids, namespace) for k in client.scan_iter(match=f"*{p}*")]
        if doomed:
            client.delete(*doomed)
    finally:
        client.close()


def viewer_line(channel: tuple[str, str], msg_id: str, text: str, viewer: str) -> dict[str, object]:
    """A line from a plain viewer (the fixture's chatter is a moderator and a subscriber)."""
    event = line(channel, msg_id, text, viewer)
    event["badges"] = []
    return event


def calls(twitch: TwitchServer) -> list[tuple[str, str]]:
    return [(c.method, c.path) for c in twitch.moderation_calls]


def said(twitch: TwitchServer) -> list[str]:
    return [str(s["message"]) for s in twitch.sent]


def chorus_env(
    tmp_path: Path, twitch: TwitchServer, model: AnthropicServer, redis_url: str, login: str
) -> dict[str, str]:
    (tmp_path / "chorus.toml").write_text("[plugins.moderation]\ntimeout_seconds = 600\n")
    env = base_env(tmp_path) | twitch_env(twitch)
    return env | {
        "TWITCH_CHANNELS": login,
        "CHORUS_REDIS_URL": redis_url,
        "CHORUS_MODEL": "anthropic:claude-test",
        "ANTHROPIC_API_KEY": "k",
        "ANTHROPIC_BASE_URL": model.base_url,
    }


async def test_links_are_deleted_warned_then_timed_out_and_the_dashboard_undoes_it(
    tmp_path: Path, real_redis_url: str, people: tuple[str, str, str, str]
) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "install the distribution's chromium (tests/prereqs.sh does)"
    channel_id, login, viewer, namespace = people
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    async with AnthropicServer() as model, TwitchServer() as twitch:
        twitch.add_user(BOT_ID, BOT_LOGIN)
        twitch.add_user(channel_id, login)
        twitch.grant(BOT_ID, "access-0", "refresh-0", scopes=TWITCH_SCOPES)
        twitch.moderators[channel_id] = {BOT_ID}
        ids = [f"{namespace}-link{n}" for n in (1, 2, 3)]
        twitch.chat_messages[channel_id] = set(ids)
        env = chorus_env(tmp_path, twitch, model, real_redis_url, login)
        env |= {
            "CHORUS_BUS_NAMESPACE": namespace,
            "CHORUS_ADMIN_PORT": str(port),
            "CHORUS_ADMIN_TOKEN": TOKEN,
        }

        async def link(msg_id: str) -> None:
            text = "free followers at cheap-viewers.shop"
            assert await twitch.notify(CHAT, viewer_line((channel_id, login), msg_id, text, viewer))

        proc = await spawn_chorus(["run"], env, tmp_path)
        failure: Exception | None = None
        try:
            await twitch.wait_until(lambda: subscribed(twitch) == 4, LIMIT)
            await until(lambda: dashboard_up(base), limit=LIMIT)
            await link(ids[0])
            await twitch.wait_until(lambda: any("please stop" in s for s in said(twitch)), LIMIT)
            await twitch.wait_until(lambda: ids[0] not in twitch.chat_messages[channel_id], LIMIT)
            warning = next(s for s in said(twitch) if "please stop" in s)
            assert f"fan{viewer}" in warning and "!permit" in warning
            assert calls(twitch) == [DELETE_CHAT]
            await link(ids[1])
            await twitch.wait_until(lambda: ids[1] not in twitch.chat_messages[channel_id], LIMIT)
            assert not twitch.bans
            await link(ids[2])
            await twitch.wait_until(lambda: (channel_id, viewer) in twitch.bans, LIMIT)
            assert twitch.bans[channel_id, viewer] == 600
            assert twitch.chat_messages[channel_id] == set()
            assert calls(twitch) == [DELETE_CHAT, DELETE_CHAT, DELETE_CHAT, BAN]
            assert len([s for s in said(twitch) if "please stop" in s]) == 1  # warned once
            await twitch.wait_until(lambda: any("timed out" in s for s in said(twitch)), LIMIT)

            async with async_playwright() as pw:
                browser = await pw.chromium.launch(
                    executable_path=chromium, args=["--no-sandbox", "--disable-gpu"]
                )
                page = await browser.new_page(viewport={"width": 1280, "height": 900})
                await page.goto(f"{base}/login")
                await page.fill("#token", TOKEN)
                await page.click("button[type=submit]")
                await page.wait_for_selector("h1:has-text('Overview')")

                async def listed() -> bool:
                    await page.goto(f"{base}/moderation")
                    return await page.locator(f"button[data-undo='{viewer}']").count() == 1

                await until(listed, limit=LIMIT)
                rows = page.locator("#actions tr.act")
                assert await rows.count() == 4  # three deletions and the timeout
                assert "rule:links" in await page.content()
                await page.click(f"button[data-undo='{viewer}']")
                await page.wait_for_selector("text=Asked the platform to untimeout")
                await twitch.wait_until(lambda: (channel_id, viewer) not in twitch.bans, LIMIT)
                assert calls(twitch)[-1] == UNBAN

                async def undone() -> bool:
                    await page.goto(f"{base}/moderation")
                    return "lifted" in await page.locator("#actions").inner_text()

                await until(undone, limit=LIMIT)
                assert await page.locator("button[data-undo]").count() == 0
                await browser.close()
        except Exception as exc:
            failure = exc
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGINT)
            _, err = await stopped(proc)
        if failure is not None:
            raise AssertionError(err.decode(errors="replace")[-6000:]) from failure
        assert proc.returncode == 0, err.decode(errors="replace")[-3000:]


async def test_without_moderator_status_the_gap_is_logged_once_and_not_retried(
    tmp_path: Path, real_redis_url: str, people: tuple[str, str, str, str]
) -> None:
    channel_id, login, viewer, namespace = people
    async with AnthropicServer() as model, TwitchServer() as twitch:
        twitch.add_user(BOT_ID, BOT_LOGIN)
        twitch.add_user(channel_id, login)
        twitch.grant(BOT_ID, "access-0", "refresh-0", scopes=TWITCH_SCOPES)
        twitch.moderators[channel_id] = set()  # the broadcaster never typed /mod mybot
        ids = [f"{namespace}-link{n}" for n in range(1, 6)]
        twitch.chat_messages[channel_id] = set(ids)
        env = chorus_env(tmp_path, twitch, model, real_redis_url, login)
        # links denied by the safety screen too: the lines reach the plugin through on_screened
        env |= {
            "CHORUS_BUS_NAMESPACE": namespace,
            "TWITCH_BOT_IS_MOD": "false",
            "CHORUS_MODERATION_LINKS": "deny",
        }
        log_file = tmp_path / "chorus.log"
        env["CHORUS_LOG_FILE"] = str(log_file)
        proc = await spawn_chorus(["run"], env, tmp_path)
        try:
            await twitch.wait_until(lambda: subscribed(twitch) == 4, LIMIT)
            for msg_id in ids:
                text = f"look at https://spam.example.com/{msg_id}"
                assert await twitch.notify(
                    CHAT, viewer_line((channel_id, login), msg_id, text, viewer)
                )
            # five offences: five deletions and three timeouts asked, each answered by the
            # gateway (audited); only the first reached Helix
            store = await connect.open_redis(real_redis_url)
            try:

                async def answered() -> list[AuditEntry]:
                    found = await read_audit(store, namespace=namespace)
                    acts = [e for e in found if e.direction == "act"]
                    return acts if len(acts) >= 8 else []

                acts = await until(answered, limit=LIMIT)
            finally:
                await store.aclose()
            assert {(e.rule, e.action) for e in acts} == {
                ("delete", "missing_permission"),
                ("timeout", "missing_permission"),
            }
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGINT)
            _, err = await stopped(proc)
        text = err.decode(errors="replace")
        if log_file.exists():
            text += log_file.read_text(errors="replace")
        assert proc.returncode == 0, text[-3000:]
        missing = [ln for ln in text.splitlines() if "moderation permission missing" in ln]
        assert len(missing) == 1, missing
        assert "not a moderator" in missing[0] and "/mod" in missing[0]
        # Helix was asked once: the refusal is remembered, later actions answered at once
        assert calls(twitch) == [DELETE_CHAT]
        assert twitch.chat_messages[channel_id] == set(ids)  # nothing deleted
