"""The configuration editor in a real Chromium against two real Chorus processes over one Redis.

Process A is ``chorus run`` (the console as ``bob``, the dashboard on ``CHORUS_ADMIN_PORT``);
process B is ``chorus chat --user alice``, with no dashboard. Both ask the loopback Anthropic
server. ``chorus admin add-user`` makes an ``admin`` account; the test logs in with it, changes alice's scope's persona in the form, reviews the diff and
saves: the file keeps its comments, B (reached only through Redis: the dashboard's reload
count) answers alice with the new persona, byte-identical across two requests, and bob's
prefix in A is unchanged. Then an invalid regex typed into a scope's safety patterns shows the
start's message next to its field, and neither the file nor the reload count changes.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import uuid
from pathlib import Path
from typing import Any

from playwright.async_api import async_playwright
from redis.asyncio import Redis

from bot.safety.audit import read_audit
from bot.state import connect
from bot.state.admin_accounts import AccountRecords
from bot.state.config_reloads import ConfigReloads
from tests.loopback.anthropic_server import AnthropicServer
from tests.redis_server import free_port
from tests.test_admin_browser_e2e import TOKEN, dashboard_up, shot
from tests.test_chat_e2e import base_env, run_chorus, spawn_chorus
from tests.waiting import until

PIRATE, QUILL = "You are Captain Byte, of the good ship Chorus.", "You are Ms. Quill, librarian."


def config(alice: str, bob: str) -> str:
    return f"""\
# Our community's bot (this comment must survive the dashboard)
[personas.pirate]
name = "Captain Byte"  # arr
prompt = "{PIRATE}"

[personas.librarian]
prompt = "{QUILL}"

# alice's corner
[[scope]]
match = "console:{alice}"
persona = "pirate"

[[scope]]
match = "console:{bob}"
persona = "librarian"
"""


def on_disk(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def prefix(body: Any) -> str:
    """The cached prefix of a request: its system text and tools."""
    return json.dumps([body.get("system"), body.get("tools")], sort_keys=True)


async def test_a_persona_changed_in_the_browser_reaches_another_process_and_keeps_the_comments(
    tmp_path: Path, real_redis_url: str
) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "install the distribution's chromium (apt-get install chromium; .ci/run does)"
    tag = uuid.uuid4().hex[:8]
    alice, bob = f"alice{tag}", f"bob{tag}"
    toml = tmp_path / "chorus.toml"
    toml.write_text(config(alice, bob), encoding="utf-8")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    store: Redis = await connect.open_redis(real_redis_url)
    reloads = ConfigReloads(store)
    async with AnthropicServer() as model:
        env = base_env(tmp_path) | {
            "CHORUS_REDIS_URL": real_redis_url,
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
        }
        dashboard = env | {
            "CHORUS_ADMIN_PORT": str(port),
            "CHORUS_ADMIN_TOKEN": TOKEN,
            "LOGNAME": bob,
            "USER": bob,
        }
        pipe = asyncio.subprocess.PIPE
        proc_a = await spawn_chorus(["run"], dashboard, tmp_path, stdin=pipe)
        proc_b = await spawn_chorus(["chat", "--user", alice], env, tmp_path, stdin=pipe)
        logs_b: list[str] = []

        async def follow_b() -> None:
            assert proc_b.stderr is not None
            async for raw in proc_b.stderr:
                logs_b.append(raw.decode(errors="replace"))

        following = asyncio.create_task(follow_b())

        async def ask(proc: asyncio.subprocess.Process, text: str) -> Any:
            assert proc.stdin is not None
            proc.stdin.write(f"{text}\n".encode())
            await proc.stdin.drain()

            async def sent() -> Any:
                found = [b for b in model.bodies if text in json.dumps(b)]
                return found[-1] if found else None

            return await until(sent, limit=90)

        password = f"pw-{tag}-long enough"
        made = await run_chorus(
            ["admin", "add-user", f"ada{tag}", "--role", "admin"],
            env,
            tmp_path,
            f"{password}\n".encode(),
        )
        assert made[0] == 0, made[2]
        try:
            await until(lambda: dashboard_up(base), limit=90)
            first = await ask(proc_b, f"ahoy {tag} one")
            assert PIRATE in prefix(first) and QUILL not in prefix(first)
            bob_before = prefix(await ask(proc_a, f"hello {tag} one"))
            assert QUILL in bob_before
            count = await reloads.count()

            async with async_playwright() as pw:
                browser = await pw.chromium.launch(
                    executable_path=chromium, args=["--no-sandbox", "--disable-gpu"]
                )
                page = await browser.new_page(viewport={"width": 1280, "height": 900})
                await page.goto(f"{base}/login")
                await page.fill("#name", f"ada{tag}")
                await page.fill("#token", password)
                await page.click("button[type=submit]")
                await page.wait_for_selector("h1:has-text('Overview')")
                assert await page.locator("#account").inner_text() == f"ada{tag} (admin)"
                await page.click("nav >> text=Config")
                await page.wait_for_selector("h1:has-text('Configuration')")
                await page.fill("#scope", f"console:{alice}")
                await page.click("button:has-text('Preview')")
                assert "pirate" in await page.locator("#preview").inner_text()
                await shot(page, "config", whole=False)
                await page.select_option('[id="scope.0.persona"]', "librarian")
                await page.click("#review")
                await page.wait_for_selector("#diff")
                assert '+persona = "librarian"' in await page.locator("#diff").inner_text()
                assert on_disk(toml) == config(alice, bob), "a review writes nothing"
                await page.click("#save")
                await page.wait_for_selector("text=The configuration file was saved")
                written = on_disk(toml)
                assert written == config(alice, bob).replace(
                    'persona = "pirate"', 'persona = "librarian"'
                )
                assert "# alice's corner" in written and "# arr" in written
                assert await reloads.count() == count + 1
                edits = [e for e in await read_audit(store) if e.rule == "config:edit"]
                assert edits[-1].user_name == f"account:ada{tag}"
                assert edits[-1].detail == "scope.0.persona: 'pirate' -> 'librarian'"

                async def reloaded() -> bool:
                    return any("configuration reloaded" in line for line in logs_b)

                await until(reloaded, limit=90)  # B learnt it from Redis alone
                second = await ask(proc_b, f"ahoy {tag} two")
                third = await ask(proc_b, f"ahoy {tag} three")
                assert QUILL in prefix(second) and PIRATE not in prefix(second)
                assert prefix(second) == prefix(third)  # byte-identical: the cache holds
                assert prefix(await ask(proc_a, f"hello {tag} two")) == bob_before

                await page.goto(f"{base}/config")
                await page.fill('[id="scope.1.safety.patterns"]', "spoil(er")
                await page.click("#review")
                error = page.locator('[id="scope.1.safety.patterns-error"]')
                await error.wait_for()
                message = await error.inner_text()
                assert f"{toml}:" in message and "[[scope]] #2: safety.patterns" in message
                assert "invalid regular expression 'spoil(er'" in message
                assert on_disk(toml) == written and await reloads.count() == count + 1
                await error.scroll_into_view_if_needed()
                await shot(page, "config-invalid", whole=False)
                await browser.close()
        finally:
            for proc in (proc_a, proc_b):
                proc.send_signal(signal.SIGTERM)
            _, err_a = await asyncio.wait_for(proc_a.communicate(), 60)
            await asyncio.wait_for(proc_b.wait(), 60)
            await following
            await AccountRecords(store).remove(f"ada{tag}")
            await store.aclose()
        assert proc_a.returncode == 0, err_a.decode()[-3000:]
        assert TOKEN not in err_a.decode()
