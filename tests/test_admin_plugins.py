"""The Plugins page over aiohttp's test client: a plugin's secret setting is never a field and
never shown (only whether it is set, and by which variable), a plugin that failed to load is
listed with its message, and a form's edit of ``[plugins.NAME]`` keeps the file's comments."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from bot.admin import plugins_page
from bot.admin.server import AdminServer
from bot.admin.views import Sources
from bot.memory.buffers import MemoryStore
from bot.plugins.loader import Source, load_plugins
from bot.safety.audit import Audit, read_audit
from bot.settings import load_settings
from bot.state.config_reloads import ConfigReloads
from bot.state.history import HistoryStore
from tests.test_admin import login

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


SCOPED = """\
# commands everywhere (kept)
[plugins.commands]
prefix = "!"

[[scope]]
match = "twitch"  # the stream

# the quiet server
[[scope]]
match = "discord"
"""


@pytest.mark.redis
async def test_a_plugin_is_switched_off_in_one_scope_from_the_page(
    redis_client: Redis, tmp_path: Path, key_tag: str
) -> None:
    """A built-in (its settings have ``enabled``) gets an on/off switch per scope: the save
    writes ``enabled = false`` into that scope's ``[scope.plugins.NAME]`` (comments kept),
    audited and reloaded, and a start reading the file runs it there no more."""
    toml = tmp_path / "chorus.toml"
    toml.write_text(SCOPED, encoding="utf-8")
    settings = load_settings(environ={}, env_file=None, config=toml, warn=False)
    loaded = load_plugins(settings.plugins, file=settings.file, variables=settings.variable)
    assert [p.name for p in loaded.plugins] == ["commands"]
    sources = Sources(
        settings=settings,
        redis=redis_client,
        memory=MemoryStore(redis_client),
        history=HistoryStore(redis_client, max_messages=20, ttl_seconds=3600),
        audit=Audit(redis_client, namespace=key_tag),
        plugins=loaded,
    )
    before = await ConfigReloads(redis_client).count()
    async with TestClient(TestServer(AdminServer(sources, TOKEN).app())) as http:
        await login(http)
        page = await (await http.get("/plugins")).text()
        form = re.search(r'<form[^>]*id="plugin-commands-scope-1">(.*?)</form>', page, re.S)
        assert form is not None and "Turn off here" in form[1]
        assert 'id="plugin-commands-scope-0"' in page  # each scope has its switch
        data = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', form[1]))
        assert data["scope"] == "1" and data["enabled"] == "false"
        saved = await http.post("/plugins", data=data, allow_redirects=False)
        assert saved.status == 303, await saved.text()
        written = toml.read_text(encoding="utf-8")
        assert written.startswith(SCOPED)  # every comment and line kept, the table added
        assert written.endswith("\n[scope.plugins.commands]\nenabled = false\n")
        again = await (await http.get("/plugins")).text()
        assert "Turn on here" in again  # the page reads the file it wrote
        stale = await http.post("/plugins", data=data)  # the file changed since that page
        assert stale.status == 409 and toml.read_text(encoding="utf-8") == written
        version = re.search(r'name="version" value="([^"]*)"', again)
        assert version is not None
        forged = await http.post("/plugins", data={**data, "scope": "7", "version": version[1]})
        assert forged.status == 400 and toml.read_text(encoding="utf-8") == written
    assert await ConfigReloads(redis_client).count() == before + 1
    entries = [e for e in await read_audit(redis_client, namespace=key_tag)]
    (edit,) = [e for e in entries if e.rule == "config:edit"]
    assert edit.detail == "scope[1] (discord).plugins.commands.enabled: '' -> 'false'"
    reread = load_settings(environ={}, env_file=None, config=toml, warn=False)
    config = load_plugins(reread.plugins, file=reread.file, variables=reread.variable)
    (commands,) = config.plugins
    place = commands.services.config
    assert place is not None
    assert place.at("discord", "g1", "c1").model_dump()["enabled"] is False
    assert place.at("twitch", None, "c1").model_dump()["enabled"] is True
