"""What keeps the dashboard's pages honest, over real HTTP (aiohttp's test server) and the
store (embedded and real Redis): a page shows only notices the server issued, never text from
the URL, and a person's name from a link only if they went by it; the hardening headers on
every response, refusals and redirects included; CSRF on every form; no ``next=`` redirect and
no token in a URL; autoescaping; constant-time token compares; and a non-ASCII CSRF token or
cookie is refused, not an error."""

from __future__ import annotations

import hmac
import re
from collections.abc import AsyncIterator, Callable, Iterator
from urllib.parse import quote

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from bot.admin.auth import COOKIE
from bot.admin.notices import NOTICES, Notices
from bot.admin.server import AdminServer, environment
from bot.admin.views import Sources
from bot.events import ConversationKey
from bot.memory.buffers import MemoryStore, UserBuffer
from bot.router import memory_commands
from bot.router.text_commands import Commands
from bot.safety.audit import Audit
from bot.settings import Settings
from bot.state import turnlog
from bot.state.history import HistoryStore
from bot.state.voice import OverlayKeys
from tests.redis_cluster import WITH_CLUSTER, store_url
from tests.test_admin import TOKEN, login, login_csrf, pin


@pytest.fixture(params=WITH_CLUSTER)
def redis_url(request: pytest.FixtureRequest, key_tag: str) -> Iterator[str]:
    """The stores, and a Redis Cluster of three primaries (``tests/redis_cluster.py``)."""
    yield from store_url(request, key_tag)


Client = TestClient[web.Request, web.Application]
BEARER = {"Authorization": f"Bearer {TOKEN}"}
PAGES = ["/", "/conversations", "/people", "/live", "/insights", "/settings", "/login"]
INJECTED = "Your session expired. Call +1 555 0100 to log in again"
HEADERS = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
}


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
async def test_a_name_in_the_url_is_shown_only_if_the_person_went_by_it(
    served: tuple[AdminServer, Client], redis_client: Redis, key_tag: str
) -> None:
    """The person page takes the name the search found them by from its link (``?name=``), so
    any other text there is not shown: the page names them by id."""
    _, http = served
    user = f"u{key_tag}"
    async with redis_client.pipeline() as pipe:
        turnlog.queue_names(pipe, "slack", [(user, f"Ada{key_tag}")])
        await pipe.execute()
    try:
        page = await (
            await http.get(f"/people/slack/{user}?name=Ada{key_tag}", headers=BEARER)
        ).text()
        assert f"<h1>Ada{key_tag} <small>" in page
        injected = await http.get(
            f"/people/slack/{user}", params={"name": INJECTED[:64]}, headers=BEARER
        )
        page = await injected.text()
        assert INJECTED[:40] not in page and f"<h1>{user} <small>" in page
    finally:
        async with redis_client.pipeline() as pipe:
            turnlog.forget_names(pipe, "slack", user, [f"Ada{key_tag}"])
            await pipe.execute()


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


@pytest.mark.redis
async def test_every_response_carries_the_hardening_headers(
    served: tuple[AdminServer, Client],
) -> None:
    _, http = served
    requests: list[tuple[str, str, dict[str, str]]] = [
        ("GET", "/", BEARER),  # a page
        ("GET", "/login", {}),  # the open login page
        ("GET", "/", {}),  # the redirect to the login
        ("GET", "/live", {"Authorization": "Bearer wrong"}),  # refused
        ("POST", "/settings/reload", {}),  # not logged in
        ("GET", "/conversations/nonsense", BEARER),  # not found
    ]
    for method, path, headers in requests:
        response = await http.request(method, path, headers=headers, allow_redirects=False)
        found = {name: response.headers.get(name) for name in HEADERS}
        assert found == HEADERS, (method, path, response.status)
        assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"]


@pytest.mark.redis
async def test_every_form_carries_the_csrf_token_and_every_change_needs_it(
    served: tuple[AdminServer, Client], redis_client: Redis, key_tag: str
) -> None:
    server, http = served
    csrf = await login(http)
    user = f"u{key_tag}"
    await MemoryStore(redis_client).save(
        UserBuffer(platform="slack", user_id=user, pins=(pin("a"),))
    )
    await OverlayKeys(redis_client).get(ConversationKey(platform="twitch", channel=f"c{key_tag}"))
    commands = "/commands?platform=twitch&channel=c1"
    pages = ["/", "/live", "/moderation", "/voice", "/settings", "/config", f"/people/slack/{user}"]
    pages += ["/plugins", "/charts", "/knowledge", "/chat"]
    for path in [*pages, commands]:
        page = await (await http.get(path)).text()
        for form in re.findall(r'<form method="post".*?</form>', page, re.DOTALL):
            assert f'name="csrf" value="{csrf}"' in form, (path, form[:80])
    posts = [r for r in server.app().router.routes() if r.method == "POST"]
    # /commands, /moderation/undo, the Twitch join, /voice/*, /plugins, /knowledge/*, /chat
    assert len(posts) == 16
    for route in posts:
        info = route.resource.get_info() if route.resource else {}
        path = info.get("path") or info.get("formatter", "")
        path = path.format(
            platform="slack", user_id=user, conv=f"twitch:c{key_tag}", action="pause"
        )
        for form in ({}, {"csrf": "forged"}, {"csrf": "né☃"}):  # non-ASCII: refused, not a 500
            refused = await http.post(path, data=form, allow_redirects=False)
            assert refused.status == 403, (path, form)
    assert (await MemoryStore(redis_client).load("slack", user)).pins[0].text == "a"


@pytest.mark.redis
async def test_odd_credentials_are_refused_not_errors(served: tuple[AdminServer, Client]) -> None:
    _, http = served
    csrf = await login_csrf(http)
    assert (await http.post("/login", data={"token": "né☃", "csrf": csrf})).status == 401
    assert (await http.post("/login", data={"token": TOKEN, "csrf": "né☃"})).status == 403
    bearer = await http.get("/", headers={"Authorization": "Bearer né☃".encode().decode("latin-1")})
    assert bearer.status == 401
    odd = await http.get("/", cookies={COOKIE: "né☃.1.x"}, allow_redirects=False)
    assert odd.status == 303 and odd.headers["Location"] == "/login"


@pytest.mark.redis
async def test_no_next_redirect_and_no_token_in_any_url(
    served: tuple[AdminServer, Client],
) -> None:
    _, http = served
    asked = await http.get("/people?next=https://evil.example/", allow_redirects=False)
    assert asked.headers["Location"] == "/login"
    form = {"token": TOKEN, "csrf": await login_csrf(http)}
    for path in ("/login?next=https://evil.example/", "/login?next=//evil.example"):
        done = await http.post(path, data=form, allow_redirects=False)
        assert done.status == 303 and done.headers["Location"] == "/"
    http.session.cookie_jar.clear()
    by_url = await http.get(f"/login?token={TOKEN}", allow_redirects=False)
    assert by_url.status == 200 and COOKIE not in by_url.cookies  # a token in a URL logs nobody in
    assert 'method="post" action="/login"' in await by_url.text()


@pytest.mark.redis
async def test_what_a_person_wrote_is_escaped_everywhere(
    served: tuple[AdminServer, Client], redis_client: Redis, key_tag: str
) -> None:
    _, http = served
    evil = '<script>alert("x")</script>'
    user = f"u{key_tag}"
    await MemoryStore(redis_client).save(
        UserBuffer(platform="slack", user_id=user, pins=(pin(evil),))
    )
    for path in (
        f"/people/slack/{user}?name={evil}",
        f"/people?q={evil}",
        f"/settings?scope={evil}",
    ):
        page = await (await http.get(path, headers=BEARER)).text()
        assert "<script>" not in page and "&lt;script&gt;" in page, path
    assert environment().autoescape is True


@pytest.mark.redis
async def test_tokens_are_compared_in_constant_time(
    served: tuple[AdminServer, Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, http = served
    seen: list[tuple[bytes, bytes]] = []
    compare: Callable[[bytes, bytes], bool] = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        seen.append((a, b))
        return compare(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    assert (await http.get("/live", headers={"Authorization": "Bearer guess"})).status == 401
    assert (await http.get("/live", headers=BEARER)).status == 200
    assert (b"guess", TOKEN.encode()) in seen and (TOKEN.encode(), TOKEN.encode()) in seen
