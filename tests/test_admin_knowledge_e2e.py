"""The Knowledge page in a real Chromium against ``chorus run`` (the console as a user whose
scope reads the folder ``kb``), over a real Redis and the loopback Anthropic server.

A Markdown file uploaded in the browser is written into the folder and indexed at once (the
page shows its chunks); the search box shows it retrieved for a question, with its score and
source; and the next question on the console reaches the model with the excerpt and its
source in the prompt. A file of a type the knowledge base does not read is refused and not
written. The answer is then on the Charts page, in both spans (the timeline's hour rollups).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import uuid
from pathlib import Path

import pytest
from playwright.async_api import async_playwright
from redis.asyncio import Redis

from bot.safety.audit import read_audit
from bot.state import connect
from tests.loopback.anthropic_server import AnthropicServer
from tests.redis_server import free_port
from tests.test_admin_browser_e2e import TOKEN, dashboard_up, shot
from tests.test_chat_e2e import base_env, spawn_chorus
from tests.waiting import until

pytestmark = pytest.mark.e2e

GUIDE = """\
# Ferry times

The night ferry to Quillhaven leaves at 23:40 from pier 9, every day but Sunday.
"""


async def test_a_file_uploaded_in_the_browser_is_searched_and_reaches_the_model_with_its_source(
    tmp_path: Path, real_redis_url: str
) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "install the distribution's chromium (apt-get install chromium)"
    tag = uuid.uuid4().hex[:8]
    user = f"kim{tag}"
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "intro.md").write_text("# Welcome\n\nThis is the community's handbook.\n")
    (tmp_path / "chorus.toml").write_text(
        f'[[scope]]\nmatch = "console:{user}"\nknowledge = ["kb"]\n', encoding="utf-8"
    )
    upload = tmp_path / "upload"
    upload.mkdir()
    (upload / "guide.md").write_text(GUIDE, encoding="utf-8")
    (upload / "tool.exe").write_bytes(b"MZ\x90\x00 not a document")
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
            "LOGNAME": user,
            "USER": user,
        }
        proc = await spawn_chorus(["run"], env, tmp_path, stdin=asyncio.subprocess.PIPE)
        err: list[str] = []

        async def follow() -> None:
            assert proc.stderr is not None
            async for raw in proc.stderr:
                err.append(raw.decode(errors="replace"))

        following = asyncio.create_task(follow())

        try:
            await until(lambda: dashboard_up(base), limit=90)
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(
                    executable_path=chromium, args=["--no-sandbox", "--disable-gpu"]
                )
                page = await browser.new_page(viewport={"width": 1280, "height": 900})
                await page.goto(f"{base}/login")
                await page.fill("#token", TOKEN)
                await page.click("button[type=submit]")
                await page.wait_for_selector("h1:has-text('Overview')")
                await page.click("nav >> text=Knowledge")
                await page.wait_for_selector("h1:has-text('Knowledge')")
                section = page.locator("section.kb").first
                kb_id = await section.get_attribute("id")
                assert kb_id is not None and f"console:{user}" in await section.inner_text()

                await page.set_input_files(f"#{kb_id}-file", str(upload / "tool.exe"))
                await page.click(f"#{kb_id}-add")
                await page.wait_for_selector("text=tool.exe not added")
                assert not (kb / "tool.exe").exists()

                await page.set_input_files(f"#{kb_id}-file", str(upload / "guide.md"))
                await page.click(f"#{kb_id}-add")
                await page.wait_for_selector("text=guide.md added to kb")
                assert (kb / "guide.md").read_text(encoding="utf-8") == GUIDE
                chunks = await page.locator(f"#{kb_id}-chunks").inner_text()
                assert chunks.startswith("2 chunks from 2 documents"), chunks
                uploads = [e for e in await read_audit(store) if e.rule == "knowledge:upload"]
                assert uploads and uploads[-1].conversation == "kb/guide.md"

                await page.fill("#q", "when does the night ferry to Quillhaven leave?")
                await page.click("#search-go")
                hits = page.locator("#hits")
                await hits.wait_for()
                found = await hits.inner_text()
                assert "kb/guide.md # Ferry times" in found and "pier 9" in found
                first = found.splitlines()[1]  # the best hit, right under the header
                assert "kb/guide.md" in first and float(first.split()[0]) > 0
                await shot(page, "knowledge")
                await browser.close()

            question = f"when does the night ferry to Quillhaven leave? ({tag})"
            assert proc.stdin is not None
            proc.stdin.write(f"{question}\n".encode())
            await proc.stdin.drain()

            async def asked() -> str | None:
                found = [json.dumps(b) for b in model.bodies if tag in json.dumps(b)]
                return found[-1] if found else None

            body = await until(asked, limit=90)
            assert "kb/guide.md # Ferry times" in body and "pier 9" in body

            # The answer is counted in the timeline's rollups: the Charts page shows it.
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(
                    executable_path=chromium, args=["--no-sandbox", "--disable-gpu"]
                )
                page = await browser.new_page(viewport={"width": 1280, "height": 900})
                await page.goto(f"{base}/login")
                await page.fill("#token", TOKEN)
                await page.click("button[type=submit]")
                await page.wait_for_selector("h1:has-text('Overview')")

                async def charted(span: str) -> bool:
                    await page.goto(f"{base}/charts?span={span}")
                    return int(await page.locator("#total-answers").inner_text()) >= 1

                await until(lambda: charted("24h"), limit=90)
                assert await page.locator("svg.chart").count() == 8
                assert "latency p95" in await page.locator("#chart-p95").inner_html()
                await shot(page, "charts")
                await until(lambda: charted("7d"), limit=90)
                assert "Last 7 days" in await page.locator("#span-shown").inner_text()
                await browser.close()
        finally:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 60)
            await following
            await store.aclose()
        assert proc.returncode == 0, "".join(err)[-3000:]
