"""The Commands page in a real headless Chromium (Playwright, the distribution's browser): an
operator logs in by name, opens a Twitch channel, adds ``!socials`` with an alias, edits its
text, then deletes it; after each step the table shows it and the ``commands`` plugin, on the
same real Redis, answers (or no longer answers) the viewer's ``!links``."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer
from playwright.async_api import async_playwright
from redis.asyncio import Redis

from bot.admin.server import AdminServer
from bot.admin.views import Sources
from bot.memory.buffers import MemoryStore
from bot.safety.audit import Audit, read_audit
from bot.settings import load_settings
from bot.state.history import HistoryStore
from bot.state.plugin_store import RedisPluginStore
from tests.builtin_rig import Rig, load
from tests.test_admin import TOKEN
from tests.test_admin_accounts import PASSWORD, account
from tests.test_admin_commands import FILE

pytestmark = pytest.mark.e2e


@pytest.fixture
async def served(redis_client: Redis, key_tag: str, tmp_path: Path) -> AsyncIterator[str]:
    path = tmp_path / "chorus.toml"
    path.write_text(FILE, encoding="utf-8")
    settings = load_settings(environ={}, env_file=None, config=path, warn=False)
    sources = Sources(
        settings=settings,
        redis=redis_client,
        memory=MemoryStore(redis_client),
        history=HistoryStore(redis_client, max_messages=20, ttl_seconds=3600),
        audit=Audit(redis_client, namespace=key_tag),
    )
    server: TestServer = TestServer(AdminServer(sources, TOKEN).app(), host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


async def answers(rig: Rig, channel: str) -> list[str]:
    before = len(rig.sent)
    await rig.emit("message", rig.message("!links", channel=channel, server="streamer"))
    return [t for _, t in rig.sent[before:]]


async def test_an_operator_adds_edits_and_deletes_a_command_in_a_browser(
    served: str, redis_client: Redis, key_tag: str
) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "install the distribution's chromium (tests/prereqs.sh does)"
    await account(redis_client, key_tag, "otto", "operator")
    rig = load("commands", FILE, RedisPluginStore(redis_client))
    channel = f"c{key_tag}"
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=chromium, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = await browser.new_page()
            await page.goto(f"{served}/login")
            await page.fill("#name", "otto")
            await page.fill("#token", PASSWORD)
            await page.click("button[type=submit]")
            await page.wait_for_selector("h1:has-text('Overview')")
            await page.click("nav >> text=Commands")
            await page.wait_for_selector("h1:has-text('Commands')")
            await page.fill("#platform", "twitch")
            await page.fill("#channel", channel)
            await page.click("button:has-text('Show')")
            await page.wait_for_selector("text=No command was added in this channel yet.")
            assert await page.is_visible("#file-commands >> text=Join the server")

            await page.fill("#new-name", "socials")
            await page.fill("#new-text", "follow me at {channel}")
            await page.fill("#new-aliases", "links")
            await page.click("#add >> button:has-text('Add')")
            await page.wait_for_selector("p.notice:has-text('Saved !socials')")
            assert await page.is_visible("#command-socials")
            assert await answers(rig, channel) == ["follow me at streamer"]

            await page.fill("[aria-label='text of !socials']", "new links, {user}")
            await page.click("#command-socials >> button:has-text('Save')")
            await page.wait_for_selector("p.notice:has-text('Saved !socials')")
            edited = await page.input_value("[aria-label='text of !socials']")
            assert edited == "new links, {user}"
            assert await answers(rig, channel) == ["new links, fan7"]

            await page.click("#command-socials >> button:has-text('Delete')")
            await page.wait_for_selector("p.notice:has-text('Deleted !socials')")
            assert not await page.is_visible("#command-socials")
            assert await answers(rig, channel) == []
        finally:
            await browser.close()
    entries = await read_audit(redis_client, namespace=key_tag)
    done = [e.action for e in entries if e.rule == "commands:edit"]
    assert done == ["saved", "saved", "deleted"]
