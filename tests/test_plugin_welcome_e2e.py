"""The "welcome and remind" example (examples/plugins/chorus_welcome), pip-installed offline into
a directory of its own and loaded by its entry point, in ``chorus run`` on the console: the first
line gets the welcome its ``[plugins.welcome]`` settings say (an ``on_message`` event and
``ctx.reply``), and ``/remind 2s ...`` is sent back by its timer when due (``ctx.send``), each
through the console's own sending path."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.loopback.anthropic_server import AnthropicServer
from tests.test_chat_e2e import ROOT, base_env, spawn_chorus

EXAMPLE = ROOT / "examples" / "plugins" / "chorus_welcome"
CONFIG = """
[plugins]
modules = ["welcome"]

[plugins.welcome]
welcome = "Hi {name}, welcome to the test!"
"""


@pytest.fixture(scope="module")
def welcome_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pip install`` of the example into a directory of its own (offline, from a copy)."""
    base = tmp_path_factory.mktemp("welcome")
    source, site = base / "src", base / "site"
    shutil.copytree(EXAMPLE, source)
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
        + ["--no-build-isolation", "--disable-pip-version-check", "--target", str(site)]
        + [str(source)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    (points,) = site.glob("chorus_plugin_welcome-*.dist-info/entry_points.txt")
    assert "[chorus.plugins]\nwelcome = chorus_welcome" in points.read_text()
    return site


async def test_a_newcomer_is_welcomed_and_reminded_when_due(
    tmp_path: Path, welcome_site: Path
) -> None:
    (tmp_path / "chorus.toml").write_text(CONFIG)
    async with AnthropicServer() as model:
        model.replies.extend(["the model's answer"])
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "CHORUS_INSIGHTS_ENABLED": "false",
            "PYTHONPATH": f"{ROOT}:{welcome_site}",
        }
        proc = await spawn_chorus(["run"], env, tmp_path, stdin=asyncio.subprocess.PIPE)
        assert proc.stdin is not None and proc.stdout is not None
        lines: list[str] = []

        async def read_until(done: Callable[[], bool]) -> None:
            assert proc.stdout is not None
            async with asyncio.timeout(90):
                while not done():
                    line = await proc.stdout.readline()
                    if not line:
                        raise AssertionError(f"chorus ended; it said {lines}")
                    lines.append(line.decode().strip())

        try:
            proc.stdin.write(b"hello there\n")
            await proc.stdin.drain()
            await read_until(lambda: len(lines) >= 2)
            proc.stdin.write(b"/remind 2s stand up\n")
            await proc.stdin.drain()
            await read_until(lambda: "Reminder: stand up" in lines)
            proc.stdin.close()
            _, err = await asyncio.wait_for(proc.communicate(), 60)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert proc.returncode == 0, err.decode()[-3000:]
    assert "the model's answer" in lines[:2]
    (welcomed,) = [line for line in lines if "welcome to the test" in line]
    assert welcomed.startswith("Hi ") and welcomed.endswith(", welcome to the test!")
    assert lines[2:] == ["I'll remind you in 2s.", "Reminder: stand up"]
    assert len(model.requests) == 1  # the welcome, the command and the reminder: no model
