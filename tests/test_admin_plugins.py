"""The Plugins page over aiohttp's test client: a plugin's secret setting is never a field and
never shown (only whether it is set, and by which variable), a plugin that failed to load is
listed with its message, and a form's edit of ``[plugins.NAME]`` keeps the file's comments."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from bot.admin import plugins_page
from bot.admin.server import AdminServer
from bot.admin.views import Sources
from bot.memory.buffers import MemoryStore
from bot.plugins.loader import Source, load_plugins
from bot.safety.audit import Audit
from bot.settings import load_settings
from bot.state.history import HistoryStore

TOKEN = "admin-token-0123456789abcdef"
SECRET = "greet-secret-value-0123456789"
FILE = """\
# the greeter (this comment stays)
[plugins.greeter]
greeting = "hi"  # how it says hello
"""


@pytest.mark.redis
async def test_the_page_hides_secrets_and_shows_load_errors(
    redis_client: Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "chorus.toml").write_text(FILE, encoding="utf-8")
    settings = load_settings(environ={"GREET_TOKEN": SECRET}, warn=False)
    loaded = load_plugins(
        settings.plugins,
        sources=[
            Source("greeter", "tests.plugin_samples.configured", "test"),
            Source("broken", "tests.plugin_samples.broken", "test"),
        ],
        file=settings.file,
        variables=settings.variable,
    )
    sources = Sources(
        settings=settings,
        redis=redis_client,
        memory=MemoryStore(redis_client),
        history=HistoryStore(redis_client, max_messages=20, ttl_seconds=3600),
        audit=Audit(redis_client),
        plugins=loaded,
    )
    server = AdminServer(sources, TOKEN)
    async with TestClient(TestServer(server.app())) as http:
        page = await (
            await http.get("/plugins", headers={"Authorization": f"Bearer {TOKEN}"})
        ).text()
    assert SECRET not in page
    assert "set, hidden (from GREET_TOKEN in the environment or .env)" in page
    assert 'name="plugin.greeter.token"' not in page  # never a form field
    assert 'id="plugin.greeter.greeting" name="plugin.greeter.greeting" value="hi"' in page
    assert 'placeholder="default: 3"' in page  # limit: not set in the file
    assert "broken" in page and "this plugin is broken on purpose" in page

    greeter = next(p for p in loaded.plugins if p.name == "greeter")
    fields = plugins_page.fields(greeter, {"greeting": "hi"})
    form = {"plugin.greeter.greeting": "hello", "plugin.greeter.limit": "5"}
    text, changes = plugins_page.edit(FILE, "greeter", fields, form, [SECRET])
    assert text == FILE.replace('"hi"', '"hello"') + "limit = 5\n"
    assert [c.name for c in changes] == ["plugins.greeter.greeting", "plugins.greeter.limit"]
    with pytest.raises(ValueError, match="a secret belongs in .env"):
        plugins_page.edit(FILE, "greeter", fields, {"plugin.greeter.greeting": SECRET}, [SECRET])
    assert os.environ.get("GREET_TOKEN") is None  # read from the given environ only
