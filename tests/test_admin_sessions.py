"""Dashboard sessions ended before their time, over real HTTP (aiohttp's test server; two
servers over one store stand for two processes of a deployment) and the store (embedded and
real Redis): a logout refuses a copied cookie everywhere for the rest of its life, and a change
of ``CHORUS_ADMIN_TOKEN`` refuses every session issued before it, in the processes still
running the old token too; a restart with the same token logs nobody out."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from bot.admin.auth import COOKIE, SESSION_SECONDS
from bot.admin.server import AdminServer
from bot.admin.views import Sources
from bot.memory.buffers import MemoryStore
from bot.safety.audit import Audit
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
OTHER_TOKEN = "another-admin-token-9876543210"


@asynccontextmanager
async def process(redis: Redis, namespace: str, token: str = TOKEN) -> AsyncIterator[Client]:
    """One process's dashboard, started (its startup hooks run) over the shared store."""
    sources = Sources(
        settings=Settings(),
        redis=redis,
        memory=MemoryStore(redis),
        history=HistoryStore(redis, max_messages=20, ttl_seconds=3600),
        audit=Audit(redis, namespace=namespace),
    )
    async with TestClient(TestServer(AdminServer(sources, token).app())) as http:
        yield http


async def log_in(http: Client, token: str = TOKEN) -> tuple[str, str]:
    """Log in: the session cookie and the page's CSRF token."""
    form = {"token": token, "csrf": await login_csrf(http)}
    response = await http.post("/login", data=form, allow_redirects=False)
    assert response.status == 303
    cookie = response.cookies[COOKIE].value
    page = await (await http.get("/settings")).text()
    found = re.search(r'name="csrf" value="([\w-]+)"', page)
    assert found is not None
    return cookie, found.group(1)


async def status(http: Client, cookie: str, path: str = "/") -> int:
    """What a request carrying only ``cookie`` (a copy of it, from anywhere) gets."""
    response = await http.get(path, cookies={COOKIE: cookie}, allow_redirects=False)
    return response.status


@pytest.mark.redis
async def test_logout_ends_a_copied_session_in_every_process(
    redis_client: Redis, key_tag: str
) -> None:
    async with (
        process(redis_client, key_tag) as first,
        process(redis_client, key_tag) as second,
        process(redis_client, key_tag) as thief,
    ):
        cookie, csrf = await log_in(first)
        assert await status(thief, cookie) == 200  # a copy works anywhere while logged in
        out = await first.post("/logout", data={"csrf": csrf}, allow_redirects=False)
        assert out.status == 303 and out.headers["Location"] == "/login"
        for http in (first, second, thief):
            assert await status(http, cookie) == 303, "a logged-out session still works"
            changed = await http.post(
                "/settings/reload", data={"csrf": csrf}, cookies={COOKIE: cookie}
            )
            assert changed.status == 401
        [revoked] = [k async for k in redis_client.scan_iter(keys.admin_revoked("*", key_tag))]
        ttl = await redis_client.ttl(revoked)
        assert SESSION_SECONDS - 60 <= ttl <= SESSION_SECONDS  # the session's remaining life
        again, _ = await log_in(first)  # a new login is a new session
        assert again != cookie and await status(second, again) == 200


@pytest.mark.redis
async def test_a_new_token_ends_every_session_issued_before_it_in_every_process(
    redis_client: Redis, key_tag: str
) -> None:
    async with AsyncExitStack() as stack:
        old = await stack.enter_async_context(process(redis_client, key_tag))
        before, _ = await log_in(old)
        assert await status(old, before) == 200
        # Another process starts with a new token: the old one's sessions end, even in the
        # process still running the old token (which could check their signature alone).
        new = await stack.enter_async_context(process(redis_client, key_tag, OTHER_TOKEN))
        assert await status(old, before) == 303 and await status(new, before) == 303
        after, _ = await log_in(new, OTHER_TOKEN)
        assert await status(new, after) == 200
        # And back to the first token (a rollback): what was issued before is still refused,
        # though that token signed it.
        back = await stack.enter_async_context(process(redis_client, key_tag))
        assert await status(back, before) == 303 and await status(old, before) == 303
        fresh, _ = await log_in(back)
        assert await status(back, fresh) == 200 and await status(old, fresh) == 200


@pytest.mark.redis
async def test_a_restart_with_the_same_token_logs_nobody_out(
    redis_client: Redis, key_tag: str
) -> None:
    async with process(redis_client, key_tag) as first:
        cookie, _ = await log_in(first)
    async with process(redis_client, key_tag) as restarted:
        assert await status(restarted, cookie) == 200
    record = keys.admin_token(key_tag)
    assert 0 < await redis_client.ttl(record) <= SESSION_SECONDS  # lives as long as a session


@pytest.mark.redis
async def test_each_login_is_a_new_signed_session_and_a_forged_one_is_refused(
    redis_client: Redis, key_tag: str
) -> None:
    async with process(redis_client, key_tag) as http:
        first, _ = await log_in(http)
        second, _ = await log_in(http)
        assert first.split(".")[0] != second.split(".")[0]  # renewed at each login
        sid, expires, signature = second.split(".")
        for forged in (
            f"{sid}.{int(expires) + 10**9}.{signature}",  # a longer life
            f"x{sid}.{expires}.{signature}",  # another id
            f"{sid}.{expires}",  # unsigned
            f"{sid}.{expires}.{signature[:-2]}AA",
        ):
            assert await status(http, forged) == 303, forged
        assert await status(http, second) == 200
