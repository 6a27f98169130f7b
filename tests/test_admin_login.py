"""The dashboard's login form over aiohttp's test client and the store (embedded and real
Redis): its pre-session CSRF token (double submit, signed cookie) and the per-address rate
limit, shared by every process serving the dashboard, with its 429 page and audit entries."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from bot.admin.auth import COOKIE, Auth
from bot.admin.login import LOGIN_COOKIE, LoginGuard
from bot.admin.server import AdminServer
from bot.admin.views import Sources
from bot.memory.buffers import MemoryStore
from bot.safety.audit import Audit, read_audit
from bot.settings import Settings
from bot.state import keys
from bot.state.history import HistoryStore
from tests.redis_cluster import WITH_CLUSTER, store_url
from tests.test_admin import TOKEN, login_csrf


@pytest.fixture(params=WITH_CLUSTER)
def redis_url(request: pytest.FixtureRequest, key_tag: str) -> Iterator[str]:
    """The stores, and a Redis Cluster of three primaries (``tests/redis_cluster.py``)."""
    yield from store_url(request, key_tag)


Client = TestClient[web.Request, web.Application]
ADDRESS = "127.0.0.1"  # where aiohttp's test client connects from


@asynccontextmanager
async def dashboard(redis: Redis, namespace: str) -> AsyncIterator[tuple[AdminServer, Client]]:
    """One process's dashboard (a second call: another process over the same Redis)."""
    sources = Sources(
        settings=Settings(),
        redis=redis,
        memory=MemoryStore(redis),
        history=HistoryStore(redis, max_messages=20, ttl_seconds=3600),
        audit=Audit(redis, namespace=namespace),
    )
    server = AdminServer(sources, TOKEN)
    async with TestClient(TestServer(server.app())) as http:
        yield server, http


async def attempt(http: Client, token: str) -> int:
    form = {"token": token, "csrf": await login_csrf(http)}
    return (await http.post("/login", data=form, allow_redirects=False)).status


@pytest.mark.redis
async def test_the_login_form_needs_its_csrf_token_and_cookie(
    redis_client: Redis, key_tag: str
) -> None:
    async with dashboard(redis_client, key_tag) as (_, http):
        page = await http.get("/login")
        cookie = page.headers["Set-Cookie"]
        assert cookie.startswith(f"{LOGIN_COOKIE}=") and "HttpOnly" in cookie
        assert "SameSite=Strict" in cookie and "Path=/login" in cookie
        nonce = re.search(r'name="csrf" value="([^"]+)"', await page.text())
        assert nonce is not None and nonce.group(1) in cookie
        for form in ({"token": TOKEN}, {"token": TOKEN, "csrf": "forged"}):
            refused = await http.post("/login", data=form, allow_redirects=False)
            assert refused.status == 403 and COOKIE not in refused.cookies
            assert "expired or came from elsewhere" in await refused.text()
        # A cookie the server did not sign (planted by a sibling site) is no token either.
        http.session.cookie_jar.clear()
        http.session.cookie_jar.update_cookies({LOGIN_COOKIE: "planted.0000"})
        planted = await http.post("/login", data={"token": TOKEN, "csrf": "planted"})
        assert planted.status == 403
        # None of the refusals counted as a failed login.
        assert await redis_client.exists(keys.admin_login_failures(ADDRESS, key_tag)) == 0
        assert await attempt(http, TOKEN) == 303


@pytest.mark.redis
async def test_five_failures_block_the_address_with_a_429_that_says_when(
    redis_client: Redis, key_tag: str
) -> None:
    async with dashboard(redis_client, key_tag) as (server, http):
        for n in range(5):
            assert await attempt(http, f"guess-{key_tag}-{n}") == 401
        form = {"token": TOKEN, "csrf": await login_csrf(http)}
        elsewhere = {"X-Forwarded-For": "203.0.113.9"}  # anyone can send it: not trusted
        blocked = await http.post("/login", data=form, headers=elsewhere, allow_redirects=False)
        assert blocked.status == 429 and COOKIE not in blocked.cookies  # even the right token
        retry = int(blocked.headers["Retry-After"])
        assert 290 <= retry <= 300
        text = await blocked.text()
        assert "Too many failed logins" in text and f"Try again in {retry} seconds" in text
        failures = keys.admin_login_failures(ADDRESS, key_tag)
        assert await redis_client.zcard(failures) == 5  # the refused attempt was taken back
        entries = await read_audit(redis_client, namespace=key_tag)
        assert [(e.direction, e.rule, e.action, e.user_name) for e in entries] == [
            ("admin", "admin:login", action, f"address:{ADDRESS}")
            for action in ("failed", "failed", "failed", "failed", "blocked")
        ]
        assert "guess-" not in repr(entries)  # never what was typed
        # Once the oldest failure ages out, one more try is allowed; the right token clears all.
        server.guard.clock = lambda: _later(retry)
        assert await attempt(http, TOKEN) == 303
        assert await redis_client.exists(failures) == 0


@pytest.mark.redis
async def test_every_process_serving_the_dashboard_counts_the_same_failures(
    redis_client: Redis, key_tag: str
) -> None:
    async with (
        dashboard(redis_client, key_tag) as (_, first),
        dashboard(redis_client, key_tag) as (_, second),
    ):
        for n in range(3):
            assert await attempt(first, f"guess-{n}") == 401
        for n in range(2):
            assert await attempt(second, f"guess-{n}") == 401
        assert await attempt(first, TOKEN) == 429
        assert await attempt(second, TOKEN) == 429


@pytest.mark.redis
async def test_a_right_token_clears_earlier_failures(redis_client: Redis, key_tag: str) -> None:
    async with dashboard(redis_client, key_tag) as (_, http):
        for n in range(4):
            assert await attempt(http, f"guess-{n}") == 401
        assert await attempt(http, TOKEN) == 303
        for n in range(4):  # a fresh allowance
            assert await attempt(http, f"guess-{n}") == 401


@pytest.mark.redis
async def test_the_retry_time_is_when_enough_failures_have_aged_out(
    redis_client: Redis, key_tag: str
) -> None:
    now = [1000.0]
    guard = LoginGuard(Auth(TOKEN), redis_client, namespace=key_tag, clock=clock(now))
    for at in (1000.0, 1010.0, 1020.0, 1030.0, 1040.0):
        now[0] = at
        attempt_id, _ = await guard.attempt(ADDRESS)  # five failures: the limit
        assert attempt_id
    now[0] = 1100.0
    assert await guard.attempt(ADDRESS) == ("", 1000 + 300 - 1100)  # the oldest must age out
    now[0] = 1301.0
    attempt_id, retry = await guard.attempt(ADDRESS)
    assert attempt_id and retry == 0
    assert await guard.failed(ADDRESS, attempt_id)  # a failure: the address is back at the limit
    now[0] = 1302.0
    assert await guard.attempt(ADDRESS) == ("", 1010 + 300 - 1302)


def clock(now: list[float]) -> Callable[[], float]:
    return lambda: now[0]


def _later(seconds: int) -> float:
    import time

    return time.time() + seconds + 1


@pytest.mark.redis
async def test_wrong_bearer_tokens_count_as_failed_logins_too(
    redis_client: Redis, key_tag: str
) -> None:
    """A script cannot guess around the login's limit, and a blocked address learns nothing:
    the right token is refused as well until the window passes."""
    async with dashboard(redis_client, key_tag) as (server, http):
        for n in range(3):
            wrong = await http.get("/live", headers={"Authorization": f"Bearer guess-{n}"})
            assert wrong.status == 401
        for n in range(2):
            assert await attempt(http, f"guess-{n}") == 401  # the form counts with the scripts
        right = await http.get("/live", headers={"Authorization": f"Bearer {TOKEN}"})
        assert right.status == 429 and 1 <= int(right.headers["Retry-After"]) <= 300
        assert await attempt(http, TOKEN) == 429
        entries = await read_audit(redis_client, namespace=key_tag)
        assert [e.action for e in entries if e.rule == "admin:login"][-1] == "blocked"
        server.guard.clock = lambda: _later(300)
        assert (await http.get("/live", headers={"Authorization": f"Bearer {TOKEN}"})).status == 200
