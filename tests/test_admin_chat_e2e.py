"""The test chat against ``chorus run`` (its router's scopes, tools and safety) over a real Redis
and the loopback Anthropic server, which writes its answers slowly (a word every 0.15 s).

A script's POST (Bearer token) gets the answer streamed: several pieces of it arrive before the
turn log closes the page. In a real Chromium an operator placed in ``discord:GUILD/CHANNEL``
gets that scope's persona (its text is in the model's request, and another place's is not),
sees the answer and its turn log (prompt size, cache share, tools, latency, cost); a viewer
gets no form.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import time
import uuid
from pathlib import Path

import aiohttp
import pytest
from playwright.async_api import async_playwright

from bot.state import connect
from bot.state.admin_accounts import AccountRecords
from tests.loopback.anthropic_server import AnthropicServer
from tests.redis_server import free_port
from tests.test_admin_browser_e2e import TOKEN, dashboard_up, shot
from tests.test_chat_e2e import base_env, run_chorus, spawn_chorus
from tests.waiting import until

pytestmark = pytest.mark.e2e

PIRATE = "You are Captain Byte, of the good ship Chorus."
QUILL = "You are Ms. Quill, librarian."
GUILD, CHANNEL = "111111111111111111", "222222222222222222"
ANSWER = "Arr, the night ferry sails at dawn, matey, from pier nine."
CONFIG = f"""\
[personas.pirate]
prompt = "{PIRATE}"

[personas.librarian]
prompt = "{QUILL}"

[persona]
prompt = "{QUILL}"

[[scope]]
match = "discord:{GUILD}/{CHANNEL}"
persona = "pirate"
"""


def system_of(body: object) -> str:
    return json.dumps(body.get("system") if isinstance(body, dict) else None)


async def test_the_test_chat_streams_the_scopes_persona_with_its_turn_log(
    tmp_path: Path, real_redis_url: str
) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "install the distribution's chromium (apt-get install chromium)"
    tag = uuid.uuid4().hex[:8]
    (tmp_path / "chorus.toml").write_text(CONFIG, encoding="utf-8")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    place = f"discord:{GUILD}/{CHANNEL}"
    async with AnthropicServer() as model:
        env = base_env(tmp_path) | {
            "CHORUS_REDIS_URL": real_redis_url,
            "CHORUS_MODEL": "anthropic:claude-sonnet-4-5",  # priced: the turn log shows a cost
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "CHORUS_INSIGHTS_ENABLED": "false",
        }
        viewer, password = f"vi{tag}", f"pw-{tag}-long enough"
        made = await run_chorus(
            ["admin", "add-user", viewer, "--role", "viewer"],
            env,
            tmp_path,
            f"{password}\n".encode(),
        )
        assert made[0] == 0, made[2]
        served = env | {"CHORUS_ADMIN_PORT": str(port), "CHORUS_ADMIN_TOKEN": TOKEN}
        proc = await spawn_chorus(["run"], served, tmp_path, stdin=asyncio.subprocess.PIPE)
        err: list[str] = []

        async def follow() -> None:
            assert proc.stderr is not None
            async for raw in proc.stderr:
                err.append(raw.decode(errors="replace"))

        following = asyncio.create_task(follow())

        try:
            await until(lambda: dashboard_up(base), limit=90)
            # A script's POST: the answer arrives in pieces, then the turn log ends the page.
            model.replies.append({"text": ANSWER, "chunk_delay": 0.15})
            pieces: list[tuple[float, bytes]] = []
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with (
                aiohttp.ClientSession(headers=headers) as http,
                http.post(f"{base}/chat", data={"place": place, "text": f"ferry? {tag}"}) as sent,
            ):
                assert sent.status == 200
                async for piece in sent.content.iter_any():
                    pieces.append((time.monotonic(), piece))
            page = b"".join(p for _, p in pieces).decode()
            assert "turn-log" in page and "Arr," in page
            before_end = [p for _, p in pieces if b"<span>" in p and b"turn-log" not in p]
            assert len(before_end) > 1, "the answer came in one piece: not streamed"
            assert pieces[-1][0] - pieces[0][0] > 0.5  # it took as long as the model wrote
            asked = [b for b in model.bodies if f"ferry? {tag}" in json.dumps(b)]
            assert asked and PIRATE in system_of(asked[-1]) and QUILL not in system_of(asked[-1])

            async with async_playwright() as pw:
                browser = await pw.chromium.launch(
                    executable_path=chromium, args=["--no-sandbox", "--disable-gpu"]
                )
                page_ = await browser.new_page(viewport={"width": 1280, "height": 900})
                await page_.goto(f"{base}/login")
                await page_.fill("#token", TOKEN)
                await page_.click("button[type=submit]")
                await page_.wait_for_selector("h1:has-text('Overview')")
                await page_.click("nav >> text=Chat")
                await page_.wait_for_selector("h1:has-text('Test chat')")
                model.replies.append({"text": ANSWER, "chunk_delay": 0.05})
                await page_.fill("#place", place)
                await page_.fill("#text", f"when does the ferry leave? {tag}")
                await page_.click("#send")
                await page_.wait_for_selector("#turn-log")
                assert (await page_.locator("#answer").inner_text()).strip() == ANSWER
                assert await page_.locator("#turn-outcome").inner_text() == "answered"
                assert "tokens" in await page_.locator("#turn-prompt").inner_text()
                assert "% read from the cache" in await page_.locator("#turn-prompt").inner_text()
                assert (await page_.locator("#turn-latency").inner_text()).endswith(" ms")
                assert "$" in await page_.locator("#turn-cost").inner_text()
                assert await page_.locator("#turn-tools").inner_text() == "none"
                assert (
                    await page_.locator("#turn-scope").inner_text() == place
                )  # the matching scope
                await shot(page_, "chat")
                second = [b for b in model.bodies if f"ferry leave? {tag}" in json.dumps(b)]
                assert second and PIRATE in system_of(second[-1])
                assert f"ferry? {tag}" in json.dumps(second[-1]["messages"])  # the first turn

                # Another place gets its own persona (the deployment's), from the same form.
                await page_.fill("#place", "discord:999/888")
                await page_.fill("#text", f"and here? {tag}")
                await page_.click("#send")
                await page_.wait_for_selector("#turn-log")
                other = [b for b in model.bodies if f"and here? {tag}" in json.dumps(b)]
                assert QUILL in system_of(other[-1]) and PIRATE not in system_of(other[-1])

                # A viewer reads the page but gets no form.
                viewer_page = await browser.new_page()
                await viewer_page.goto(f"{base}/login")
                await viewer_page.fill("#name", viewer)
                await viewer_page.fill("#token", password)
                await viewer_page.click("button[type=submit]")
                await viewer_page.wait_for_selector("h1:has-text('Overview')")
                await viewer_page.goto(f"{base}/chat")
                assert await viewer_page.locator("#chat").count() == 0
                await browser.close()
        finally:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 60)
            await following
            store = await connect.open_redis(real_redis_url)
            await AccountRecords(store).remove(viewer)
            await store.aclose()
        assert proc.returncode == 0, "".join(err)[-3000:]
        assert TOKEN not in "".join(err)


async def test_the_test_chat_counts_against_the_daily_cost_cap(
    tmp_path: Path, real_redis_url: str
) -> None:
    """Its calls spend the deployment's daily cost cap: once one answer has spent it, the
    chat calls no model and says why."""
    tag = uuid.uuid4().hex[:8]
    (tmp_path / "chorus.toml").write_text(CONFIG, encoding="utf-8")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    async with AnthropicServer() as model:
        env = base_env(tmp_path) | {
            "CHORUS_REDIS_URL": real_redis_url,
            "CHORUS_BUS_NAMESPACE": f"cap{tag}",  # a ledger of its own
            "CHORUS_MODEL": "anthropic:claude-sonnet-4-5",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "CHORUS_INSIGHTS_ENABLED": "false",
            "CHORUS_QUOTA_COST_USD_DAY": "0.000001",
            "CHORUS_ADMIN_PORT": str(port),
            "CHORUS_ADMIN_TOKEN": TOKEN,
        }
        proc = await spawn_chorus(["run"], env, tmp_path, stdin=asyncio.subprocess.PIPE)

        try:
            await until(lambda: dashboard_up(base), limit=90)
            headers = {"Authorization": f"Bearer {TOKEN}"}
            place = f"discord:{GUILD}/{CHANNEL}"
            async with aiohttp.ClientSession(headers=headers) as http:
                first = {"place": place, "text": f"first {tag}"}
                async with http.post(f"{base}/chat", data=first) as sent:
                    assert 'id="turn-outcome">answered<' in await sent.text()  # spends the cap
                form = {"place": place, "text": f"capped? {tag}"}
                async with http.post(f"{base}/chat", data=form) as sent:
                    page = await sent.text()
            assert "daily cost cap is reached" in page
            assert 'id="turn-outcome">error: CostCapReached<' in page
            assert not [b for b in model.bodies if f"capped? {tag}" in json.dumps(b)]
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()[-3000:]
