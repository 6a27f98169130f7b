"""The dashboard's login limit under attack, over real HTTP (aiohttp's test server) and the
store (embedded and real Redis): concurrent wrong Bearer tokens are each reserved before the
compare, the limit counts per real client behind a trusted proxy (``CHORUS_ADMIN_TRUST_PROXY``)
and per peer otherwise, whatever ``X-Forwarded-For`` says, and a right token clears its own
address's failures."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from bot.admin.auth import COOKIE
from bot.admin.login import LOGIN_COOKIE, LOGIN_FAILURES
from bot.admin.server import AdminServer
from bot.admin.views import Sources
from bot.memory.buffers import MemoryStore
from bot.safety.audit import Audit, read_audit
from bot.settings import load_settings
from bot.state import keys
from bot.state.history import HistoryStore
from tests.test_admin import TOKEN, login_csrf

Client = TestClient[web.Request, web.Application]
PEER = "127.0.0.1"  # where aiohttp's test client connects from
ATTACKER, HOLDER = "203.0.113.7", "198.51.100.7"  # documentation addresses (RFC 5737)
GUESSES = 30


@asynccontextmanager
async def dashboard(
    redis: Redis, namespace: str, trust_proxy: str = ""
) -> AsyncIterator[tuple[AdminServer, Client, list[str]]]:
    """A dashboard from its settings (``CHORUS_ADMIN_TRUST_PROXY=trust_proxy``), its client,
    and the list of every token it compares (the compares counted where they happen)."""
    env = {"CHORUS_ADMIN_PORT": "1", "CHORUS_ADMIN_TOKEN": TOKEN}
    if trust_proxy:
        env["CHORUS_ADMIN_TRUST_PROXY"] = trust_proxy
    settings = load_settings(environ=env, env_file=None, config=False, warn=False)
    sources = Sources(
        settings=settings,
        redis=redis,
        memory=MemoryStore(redis),
        history=HistoryStore(redis, max_messages=20, ttl_seconds=3600),
        audit=Audit(redis, namespace=namespace),
    )
    server = AdminServer.from_settings(settings.admin, sources)
    assert server is not None
    compared: list[str] = []
    token_ok = server.auth.token_ok

    def counted(given: str) -> bool:
        compared.append(given)
        return token_ok(given)

    server.auth.token_ok = counted  # type: ignore[method-assign]
    async with TestClient(TestServer(server.app())) as http:
        yield server, http, compared


def bearer(token: str, client: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}"}
    return headers | ({"X-Forwarded-For": client} if client else {})


async def guesses(http: Client, client: str | None = None) -> Counter[int]:
    """``GUESSES`` wrong Bearer tokens at once; how many got each status."""
    responses = await asyncio.gather(
        *(http.get("/live", headers=bearer(f"guess-{n}", client)) for n in range(GUESSES))
    )
    return Counter(r.status for r in responses)


@pytest.mark.redis
async def test_concurrent_wrong_bearer_tokens_are_compared_at_most_the_limit(
    redis_client: Redis, key_tag: str
) -> None:
    async with dashboard(redis_client, key_tag) as (server, http, compared):
        statuses = await guesses(http)
        assert len(compared) <= LOGIN_FAILURES, f"{len(compared)} compares, limit {LOGIN_FAILURES}"
        assert statuses == {401: len(compared), 429: GUESSES - len(compared)}
        failures = keys.admin_login_failures(PEER, key_tag)
        assert await redis_client.zcard(failures) == len(compared)  # refused ones taken back
        # The holder of the right token at the blocked address: refused like anyone (the
        # limit is no oracle) and not compared, until a slot frees; then it gets in.
        before = len(compared)
        refused = await http.get("/live", headers=bearer(TOKEN))
        assert refused.status == 429 and len(compared) == before
        server.guard.clock = lambda: time.time() + 301
        assert (await http.get("/live", headers=bearer(TOKEN))).status == 200


@pytest.mark.redis
async def test_a_right_bearer_token_clears_its_own_addresses_failures(
    redis_client: Redis, key_tag: str
) -> None:
    """A locked-out address is never locked out for good: the right token, once compared,
    starts the address afresh (as a right login always did)."""
    async with dashboard(redis_client, key_tag) as (_, http, _compared):
        for _ in range(2):
            for n in range(LOGIN_FAILURES - 1):
                assert (await http.get("/live", headers=bearer(f"guess-{n}"))).status == 401
            assert (await http.get("/live", headers=bearer(TOKEN))).status == 200
            assert await redis_client.exists(keys.admin_login_failures(PEER, key_tag)) == 0


@pytest.mark.redis
async def test_concurrent_right_tokens_are_at_worst_told_to_retry_in_a_second(
    redis_client: Redis, key_tag: str
) -> None:
    """Attempts being checked count against the limit (any may be wrong), so a script's burst
    of right-token requests beyond the limit may be refused; only until those are checked."""
    async with dashboard(redis_client, key_tag) as (_, http, _compared):
        burst = await asyncio.gather(*(http.get("/live", headers=bearer(TOKEN)) for _ in range(12)))
        assert {r.status for r in burst} <= {200, 429}
        assert all(r.headers["Retry-After"] == "1" for r in burst if r.status == 429)
        assert sum(r.status == 200 for r in burst) >= LOGIN_FAILURES
        assert (await http.get("/live", headers=bearer(TOKEN))).status == 200
        assert await redis_client.exists(keys.admin_login_failures(PEER, key_tag)) == 0


@pytest.mark.redis
async def test_behind_a_trusted_proxy_the_limit_counts_per_real_client(
    redis_client: Redis, key_tag: str
) -> None:
    """The proxy (this test's client, 127.0.0.1, listed) names each client: the attacker's
    guesses block the attacker only, and the holder of the right token gets in at once."""
    async with dashboard(redis_client, key_tag, trust_proxy=PEER) as (_, http, compared):
        statuses = await guesses(http, f"{ATTACKER}, {PEER}")  # a hop list ending in the proxy
        assert len(compared) == LOGIN_FAILURES and statuses[429] == GUESSES - LOGIN_FAILURES
        assert (await http.get("/live", headers=bearer(TOKEN, ATTACKER))).status == 429
        assert (await http.get("/live", headers=bearer(TOKEN, HOLDER))).status == 200
        form = {"token": TOKEN, "csrf": await login_csrf(http)}
        login = await http.post(
            "/login", data=form, headers={"X-Forwarded-For": HOLDER}, allow_redirects=False
        )
        assert login.status == 303 and COOKIE in login.cookies
        assert await redis_client.zcard(keys.admin_login_failures(ATTACKER, key_tag)) == 5
        assert await redis_client.exists(keys.admin_login_failures(PEER, key_tag)) == 0
        entries = await read_audit(redis_client, namespace=key_tag)
        assert {e.user_name for e in entries} == {f"address:{ATTACKER}"}


@pytest.mark.redis
@pytest.mark.parametrize("trust_proxy", ["", "10.0.0.0/8, 192.168.1.1"])
async def test_forwarded_headers_from_an_unlisted_peer_are_ignored(
    redis_client: Redis, key_tag: str, trust_proxy: str
) -> None:
    """A spoofed ``X-Forwarded-For`` (a fresh address per guess) from a peer that is not a
    listed proxy changes nothing: the peer is the client, and its limit holds."""
    async with dashboard(redis_client, key_tag, trust_proxy=trust_proxy) as (_, http, compared):
        responses = await asyncio.gather(
            *(
                http.get("/live", headers=bearer(f"guess-{n}", f"192.0.2.{n}"))
                for n in range(GUESSES)
            )
        )
        assert Counter(r.status for r in responses)[401] == len(compared) == LOGIN_FAILURES
        entries = await read_audit(redis_client, namespace=key_tag)
        assert {e.user_name for e in entries} == {f"address:{PEER}"}
        # nor does a spoofed X-Forwarded-Proto make the cookies Secure (login over plain HTTP)
        page = await http.get("/login", headers={"X-Forwarded-Proto": "https"})
        assert "Secure" not in page.headers["Set-Cookie"]


@pytest.mark.redis
async def test_over_https_at_a_trusted_proxy_the_cookies_are_secure(
    redis_client: Redis, key_tag: str
) -> None:
    async with dashboard(redis_client, key_tag, trust_proxy="127.0.0.0/8") as (_, http, _c):
        https = {"X-Forwarded-For": HOLDER, "X-Forwarded-Proto": "https"}
        page = await http.get("/login", headers=https)
        assert page.headers["Set-Cookie"].startswith(LOGIN_COOKIE)
        assert "Secure" in page.headers["Set-Cookie"]
        form = {"token": TOKEN, "csrf": await login_csrf(http)}
        login = await http.post("/login", data=form, headers=https, allow_redirects=False)
        cookie = login.headers["Set-Cookie"]
        assert cookie.startswith(COOKIE) and "Secure" in cookie and "HttpOnly" in cookie
        http.session.cookie_jar.clear()
        plain = await http.get("/login", headers={"X-Forwarded-Proto": "http"})
        assert "Secure" not in plain.headers["Set-Cookie"]


def test_the_trusted_proxies_setting_takes_addresses_and_networks_only() -> None:
    from bot.settings import ConfigError

    env = {"CHORUS_ADMIN_TRUST_PROXY": "127.0.0.1, 10.0.0.0/8,::1"}
    settings = load_settings(environ=env, env_file=None, config=False, warn=False)
    assert settings.admin.trust_proxy == ("127.0.0.1/32", "10.0.0.0/8", "::1/128")
    assert load_settings(environ={}, env_file=None, config=False).admin.trust_proxy == ()
    with pytest.raises(ConfigError, match=r"CHORUS_ADMIN_TRUST_PROXY.*'proxy\.local' is not"):
        load_settings(environ={"CHORUS_ADMIN_TRUST_PROXY": "proxy.local"}, env_file=None)
