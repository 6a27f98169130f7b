"""The dashboard's login limit under attack, over real HTTP (aiohttp's test server) and the
store (embedded and real Redis): concurrent wrong Bearer tokens are each reserved before the
compare, and a right token clears its own address's failures."""

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

from bot.admin.login import LOGIN_FAILURES
from bot.admin.server import AdminServer
from bot.admin.views import Sources
from bot.memory.buffers import MemoryStore
from bot.safety.audit import Audit
from bot.settings import load_settings
from bot.state import keys
from bot.state.history import HistoryStore
from tests.test_admin import TOKEN

Client = TestClient[web.Request, web.Application]
PEER = "127.0.0.1"  # where aiohttp's test client connects from
GUESSES = 30


@asynccontextmanager
async def dashboard(
    redis: Redis, namespace: str
) -> AsyncIterator[tuple[AdminServer, Client, list[str]]]:
    """A dashboard from its settings, its client, and the list of every token it compares (the
    compares counted where they happen)."""
    env = {"CHORUS_ADMIN_PORT": "1", "CHORUS_ADMIN_TOKEN": TOKEN}
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
