"""The admin dashboard in a real headless browser against a real ``chorus run``.

Chromium from the distribution (``tests/prereqs.sh`` installs it), driven by Playwright for Python
with ``executable_path`` (never ``playwright install``: nothing is downloaded). ``chorus run`` is a
real process with Twitch (twitchio 3 against the loopback Twitch), the Anthropic SDK against its
loopback server and state in a real Redis, the dashboard on ``CHORUS_ADMIN_PORT``. The test logs
in, opens each page (screenshots; with CHORUS_UPDATE_SCREENSHOTS=1 it rewrites the ones the docs show,
``docs/img/admin-<page>.png``),
deletes one pin and checks Redis and the next model request, then pauses the channel and checks
Redis and that the router stays quiet (the turn log says why).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest
import redis
from playwright.async_api import Page, async_playwright
from redis.asyncio import Redis

from bot.events import ConversationKey
from bot.memory.buffers import MemoryStore, Pin, UserBuffer, source_ref
from bot.state import connect, keys, turnlog
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.twitch_server import TwitchServer
from tests.redis_server import free_port
from tests.test_chat_e2e import base_env, spawn_chorus
from tests.test_live_pause_e2e import line, replies_to, subscribed
from tests.test_twitch_e2e import BOT_ID, BOT_LOGIN, CHAT
from tests.test_twitch_reconnect_e2e import twitch_env
from tests.waiting import until

ROOT = Path(__file__).resolve().parent.parent
# The docs' screenshots are rewritten only on purpose (CHORUS_UPDATE_SCREENSHOTS=1 pytest ...), so
# an ordinary run leaves the tree clean; otherwise they go to a scratch directory.
SHOTS = (
    ROOT / "docs" / "img"
    if os.environ.get("CHORUS_UPDATE_SCREENSHOTS") == "1"
    else Path(tempfile.mkdtemp(prefix="chorus-admin-shots-"))
)
LIMIT = 90.0  # generous: a loaded 2-core machine; each wait ends as soon as its event happens
TOKEN = "browser-test-token-0123456789"
KEEP, DROP = "likes speedruns", "plays the cello"
QUESTIONS = {
    "q1": "I speedrun and play the cello, remember that",
    "q2": "do you remember my speedruns and cello?",
    "q3": "and now: speedruns and cello?",
    "q4": "are you still there? speedruns?",
}


@pytest.fixture
def own_db(real_redis_url: str) -> Iterator[str]:
    """A database of this test's own on the real server (db 11: 12 to 15 belong to the bench,
    the instruction gate and the other tests), emptied first, so the screenshots show this
    run's channel, people, counts and audit trail only."""
    url = real_redis_url.rsplit("/", 1)[0] + "/11"
    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    finally:
        client.close()
    yield url


@pytest.fixture
def people(own_db: str) -> Iterator[tuple[str, str, str]]:
    """A broadcaster (id, login) and a viewer id of this test alone; their keys go afterwards."""
    suffix = uuid.uuid4().int % 10**9
    ids = (str(8_000_000_000 + suffix), f"streamer{suffix}", str(7_300_000_000 + suffix))
    yield ids
    client = redis.Redis.from_url(own_db)
    try:
        doomed = [k for p in ids for k in client.scan_iter(match=f"*{p}*")]
        if doomed:
            client.delete(*doomed)
        conv = str(ConversationKey(platform="twitch", channel=ids[0]))
        client.zrem(keys.recent_conversations("twitch"), conv)
        names = client.zrangebylex(keys.user_names(), "-", "+")
        mine = [n for n in names if any(p.encode() in n for p in ids)]
        if mine:
            client.zrem(keys.user_names(), *mine)
    finally:
        client.close()


@pytest.fixture
async def store(own_db: str) -> AsyncIterator[Redis]:
    client = await connect.open_redis(own_db)
    try:
        yield client
    finally:
        await client.aclose()


async def dashboard_up(base: str) -> bool:
    """Whether the dashboard at ``base`` serves its login page (another process: polled)."""
    try:
        async with aiohttp.ClientSession() as http, http.get(f"{base}/login") as response:
            return response.status == 200
    except aiohttp.ClientError:
        return False


def sent_with(model: AnthropicServer, msg_id: str) -> str:
    """The model request that answered ``msg_id`` (its text is in the request's last turn)."""
    suffix = msg_id.rsplit("-", 1)[1]
    found = [json.dumps(b) for b in model.bodies if QUESTIONS[suffix] in json.dumps(b)]
    assert found, f"no model request carried {msg_id}"
    return found[-1]


async def shot(page: Page, name: str, *, whole: bool = True) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    png = await page.screenshot(path=str(SHOTS / f"admin-{name}.png"), full_page=whole)
    assert png.startswith(b"\x89PNG") and len(png) > 5_000, f"the {name} page rendered nothing"


async def test_the_dashboard_in_a_browser_deletes_a_pin_and_pauses_a_channel(
    tmp_path: Path, own_db: str, people: tuple[str, str, str], store: Redis
) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, (
        "install the distribution's chromium (apt-get install chromium; tests/prereqs.sh does)"
    )
    channel_id, login, viewer = people
    now = datetime.now(UTC).replace(microsecond=0)
    tag = uuid.uuid4().hex[:8]  # the test's message ids: the pins came from its first line
    memory = MemoryStore(store)
    await memory.save(
        UserBuffer(
            platform="twitch",
            user_id=viewer,
            pins=tuple(
                Pin(
                    text=t,
                    source=source_ref(f"{tag}-q1"),
                    confidence=c,
                    created_at=now,
                    updated_at=now,
                )
                for t, c in ((KEEP, 0.9), (DROP, 0.7))
            ),
        )
    )
    port, health = free_port(), free_port()
    base = f"http://127.0.0.1:{port}"
    conv = ConversationKey(platform="twitch", channel=channel_id)
    async with AnthropicServer() as model, TwitchServer() as twitch:
        twitch.add_user(BOT_ID, BOT_LOGIN)
        twitch.add_user(channel_id, login)
        twitch.grant(BOT_ID, "access-0", "refresh-0")
        env = base_env(tmp_path) | twitch_env(twitch)
        env |= {
            "TWITCH_CHANNELS": login,
            "CHORUS_REDIS_URL": own_db,
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "CHORUS_HEALTH_HOST": "127.0.0.1",
            "CHORUS_HEALTH_PORT": str(health),
            "CHORUS_ADMIN_PORT": str(port),
            "CHORUS_ADMIN_TOKEN": TOKEN,
            "CHORUS_ENGAGE_USER_COOLDOWN_SECONDS": "0",
            "CHORUS_ENGAGE_MIN_GAP_SECONDS": "0",
            "CHORUS_ENGAGE_CHANNEL_COOLDOWN_SECONDS": "0",
        }

        async def ask(msg: str, text: str) -> str:
            msg_id = f"{tag}-{msg}"
            event = line((channel_id, login), msg_id, text, viewer, mention=True)
            assert await twitch.notify(CHAT, event)
            return msg_id

        proc = await spawn_chorus(["run"], env, tmp_path)
        try:
            await twitch.wait_until(lambda: subscribed(twitch) == 4, LIMIT)
            await until(lambda: dashboard_up(base), limit=LIMIT)
            model.replies.extend(["Noted!", "Hi!", "Sure.", "never sent"])
            first = await ask("q1", QUESTIONS["q1"])
            await twitch.wait_until(lambda: bool(replies_to(twitch, first)), LIMIT)
            asked = await ask("q2", QUESTIONS["q2"])
            await twitch.wait_until(lambda: bool(replies_to(twitch, asked)), LIMIT)
            assert KEEP in sent_with(model, asked) and DROP in sent_with(model, asked)

            async with async_playwright() as pw:
                browser = await pw.chromium.launch(
                    executable_path=chromium, args=["--no-sandbox", "--disable-gpu"]
                )
                page = await browser.new_page(viewport={"width": 1280, "height": 900})
                await page.goto(f"{base}/")
                assert page.url.endswith("/login")
                await shot(page, "login")
                await page.fill("#token", TOKEN)
                await page.click("button[type=submit]")
                await page.wait_for_selector("h1:has-text('Overview')")
                assert "claude-test" in await page.content()  # the model chain is shown
                await shot(page, "overview")

                await page.click("nav >> text=Conversations")
                await page.click(f"text={channel_id}")
                await page.wait_for_selector("td.decision.answered")
                await shot(page, "conversations")

                await page.click("nav >> text=People")
                await page.fill("#q", f"fan{viewer}")
                await page.click("button:has-text('Find')")
                await page.click(f"a:has-text('fan{viewer}')")
                await page.wait_for_selector(f"h1:has-text('fan{viewer}')")  # the name searched
                await page.wait_for_selector(f"input[name=text][value='{DROP}']")
                assert QUESTIONS["q1"] in await page.content()  # the line the pins came from
                await shot(page, "people")
                await page.click(f"button[data-pin='{DROP}']")
                await page.wait_for_selector("text=The pin was deleted.")
                stored = await memory.load("twitch", viewer)
                assert [p.text for p in stored.pins] == [KEEP]

                second = await ask("q3", QUESTIONS["q3"])
                await twitch.wait_until(lambda: bool(replies_to(twitch, second)), LIMIT)
                body = sent_with(model, second)
                assert KEEP in body and DROP not in body  # the next request no longer has it

                await page.click("nav >> text=Live")
                row = page.locator("tr", has_text=channel_id)
                await row.locator("button:has-text('Pause')").click()
                await page.wait_for_selector("text=paused")
                chan = await store.zrange(keys.live("chan", conv), 0, -1, withscores=True)
                assert "paused" in {str(r[0]) for r in chan}
                await shot(page, "live")

                quiet = await ask("q4", QUESTIONS["q4"])

                async def decided() -> list[turnlog.TurnRecord]:
                    log = await turnlog.read_log(store, conv)
                    return [r for r in log if r.message_id == quiet]

                [record] = await until(decided, limit=LIMIT)
                assert (record.decision, record.reason) == ("quiet", "paused")
                assert replies_to(twitch, quiet) == [] and len(model.requests) == 3

                await page.click("nav >> text=Insights")
                await page.wait_for_selector("text=live:pause")  # the audit trail shows it
                await shot(page, "insights")
                await page.click("nav >> text=Settings")
                settings_page = await page.content()
                assert TOKEN not in settings_page and "set, hidden" in settings_page
                await shot(page, "settings", whole=False)  # the first screenful
                await browser.close()
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()[-3000:]
        assert TOKEN not in err.decode()
