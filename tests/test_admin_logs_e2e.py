"""The Logs page shows a WARNING another process wrote, with its secret redacted.

Two real processes over one real Redis (a namespace of the test's own): A is ``chorus run``
with the dashboard (the console as its platform), B is ``chorus chat`` with no dashboard. The
loopback Anthropic server answers B's question with two "overloaded" errors whose message
quotes B's API key, so B logs "llm call failed; retrying" at WARNING. The line reaches B's
stream entry with the key masked by B's own log redactor (A does not know that key), and A's
Logs page shows it, filtered by level, logger and B's process.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import uuid
from pathlib import Path

import aiohttp

from bot.state import connect, keys
from bot.state.log_lines import LogLines
from tests.loopback.anthropic_server import AnthropicServer
from tests.redis_server import free_port
from tests.test_admin_browser_e2e import TOKEN
from tests.test_chat_e2e import base_env, spawn_chorus
from tests.waiting import until

KEY_B = "sk-ant-api03-bee-secret-0123456789abcdef"


async def test_the_logs_page_shows_another_process_warning_with_its_secret_masked(
    tmp_path: Path, real_redis_url: str
) -> None:
    namespace = f"logs{uuid.uuid4().hex[:8]}"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    store = await connect.open_redis(real_redis_url)
    async with AnthropicServer() as model:
        for _ in range(2):
            model.fail(529, f"overloaded for key {KEY_B}", error_type="overloaded_error")
        env = base_env(tmp_path) | {
            "CHORUS_REDIS_URL": real_redis_url,
            "CHORUS_BUS_NAMESPACE": namespace,
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_BASE_URL": model.base_url,
        }
        pipe = asyncio.subprocess.PIPE
        env_a = env | {
            "ANTHROPIC_API_KEY": "k-a",
            "CHORUS_ADMIN_PORT": str(port),
            "CHORUS_ADMIN_TOKEN": TOKEN,
        }
        proc_a = await spawn_chorus(["run"], env_a, tmp_path, stdin=pipe)
        env_b = env | {"ANTHROPIC_API_KEY": KEY_B}
        proc_b = await spawn_chorus(["chat", "--user", "zed"], env_b, tmp_path, stdin=pipe)
        worker = f"{socket.gethostname()}/{proc_b.pid} worker"
        query = {"level": "warning", "logger": "chorus.llm", "process": worker}
        try:
            async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as http:

                async def page() -> str:
                    try:
                        async with http.get(f"{base}/logs", params=query) as response:
                            text = await response.text()
                            return text if "llm call failed; retrying" in text else ""
                    except aiohttp.ClientError:
                        return ""

                assert proc_b.stdin is not None
                proc_b.stdin.write(b"hello there\n")
                await proc_b.stdin.drain()
                shown = await until(page, limit=90)
            assert "overloaded for key ***" in shown and KEY_B not in shown
            assert "no answer from the model" not in shown  # chorus.router: filtered out
            assert worker in shown
            entries = await LogLines(store, namespace=namespace).newest(200)
            fed = [e for _, e in entries if "llm call failed" in e["line"]]
            assert fed and fed[0]["level"] == "warning" and fed[0]["process"] == worker
            assert KEY_B not in fed[0]["line"] and "***" in fed[0]["line"]
        finally:
            for proc in (proc_a, proc_b):
                proc.send_signal(signal.SIGTERM)
            _, err_a = await asyncio.wait_for(proc_a.communicate(), 60)
            _, err_b = await asyncio.wait_for(proc_b.communicate(), 60)
            await store.delete(keys.log_lines(namespace))
            await store.aclose()
        assert proc_a.returncode == 0, err_a.decode()[-3000:]
        assert KEY_B not in err_b.decode()
