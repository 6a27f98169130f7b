"""The Plugins page in a real Chromium against ``chorus run`` with the example quote book
(examples/plugins/chorus_quotes) pip-installed offline and loaded by its entry point.

The page lists the plugin (its source, its command, per scope) and renders a form from its
``QuoteSettings`` model. A value the model refuses (``max_length = 5``, under its ``ge=10``)
shows the start's message next to the field and writes nothing; a valid one is written to
``[plugins.quotes]`` with the file's comments kept, audited, and reaches the plugin after the
reload: the console's ``/quote add`` is then refused at the new length.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
from pathlib import Path

import pytest
from playwright.async_api import async_playwright
from redis.asyncio import Redis

from bot.safety.audit import read_audit
from bot.state import connect
from tests.loopback.anthropic_server import AnthropicServer
from tests.redis_server import free_port
from tests.test_admin_browser_e2e import TOKEN, dashboard_up, shot
from tests.test_chat_e2e import ROOT, base_env, spawn_chorus
from tests.test_plugin_quotes_e2e import quotes_site as quotes_site  # the offline install
from tests.waiting import until

pytestmark = pytest.mark.e2e

CONFIG = """\
# The quote book (this comment must survive the dashboard)
[plugins]
modules = ["quotes"]

[plugins.quotes]
max_length = 40  # characters per quote
show_author = true

[[scope]]
match = "discord:1234"
tools.disabled = ["fetch_page"]
"""


async def test_the_plugins_page_lists_the_quote_book_and_its_form_saves_to_the_file(
    tmp_path: Path, quotes_site: Path, real_redis_url: str
) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "install the distribution's chromium (apt-get install chromium)"
    toml = tmp_path / "chorus.toml"
    toml.write_text(CONFIG, encoding="utf-8")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    store: Redis = await connect.open_redis(real_redis_url)
    async with AnthropicServer() as model:
        env = base_env(tmp_path) | {
            "CHORUS_REDIS_URL": real_redis_url,
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "CHORUS_INSIGHTS_ENABLED": "false",
            "CHORUS_ADMIN_PORT": str(port),
            "CHORUS_ADMIN_TOKEN": TOKEN,
            "PYTHONPATH": f"{ROOT}:{quotes_site}",
        }
        proc = await spawn_chorus(["run"], env, tmp_path, stdin=asyncio.subprocess.PIPE)
        out: list[str] = []
        err: list[str] = []

        async def follow(stream: asyncio.StreamReader | None, into: list[str]) -> None:
            assert stream is not None
            async for raw in stream:
                into.append(raw.decode(errors="replace"))

        readers = [
            asyncio.create_task(follow(proc.stdout, out)),
            asyncio.create_task(follow(proc.stderr, err)),
        ]

        async def say(text: str) -> str:
            before = len(out)
            assert proc.stdin is not None
            proc.stdin.write(f"{text}\n".encode())
            await proc.stdin.drain()

            async def answered() -> str | None:
                return out[before] if len(out) > before else None

            return str(await until(answered, limit=90))

        try:
            await until(lambda: dashboard_up(base), limit=90)
            long_quote = "/quote add twenty-five characters here"
            assert "Added quote" in await say(long_quote)  # 40 allows it
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(
                    executable_path=chromium, args=["--no-sandbox", "--disable-gpu"]
                )
                page = await browser.new_page(viewport={"width": 1280, "height": 900})
                await page.goto(f"{base}/login")
                await page.fill("#token", TOKEN)
                await page.click("button[type=submit]")
                await page.wait_for_selector("h1:has-text('Overview')")
                await page.click("nav >> text=Plugins")
                await page.wait_for_selector("h1:has-text('Plugins')")
                section = page.locator("#plugin-quotes")
                text = await section.inner_text()
                assert "entry point quotes" in text and "/quote" in text
                assert "discord:1234" in text  # per scope
                field = page.locator('[id="plugin.quotes.max_length"]')
                assert await field.input_value() == "40"
                await page.select_option('[id="plugin.quotes.show_author"]', "true")

                await field.fill("5")
                await page.click("#plugin-quotes-save")
                error = page.locator('[id="plugin.quotes.max_length-error"]')
                await error.wait_for()
                message = await error.inner_text()
                assert f"{toml}:6:" in message and "plugins.quotes.max_length" in message
                assert "greater than or equal to 10" in message
                assert toml.read_text(encoding="utf-8") == CONFIG, "a refusal writes nothing"
                await shot(page, "plugins-invalid", whole=False)

                await field.fill("12")
                await page.click("#plugin-quotes-save")
                await page.wait_for_selector("text=The configuration file was saved")
                written = toml.read_text(encoding="utf-8")
                assert written == CONFIG.replace("max_length = 40", "max_length = 12")
                assert "# characters per quote" in written and "# The quote book" in written
                edits = [e for e in await read_audit(store) if e.rule == "config:edit"]
                assert edits[-1].detail == "plugins.quotes.max_length: '40' -> '12'"
                assert await page.locator('[id="plugin.quotes.max_length"]').input_value() == "12"
                await shot(page, "plugins")
                await browser.close()

            async def reloaded() -> bool:
                return any("configuration reloaded" in line for line in err)

            await until(reloaded, limit=90)
            refused = await say(long_quote)
            assert "at most 12" in refused, refused  # the plugin got the new setting
        finally:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 60)
            await asyncio.gather(*readers)
            await store.aclose()
        assert proc.returncode == 0, "".join(err)[-3000:]
        assert TOKEN not in "".join(err)
