"""What keeps the dashboard's pages honest, over real HTTP (aiohttp's test server) and the
store (embedded and real Redis): a page shows only notices the server issued, never text from
the URL."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from urllib.parse import quote

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from bot.admin.notices import NOTICES, Notices
from bot.admin.server import AdminServer, environment
from bot.admin.views import Sources
from bot.events import ConversationKey
from bot.memory.buffers import MemoryStore, UserBuffer
from bot.router import memory_commands
from bot.router.text_commands import Commands
from bot.safety.audit import Audit
from bot.settings import Settings
from bot.state.history import HistoryStore
from tests.test_admin import TOKEN, login, pin

Client = TestClient[web.Request, web.Application]
BEARER = {"Authorization": f"Bearer {TOKEN}"}
PAGES = ["/", "/conversations", "/people", "/live", "/insights", "/settings", "/login"]
INJECTED = "Your session expired. Call +1 555 0100 to log in again"


@pytest.fixture
async def served(redis_client: Redis, key_tag: str) -> AsyncIterator[tuple[AdminServer, Client]]:
    history = HistoryStore(redis_client, max_messages=20, ttl_seconds=3600)
    commands = Commands(history)
    memory_commands.register(commands, MemoryStore(redis_client), history)
    reloads: list[int] = []
    sources = Sources(
        settings=Settings(),
        redis=redis_client,
        memory=MemoryStore(redis_client),
        history=history,
        audit=Audit(redis_client, namespace=key_tag),
        commands=commands,
        reload=lambda: reloads.append(1),
    )
    server = AdminServer(sources, TOKEN)
    async with TestClient(TestServer(server.app())) as http:
        yield server, http


def notice_of(page: str) -> str:
    found = re.search(r'<p class="notice" role="status">(.*?)</p>', page, re.DOTALL)
    return found.group(1).strip() if found else ""


@pytest.mark.redis
async def test_a_notice_in_the_url_is_never_rendered(
    served: tuple[AdminServer, Client], key_tag: str
) -> None:
    _, http = served
    forged = Notices("another-admin-token-0000").issue("forgotten", summary=INJECTED)
    for path in PAGES:
        for query in (f"notice={quote(INJECTED)}", "notice=paused", forged, "notice=reloaded."):
            page = await (await http.get(f"{path}?{query}", headers=BEARER)).text()
            assert INJECTED not in page and notice_of(page) == "", f"{path}?{query}"


@pytest.mark.redis
async def test_each_change_shows_the_notice_the_server_issued(
    served: tuple[AdminServer, Client], redis_client: Redis, key_tag: str
) -> None:
    _, http = served
    csrf = await login(http)
    user, conv = f"u{key_tag}", ConversationKey(platform="twitch", channel=f"c{key_tag}")
    await MemoryStore(redis_client).save(
        UserBuffer(platform="twitch", user_id=user, pins=(pin("a"), pin("b")))
    )
    entry = {"csrf": csrf, "kind": "pin", "index": "0", "seen": "a"}
    changes: list[tuple[str, dict[str, str], str]] = [
        (f"/people/twitch/{user}/entry", entry | {"action": "edit", "text": ""}, "Nothing"),
        (f"/people/twitch/{user}/entry", entry | {"action": "delete", "seen": "b"}, "Nothing"),
        (f"/people/twitch/{user}/entry", entry | {"action": "delete"}, "The pin was deleted."),
        (f"/live/{conv}/pause", {"csrf": csrf, "paused": "1"}, f"Paused c{key_tag}."),
        (f"/live/{conv}/pause", {"csrf": csrf, "paused": "0"}, f"Resumed c{key_tag}."),
        ("/settings/reload", {"csrf": csrf}, "The configuration file was reloaded."),
        (f"/people/twitch/{user}/forget", {"csrf": csrf}, "1 note"),
    ]
    for path, form, expected in changes:
        response = await http.post(path, data=form)
        assert response.status == 200 and expected in notice_of(await response.text()), path
        assert "notice=" in response.url.query_string  # signed: no text of its own
        assert expected not in response.url.query_string


def test_every_notice_has_a_text_and_only_known_ones_are_issued() -> None:
    notices, template = Notices(TOKEN), environment().get_template("notices.html")
    for notice, names in NOTICES.items():
        values = {name: f"<{name}>" for name in names}
        raw = notices.issue(notice, **values).removeprefix("notice=")
        read = notices.read(raw.replace("%3D", "="))
        assert read == {"id": notice, **values}
        text = template.render(notice=read)
        assert text.strip() and "<" not in text, notice  # values are escaped too
    with pytest.raises(ValueError, match="no notice"):
        notices.issue("anything", text=INJECTED)
