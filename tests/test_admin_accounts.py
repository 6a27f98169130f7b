"""Named dashboard accounts: created by a real ``chorus admin add-user`` (the password from
stdin, never argv) in a real Redis, logging in by name and password, and each role held to
what it may do: a viewer sees no save button and a forged save gets a 403 and an audit entry
naming the account; an operator pauses but cannot edit the configuration; an admin saves."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from bot.admin import accounts
from bot.admin.server import AdminServer
from bot.admin.views import Sources
from bot.memory.buffers import MemoryStore
from bot.safety.audit import Audit, read_audit
from bot.settings import load_settings
from bot.state import connect
from bot.state.admin_accounts import AccountRecords
from bot.state.history import HistoryStore
from tests.redis_cluster import WITH_CLUSTER, store_url
from tests.test_admin import TOKEN, login_csrf
from tests.test_admin_config import FILE, form_of, on_disk
from tests.test_chat_e2e import base_env, run_chorus


@pytest.fixture(params=WITH_CLUSTER)
def redis_url(request: pytest.FixtureRequest, key_tag: str) -> Iterator[str]:
    """The stores, and a Redis Cluster of three primaries (``tests/redis_cluster.py``)."""
    yield from store_url(request, key_tag)


# It starts processes (tests/suite_rules.py): `make test-fast` leaves it out.
pytestmark = pytest.mark.e2e

Client = TestClient[web.Request, web.Application]
PASSWORD = "correct horse battery"


@pytest.fixture
def toml(tmp_path: Path) -> Path:
    path = tmp_path / "chorus.toml"
    path.write_text(FILE, encoding="utf-8")
    return path


@pytest.fixture
async def http(redis_client: Redis, key_tag: str, toml: Path) -> AsyncIterator[Client]:
    settings = load_settings(environ={}, env_file=None, config=toml, warn=False)
    sources = Sources(
        settings=settings,
        redis=redis_client,
        memory=MemoryStore(redis_client),
        history=HistoryStore(redis_client, max_messages=20, ttl_seconds=3600),
        audit=Audit(redis_client, namespace=key_tag),
    )
    async with TestClient(TestServer(AdminServer(sources, TOKEN).app())) as client:
        yield client


async def account(redis: Redis, namespace: str, name: str, role: str) -> None:
    await AccountRecords(redis, namespace=namespace).put(
        name, role, accounts.hash_password(PASSWORD)
    )


async def log_in(http: Client, name: str, password: str = PASSWORD) -> int:
    form = {"name": name, "token": password, "csrf": await login_csrf(http)}
    return (await http.post("/login", data=form, allow_redirects=False)).status


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([\w-]+)"', page)
    assert found is not None
    return found[1]


async def test_a_viewer_has_no_save_button_and_a_forged_save_is_refused_and_audited(
    http: Client, redis_client: Redis, key_tag: str, toml: Path
) -> None:
    await account(redis_client, key_tag, "vera", "viewer")
    assert await log_in(http, "vera") == 303
    page = await (await http.get("/config")).text()
    assert 'id="review"' not in page and "vera (viewer)" in page
    assert "Reload the configuration file" not in await (await http.get("/settings")).text()
    form = form_of(page) | {"csrf": csrf_of(page), "scope.0.persona": "librarian"}
    forged = await http.post("/config", data={**form, "action": "save"}, allow_redirects=False)
    assert forged.status == 403 and on_disk(toml) == FILE
    refused = [e for e in await read_audit(redis_client, namespace=key_tag)]
    assert [(e.rule, e.action, e.user_name, e.conversation) for e in refused] == [
        ("admin:forbidden", "refused", "account:vera", "/config")
    ]


async def test_an_operator_pauses_but_cannot_edit_the_configuration(
    http: Client, redis_client: Redis, key_tag: str, toml: Path
) -> None:
    await account(redis_client, key_tag, "otto", "operator")
    assert await log_in(http, "otto") == 303
    page = await (await http.get("/config")).text()
    form = form_of(page) | {"csrf": csrf_of(page), "scope.0.persona": "librarian"}
    assert (await http.post("/config", data={**form, "action": "save"})).status == 403
    pause = await http.post(
        f"/live/twitch:c{key_tag}/pause",
        data={"csrf": csrf_of(page), "paused": "1"},
        allow_redirects=False,
    )
    assert pause.status == 303
    entries = await read_audit(redis_client, namespace=key_tag)
    assert ("live:pause", "account:otto") in {(e.rule, e.user_name) for e in entries}


async def test_an_admin_account_saves_and_the_audit_names_it(
    http: Client, redis_client: Redis, key_tag: str, toml: Path
) -> None:
    await account(redis_client, key_tag, "ada", "admin")
    assert await log_in(http, "ada", "wrong password!") == 401
    assert await log_in(http, "nobody") == 401
    assert await log_in(http, "ada") == 303
    page = await (await http.get("/config")).text()
    form = form_of(page) | {"csrf": csrf_of(page), "scope.0.persona": "librarian"}
    saved = await http.post("/config", data={**form, "action": "save"}, allow_redirects=False)
    assert saved.status == 303 and 'persona = "librarian"' in on_disk(toml)
    entries = await read_audit(redis_client, namespace=key_tag)
    assert [e.action for e in entries if e.rule == "admin:login"] == ["failed", "failed"]
    assert [e.user_name for e in entries if e.rule == "config:edit"] == ["account:ada"]
    await AccountRecords(redis_client, namespace=key_tag).remove("ada")
    gone = await http.get("/config", allow_redirects=False)
    assert gone.status == 303 and gone.headers["Location"] == "/login"


def test_a_password_hash_is_salted_and_checked() -> None:
    one, two = accounts.hash_password(PASSWORD), accounts.hash_password(PASSWORD)
    assert one != two and one.startswith("scrypt$") and PASSWORD not in one
    assert accounts.password_ok(PASSWORD, one) and accounts.password_ok(PASSWORD, two)
    assert not accounts.password_ok(PASSWORD + "!", one)
    assert not accounts.password_ok(PASSWORD, "scrypt$garbage")


async def test_chorus_admin_add_user_reads_the_password_from_stdin(
    tmp_path: Path, real_redis_url: str, key_tag: str
) -> None:
    env = base_env(tmp_path) | {"CHORUS_REDIS_URL": real_redis_url, "CHORUS_BUS_NAMESPACE": key_tag}
    code, out, err = await run_chorus(
        ["admin", "add-user", "grace", "--role", "operator"],
        env,
        tmp_path,
        (PASSWORD + "\n").encode(),
    )
    assert code == 0, err
    assert "grace (operator) saved" in out and PASSWORD not in out + err
    redis = await connect.open_redis(real_redis_url)
    records = AccountRecords(redis, namespace=key_tag)
    found = await records.get("grace")
    assert found is not None and found[0] == "operator"
    assert accounts.password_ok(PASSWORD, found[1])
    code, _, err = await run_chorus(
        ["admin", "add-user", "grace", "--role", "admin"], env, tmp_path, b"short\n"
    )
    assert code == 2 and "at least 12 characters" in err
    code, _, _ = await run_chorus(["admin", "remove-user", "grace"], env, tmp_path)
    try:
        assert code == 0 and await records.get("grace") is None
    finally:
        await redis.aclose()
