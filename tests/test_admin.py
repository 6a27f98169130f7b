"""The admin dashboard over aiohttp's test client and the store (embedded and real Redis): the
login, Bearer tokens, CSRF, the refusal to start without a token, every page, secrets never
rendered, and each change (entry delete and edit, pause) reaching Redis and the audit trail."""

from __future__ import annotations

import asyncio
import re
import signal
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from bot.admin.auth import Auth
from bot.admin.server import AdminServer
from bot.admin.views import Sources
from bot.events import ConversationKey
from bot.memory.buffers import MemoryStore, Pin, UserBuffer, source_ref
from bot.memory.entries import StaleEntry, delete_entry, edit_entry
from bot.router import memory_commands
from bot.router.text_commands import Commands
from bot.safety.audit import Audit, read_audit
from bot.settings import ConfigError, Settings, load_settings, settings_from
from bot.state import keys, turnlog
from bot.state.cost import CostLedger, micro
from bot.state.history import HistoryEntry, HistoryStore
from tests.redis_server import free_port
from tests.test_chat_e2e import base_env, run_chorus, spawn_chorus

Client = TestClient[web.Request, web.Application]
TOKEN = "admin-token-0123456789abcdef"
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def pin(text: str) -> Pin:
    return Pin(text=text, source="m1", confidence=0.8, created_at=NOW, updated_at=NOW)


@pytest.fixture
async def client(redis_client: Redis, key_tag: str) -> AsyncIterator[Client]:
    settings = Settings()
    memory = MemoryStore(redis_client)
    history = HistoryStore(redis_client, max_messages=20, ttl_seconds=3600)
    commands = Commands(history)
    memory_commands.register(commands, memory, history)
    sources = Sources(
        settings=settings,
        redis=redis_client,
        memory=memory,
        history=history,
        audit=Audit(redis_client, namespace=key_tag),
        commands=commands,
    )
    server = AdminServer(sources, TOKEN)
    async with TestClient(TestServer(server.app())) as http:
        yield http


async def login_csrf(http: Client) -> str:
    """The login form's pre-session CSRF token (its cookie is now in the client's jar)."""
    page = await (await http.get("/login")).text()
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None
    return found.group(1)


async def login(http: Client) -> str:
    """Log in; the CSRF token of the session."""
    form = {"token": TOKEN, "csrf": await login_csrf(http)}
    response = await http.post("/login", data=form, allow_redirects=False)
    assert response.status == 303
    page = await (await http.get("/settings")).text()
    found = re.search(r'name="csrf" value="([\w-]+)"', page)
    assert found is not None
    return found.group(1)


@pytest.mark.redis
async def test_pages_need_a_login_and_the_cookie_is_httponly_strict(
    client: Client,
) -> None:
    response = await client.get("/", allow_redirects=False)
    assert response.status == 303 and response.headers["Location"] == "/login"
    csrf = await login_csrf(client)
    wrong = await client.post("/login", data={"token": "nope", "csrf": csrf})
    assert wrong.status == 401
    form = {"token": TOKEN, "csrf": csrf}
    right = await client.post("/login", data=form, allow_redirects=False)
    cookie = right.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie
    home = await client.get("/")
    assert home.status == 200 and "Overview" in await home.text()
    assert home.headers["Content-Security-Policy"].startswith("default-src 'self'")
    assert home.headers["Cache-Control"] == "no-store"


def test_a_session_lasts_12_hours_and_a_new_token_ends_every_session() -> None:
    auth = Auth(TOKEN)
    cookie = auth.new_session(now=1000.0)
    assert auth.session_id(cookie, now=1000.0 + 12 * 3600 - 1) is not None
    assert auth.session_id(cookie, now=1000.0 + 12 * 3600 + 1) is None
    assert Auth(TOKEN + "x").session_id(cookie, now=1000.0) is None
    sid, expires, _ = cookie.split(".")
    assert auth.session_id(f"{sid}.{int(expires) + 999}.{cookie.split('.')[2]}", now=0) is None


def test_each_signature_serves_one_purpose_only() -> None:
    auth = Auth(TOKEN)
    sid = auth.session_id(auth.new_session(now=1000.0), now=1000.0)
    assert sid is not None and auth.csrf_ok(sid, auth.csrf_for(sid))
    assert not auth.csrf_ok("another-session", auth.csrf_for(sid))
    assert not auth.csrf_ok(sid, "né") and not auth.csrf_ok(sid, "")  # no error, just no
    # a CSRF token or a login form's cookie, though signed with the same token, is no session
    assert auth.session_id(f"{sid}.99999999999.{auth.csrf_for(sid)}", now=1000.0) is None
    login_cookie = auth.signer("login-csrf").sign(f"{sid}.99999999999").decode()
    assert auth.session_id(login_cookie, now=1000.0) is None


@pytest.mark.redis
async def test_bearer_tokens_work_for_scripts_and_wrong_ones_are_refused(
    client: Client,
) -> None:
    ok = await client.get("/live", headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status == 200
    bad = await client.get("/live", headers={"Authorization": "Bearer guess"})
    assert bad.status == 401


@pytest.mark.redis
async def test_a_change_without_the_csrf_token_is_refused(
    client: Client, redis_client: Redis, key_tag: str
) -> None:
    csrf = await login(client)
    conv = ConversationKey(platform="twitch", channel=f"chan{key_tag}")
    refused = await client.post(f"/live/{conv}/pause", data={"paused": "1"})
    assert refused.status == 403
    forged = await client.post(f"/live/{conv}/pause", data={"paused": "1", "csrf": "0" * 64})
    assert forged.status == 403
    assert await redis_client.exists(keys.live("chan", conv)) == 0
    done = await client.post(
        f"/live/{conv}/pause", data={"paused": "1", "csrf": csrf}, allow_redirects=False
    )
    assert done.status == 303
    found = await redis_client.zrange(keys.live("chan", conv), 0, -1, withscores=True)
    marks = {str(row[0]) for row in found}
    assert "paused" in marks and "resumed" not in marks
    audit = await read_audit(redis_client, namespace=key_tag)
    assert [(e.direction, e.rule, e.action) for e in audit] == [("admin", "live:pause", "paused")]


@pytest.mark.redis
async def test_every_page_renders_with_data_and_no_secret(
    client: Client, redis_client: Redis, key_tag: str
) -> None:
    await login(client)
    conv = ConversationKey(platform="discord", channel=f"c{key_tag}")
    record = turnlog.TurnRecord(
        at=time.time(), message_id="m1", user_id=f"u{key_tag}",
        user_name=f"Ada{key_tag}", decision="quiet", reason="paused",
    )  # fmt: skip
    async with redis_client.pipeline() as pipe:
        turnlog.queue_records(pipe, conv, [record])
        await pipe.execute()
    pages = {
        "/": "Model chain",
        "/conversations?platform=discord": conv.channel,
        f"/conversations/{conv}": "paused",
        f"/people?q=ada{key_tag}&platform=discord": f"u{key_tag}",  # other tests' Adas too
        f"/people/discord/u{key_tag}": "No pins.",
        "/live": "Live channels",
        "/insights": "Next jobs",
        "/settings?scope=discord:1/2": "matching scopes",
    }
    for path, needle in pages.items():
        response = await client.get(path)
        assert response.status == 200, path
        assert needle in await response.text(), path
    await redis_client.zrem(keys.recent_conversations("discord"), str(conv))
    async with redis_client.pipeline() as pipe:
        turnlog.forget_names(pipe, "discord", f"u{key_tag}", [f"Ada{key_tag}"])
        await pipe.execute()


async def test_the_settings_page_masks_every_secret(
    monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-verysecretvalue-1234")
    monkeypatch.setenv("CHORUS_ADMIN_PORT", "1")
    monkeypatch.setenv("CHORUS_ADMIN_TOKEN", TOKEN)
    settings = load_settings()
    from bot.state import connect

    redis = await connect.open_redis(redis_url)
    sources = Sources(
        settings=settings,
        redis=redis,
        memory=MemoryStore(redis),
        history=HistoryStore(redis, max_messages=20, ttl_seconds=3600),
        audit=Audit(None),
    )
    async with TestClient(TestServer(AdminServer(sources, TOKEN).app())) as http:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        page = await (await http.get("/settings?scope=discord:1/2", headers=headers)).text()
    await redis.aclose()
    assert "llm.anthropic_api_key" in page and "set, hidden" in page
    assert "verysecret" not in page and "1234" not in page and TOKEN not in page


@pytest.mark.redis
async def test_a_pin_is_deleted_and_edited_by_position_and_a_stale_page_changes_nothing(
    client: Client, redis_client: Redis, key_tag: str
) -> None:
    csrf = await login(client)
    user = f"u{key_tag}"
    memory = MemoryStore(redis_client)
    await memory.save(UserBuffer(platform="twitch", user_id=user, pins=(pin("a"), pin("b"))))
    base = f"/people/twitch/{user}/entry"
    stale = {"csrf": csrf, "kind": "pin", "index": "0", "seen": "b", "action": "delete"}
    response = await client.post(base, data=stale)
    assert "Nothing changed" in await response.text()
    assert [p.text for p in (await memory.load("twitch", user)).pins] == ["a", "b"]
    await client.post(base, data=stale | {"seen": "a"})
    assert [p.text for p in (await memory.load("twitch", user)).pins] == ["b"]
    await client.post(base, data=stale | {"seen": "b", "action": "edit", "text": "  c\u202e "})
    edited = (await memory.load("twitch", user)).pins
    assert [(p.text, p.confidence) for p in edited] == [("c", 1.0)]
    audit = await read_audit(redis_client, namespace=key_tag)
    assert [e.action for e in audit] == ["deleted", "edited"]


@pytest.mark.redis
async def test_forget_goes_through_the_forget_command(
    client: Client, redis_client: Redis, key_tag: str
) -> None:
    csrf = await login(client)
    user = f"u{key_tag}"
    memory = MemoryStore(redis_client)
    await memory.save(UserBuffer(platform="slack", user_id=user, pins=(pin("a"),)))
    async with redis_client.pipeline(transaction=False) as pipe:  # known by two names over time
        turnlog.queue_names(pipe, "slack", [(user, f"Old{key_tag}"), (user, f"New{key_tag}")])
        await pipe.execute()
    assert await turnlog.find_people(redis_client, f"old{key_tag}") != []
    response = await client.post(f"/people/slack/{user}/forget", data={"csrf": csrf})
    assert "1 note" in await response.text()
    assert (await memory.load("slack", user)).is_empty
    assert await redis_client.exists(keys.forgotten("slack", user)) == 1  # the tombstone
    for name in (f"old{key_tag}", f"new{key_tag}", user):
        assert await turnlog.find_people(redis_client, name) == [], f"{name} is forgotten too"
    assert await redis_client.exists(keys.user("slack", user, "names")) == 0


def test_the_pure_entry_edits_refuse_stale_and_bad_input() -> None:
    buffer = UserBuffer(platform="p", user_id="u", pins=(pin("a"),))
    with pytest.raises(StaleEntry):
        delete_entry(buffer, "pin", 3, "a")
    with pytest.raises(ValueError, match="at most 64"):
        edit_entry(buffer, "pin", 0, "a", "x" * 65, NOW)
    with pytest.raises(ValueError, match="empty"):
        edit_entry(buffer, "pin", 0, "a", "\u200b ", NOW)


@pytest.mark.parametrize("host", ["0.0.0.0", "127.0.0.1"])
def test_no_token_no_dashboard_with_a_message_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, host: str
) -> None:
    monkeypatch.setenv("CHORUS_ADMIN_PORT", "8090")
    monkeypatch.setenv("CHORUS_ADMIN_HOST", host)
    monkeypatch.delenv("CHORUS_ADMIN_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="CHORUS_ADMIN_TOKEN is required") as caught:
        load_settings()
    assert ("non-loopback" in str(caught.value)) == (host == "0.0.0.0")


@pytest.mark.redis
async def test_a_pin_shows_the_line_it_came_from(
    client: Client, redis_client: Redis, key_tag: str
) -> None:
    await login(client)
    user, conv = f"u{key_tag}", ConversationKey(platform="discord", channel=f"c{key_tag}")
    history = HistoryStore(redis_client, max_messages=20, ttl_seconds=3600)
    said = HistoryEntry(
        role="user", text="I play the cello every day", message_id=f"src-{key_tag}",
        author_id=user, author_name="Ada", at=NOW,
    )  # fmt: skip
    await history.append(conv, said)
    memory = MemoryStore(redis_client)
    learnt = Pin(
        text="plays the cello", source=source_ref(f"src-{key_tag}"), confidence=0.7,
        created_at=NOW, updated_at=NOW,
    )  # fmt: skip
    await memory.save(UserBuffer(platform="discord", user_id=user, pins=(learnt, pin("other"))))
    await memory.touch("discord", user, conv)
    async with redis_client.pipeline() as pipe:  # the name the search found them by
        turnlog.queue_names(pipe, "discord", [(user, "Ada")])
        await pipe.execute()
    page = await (await client.get(f"/people/discord/{user}?name=Ada")).text()
    assert "“I play the cello every day”" in page and "0.70" in page
    assert "message m1 (no longer in the history)" in page  # the other pin's source is gone
    assert "<h1>Ada" in page
    async with redis_client.pipeline() as pipe:
        turnlog.forget_names(pipe, "discord", user, ["Ada"])
        await pipe.execute()


@pytest.mark.e2e
async def test_chorus_insights_serves_the_dashboard_too(
    tmp_path: Path, real_redis_url: str
) -> None:
    """Any role serves it: here ``chorus insights`` (a real process), behind the token."""
    port = free_port()
    env = base_env(tmp_path) | {
        "CHORUS_REDIS_URL": real_redis_url,
        "CHORUS_MODEL": "anthropic:claude-test",
        "ANTHROPIC_API_KEY": "k",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",  # never called: no job is due
        "CHORUS_ADMIN_PORT": str(port),
        "CHORUS_ADMIN_TOKEN": TOKEN,
    }
    proc = await spawn_chorus(["insights"], env, tmp_path)
    try:
        async with aiohttp.ClientSession() as http, asyncio.timeout(60):
            while True:
                try:
                    async with http.get(f"http://127.0.0.1:{port}/insights") as page:
                        if page.status == 200:
                            assert page.url.path == "/login"  # no token, no page
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with http.get(f"http://127.0.0.1:{port}/insights", headers=headers) as page:
                assert page.status == 200 and "Next jobs" in await page.text()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert TOKEN not in err.decode()


@pytest.mark.e2e
async def test_chorus_run_refuses_an_open_dashboard_naming_the_variable(tmp_path: Path) -> None:
    env = base_env(tmp_path) | {"CHORUS_ADMIN_PORT": "8471", "CHORUS_ADMIN_HOST": "0.0.0.0"}
    code, out, err = await run_chorus(["run"], env, tmp_path)
    assert code != 0 and "CHORUS_ADMIN_TOKEN is required" in out + err
    assert "non-loopback" in out + err


async def test_without_jinja2_the_error_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, redis_client: Redis
) -> None:
    import sys

    from bot.admin.wiring import start_admin

    monkeypatch.setenv("CHORUS_ADMIN_PORT", "8472")
    monkeypatch.setenv("CHORUS_ADMIN_TOKEN", TOKEN)
    settings = load_settings()
    monkeypatch.delitem(sys.modules, "bot.admin.server")
    monkeypatch.setitem(sys.modules, "jinja2", None)
    with pytest.raises(ConfigError, match=r"pip install 'chorus-bot\[admin\]'"):
        await start_admin(settings, redis_client)


@pytest.mark.redis
async def test_the_overview_shows_the_cost_caps_spend_and_what_calls_in_flight_reserve(
    redis_client: Redis, key_tag: str
) -> None:
    """The daily cost cap counts every model call across workers (bot/state/cost.py): the
    overview reads the same ledger, so an operator sees the spend, the reservations of calls
    still running and the cap."""
    settings = settings_from(
        {"CHORUS_BUS_NAMESPACE": key_tag.lower(), "CHORUS_QUOTA_COST_USD_DAY": "2.5"}
    )
    ledger = CostLedger(redis_client, key_tag.lower())
    now = datetime.now(UTC)
    held = ledger.reservation(f"turn-{key_tag}", micro(0.25), now)
    assert await ledger.reserve(held, micro(2.5), now)
    history = HistoryStore(redis_client, max_messages=20, ttl_seconds=3600)
    sources = Sources(
        settings=settings,
        redis=redis_client,
        memory=MemoryStore(redis_client),
        history=history,
        audit=Audit(redis_client, namespace=key_tag),
        commands=Commands(history),
    )
    async with TestClient(TestServer(AdminServer(sources, TOKEN).app())) as http:
        page = await (await http.get("/", headers={"Authorization": f"Bearer {TOKEN}"})).text()
    assert "Cost cap today" in page
    assert "$0.2500 reserved by calls in flight" in page and "cap $2.50" in page
    await redis_client.delete(*ledger.keys(held.day))
