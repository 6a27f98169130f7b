"""The dashboard's Commands page against a real Redis: an operator adds, edits and deletes a
channel's custom command (each audited with the account), and the ``commands`` plugin, on the
same store, answers the next ``!command`` with what the page saved; a viewer sees no form and a
forged change is refused (403, audited); a bad form changes nothing and says why."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from bot.admin.server import AdminServer
from bot.admin.views import Sources
from bot.memory.buffers import MemoryStore
from bot.safety.audit import Audit, read_audit
from bot.settings import load_settings
from bot.state.history import HistoryStore
from bot.state.plugin_store import RedisPluginStore
from tests.builtin_rig import load
from tests.test_admin import TOKEN
from tests.test_admin_accounts import account, csrf_of, log_in

Client = TestClient[web.Request, web.Application]
FILE = """
[plugins.commands]
default_cooldown = 0

[plugins.commands.commands.discord]
text = "Join the server"
aliases = ["dc"]
"""


@pytest.fixture
async def http(redis_client: Redis, key_tag: str, tmp_path: Path) -> AsyncIterator[Client]:
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
    async with TestClient(TestServer(AdminServer(sources, TOKEN).app())) as client:
        yield client


def notice(page: str) -> str:
    found = re.search(r'<p class="notice" role="status">(.*?)</p>', page, re.S)
    return found[1].strip() if found else ""


async def test_an_operator_manages_a_channel_commands_and_the_plugin_answers_with_them(
    http: Client, redis_client: Redis, key_tag: str
) -> None:
    channel = f"c{key_tag}"
    await account(redis_client, key_tag, "otto", "operator")
    assert await log_in(http, "otto") == 303
    page = await (
        await http.get("/commands", params={"platform": "twitch", "channel": channel})
    ).text()
    assert 'id="add"' in page and "Join the server" in page  # the file's, read-only
    base = {"csrf": csrf_of(page), "platform": "twitch", "channel": channel}
    add = base | {"name": "socials", "text": "follow me at {channel}", "role": "everyone"}
    added = await http.post("/commands", data=add | {"aliases": "links", "action": "save"})
    shown = await added.text()
    assert notice(shown) == "Saved !socials: the next use in the channel answers with it."
    assert 'id="command-socials"' in shown and f"twitch / {channel}" in shown

    rig = load("commands", FILE, RedisPluginStore(redis_client))
    said = rig.message("!links", channel=channel, server="streamer")
    await rig.emit("message", said)
    assert [t for _, t in rig.sent] == ["follow me at streamer"]

    taken = add | {"name": "other", "aliases": "dc", "action": "save"}
    refused = await (await http.post("/commands", data=taken)).text()
    assert "Nothing changed: !dc is already a command or an alias" in notice(refused)
    bad = add | {"cooldown": "soon", "action": "save"}
    assert "cooldown: a number of seconds" in notice(
        await (await http.post("/commands", data=bad)).text()
    )
    edit = add | {"text": "new text", "role": "moderator", "cooldown": "5", "action": "save"}
    await http.post("/commands", data=edit)
    await rig.emit("message", rig.message("!socials", channel=channel, server="streamer"))
    assert len(rig.sent) == 1  # moderators only now
    gone = await http.post("/commands", data=base | {"name": "socials", "action": "delete"})
    assert notice(await gone.text()) == "Deleted !socials."
    assert (
        await RedisPluginStore(redis_client).get(
            f"chorus:v1:plugin:commands:chan:twitch:{channel}:defined"
        )
        is None
    )
    entries = await read_audit(redis_client, namespace=key_tag)
    edits = [(e.action, e.user_name, e.detail) for e in entries if e.rule == "commands:edit"]
    assert edits == [
        ("saved", "account:otto", "!socials"),
        ("saved", "account:otto", "!socials"),
        ("deleted", "account:otto", "!socials"),
    ]


async def test_a_viewer_sees_no_form_and_a_forged_change_is_refused(
    http: Client, redis_client: Redis, key_tag: str
) -> None:
    await account(redis_client, key_tag, "vera", "viewer")
    assert await log_in(http, "vera") == 303
    page = await (
        await http.get("/commands", params={"platform": "twitch", "channel": "c1"})
    ).text()
    assert 'id="add"' not in page and "Commands" in page
    form = {"csrf": csrf_of(page), "platform": "twitch", "channel": "c1", "name": "x"}
    forged = await http.post("/commands", data=form | {"text": "y", "action": "save"})
    assert forged.status == 403
    entries = await read_audit(redis_client, namespace=key_tag)
    assert [(e.rule, e.user_name) for e in entries] == [("admin:forbidden", "account:vera")]
