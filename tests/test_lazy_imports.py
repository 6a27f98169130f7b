"""Start-up imports only what the configuration needs (issue: half-second start).

Each case runs a fresh interpreter (``sys.modules`` of the test process is shared by every
test) that imports the ``chorus`` command's module and builds the whole app the way a piped
``chorus chat`` does, then reports which heavy optional packages got imported. A vendor SDK,
a platform SDK or the terminal UI imported where it is not used costs start-up time and
resident memory on every run (``python -m bench.startup`` measures both). So does a feature
that is off (the feeds tool and its XML parsers without ``CHORUS_FEEDS``), and so does the core
imported by the command module itself: ``bot.cli.main`` holds full garbage collections while a
bot starts (``bot.ops.aio.starting``), which only helps what is imported after it is called.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # every test here starts processes

ROOT = Path(__file__).resolve().parent.parent

VENDOR_SDKS = {"anthropic": "anthropic", "openai": "openai", "gemini": "google.genai"}
PLATFORM_SDKS = ("discord", "slack_sdk", "slack_bolt", "twitchio", "grpc", "googleapiclient")
TERMINAL_UI = ("prompt_toolkit", "rich")
EMBEDDED_STORE = ("fakeredis", "lupa")
# CHORUS_FEEDS only
FEEDS = ("bot.tools.builtin.feeds", "defusedxml", "xml.etree.ElementTree", "feedparser")
CORE = ("aiohttp", "bot.app", "bot.settings", "pydantic", "redis")  # imported in bot.cli.main
WATCHED = (
    *VENDOR_SDKS.values(),
    *PLATFORM_SDKS,
    *TERMINAL_UI,
    *EMBEDDED_STORE,
    *FEEDS,
    "aiohttp.web",
    "mcp",
)

_PROBE = """
import asyncio, json, sys
import bot.cli
after_cli = sorted(m for m in {watched!r} + {core!r} if m in sys.modules)
from bot.app import Chorus
from bot.settings import load_settings

async def build() -> None:
    app = await Chorus.from_settings(load_settings(warn=False))
    await app.aclose()

asyncio.run(build())
print(json.dumps({{"cli": after_cli, "app": sorted(m for m in {watched!r} if m in sys.modules)}}))
"""


def _probe(tmp_path: Path, env: dict[str, str]) -> dict[str, list[str]]:
    base = {k: v for k, v in os.environ.items() if k in {"PATH", "LANG"}}
    base.update(
        HOME=str(tmp_path),
        PYTHONPATH=str(ROOT),
        CHORUS_BLOCK_REAL_LLM="1",
        CHORUS_REDIS_URL="memory://",
        CHORUS_HEALTH_PORT="0",
    )
    done = subprocess.run(
        [sys.executable, "-c", _PROBE.format(watched=WATCHED, core=CORE)],
        env=base | env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, list[str]] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_the_command_module_imports_no_vendor_platform_or_terminal_package_nor_the_core(
    tmp_path: Path,
) -> None:
    found = _probe(tmp_path, {"CHORUS_MODEL": "openai:gpt-test", "OPENAI_API_KEY": "k"})
    assert found["cli"] == []


@pytest.mark.parametrize("vendor", sorted(VENDOR_SDKS))
def test_a_built_app_imports_no_vendor_sdk_until_the_model_is_needed(
    vendor: str, tmp_path: Path
) -> None:
    """The SDK loads on the first model call (``bot.llm.lazy``; tests/test_lazy_provider.py
    shows that call loading it)."""
    key = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY", "gemini": "GEMINI_API_KEY"}
    found = _probe(tmp_path, {"CHORUS_MODEL": f"{vendor}:some-model", key[vendor]: "test-key"})
    assert found["app"] == sorted(EMBEDDED_STORE)  # memory://


def test_an_app_on_a_real_redis_does_not_load_the_embedded_store(
    tmp_path: Path, real_redis_url: str
) -> None:
    env = {"CHORUS_MODEL": "openai:gpt-test", "OPENAI_API_KEY": "k"}
    found = _probe(tmp_path, env | {"CHORUS_REDIS_URL": real_redis_url})
    assert found["app"] == []


async def test_a_piped_chat_answers_without_the_terminal_ui_or_other_vendors(
    tmp_path: Path,
) -> None:
    """The real ``chorus chat`` process, piped, against a loopback model: ``-X importtime``
    lists every module it imported on stderr."""
    from tests.loopback.openai_server import OpenAIServer

    async with OpenAIServer() as server:
        server.replies.append("Hello there.")
        env = {k: v for k, v in os.environ.items() if k in {"PATH", "LANG"}}
        env.update(
            HOME=str(tmp_path),
            PYTHONPATH=str(ROOT),
            CHORUS_BLOCK_REAL_LLM="1",
            CHORUS_REDIS_URL="memory://",
            CHORUS_HEALTH_PORT="0",
            CHORUS_MODEL="openai:gpt-test",
            OPENAI_API_KEY="test-key",
            OPENAI_BASE_URL=server.base_url,
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-X", "importtime", "-m", "bot.cli", "chat",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env, cwd=tmp_path,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(b"hi\n"), timeout=120)
    assert proc.returncode == 0, err.decode()[-3000:]
    assert "Hello there." in out.decode()
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in err.decode().splitlines()
        if line.startswith("import time:")
    }
    assert "openai" in imported and "bot.app" in imported  # the listing is real
    assert sorted(set(WATCHED) & imported) == sorted(["openai", *EMBEDDED_STORE])


def test_the_feeds_tool_and_its_xml_parsers_load_only_where_feeds_are_followed(
    tmp_path: Path,
) -> None:
    env = {"CHORUS_MODEL": "openai:gpt-test", "OPENAI_API_KEY": "k"}
    assert not set(FEEDS) & set(_probe(tmp_path, env)["app"])
    found = _probe(tmp_path, env | {"CHORUS_FEEDS": "https://example.com/feed.xml"})
    assert set(FEEDS) <= set(found["app"])
