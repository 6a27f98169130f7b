"""The live channels page's Twitch join form (conduit transport), over aiohttp's test client and
the store (embedded and real Redis): a join or leave is what ``chorus twitch join/leave``
records, a bad name or the websocket transport changes nothing and says why, and only an
operator may do it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from bot.admin.server import AdminServer
from bot.settings import load_settings
from bot.state import keys
from bot.state.conduits import RedisConduitStore
from tests.test_admin import TOKEN, login
from tests.test_admin_live import sources

Client = TestClient[web.Request, web.Application]


def _env(key_tag: str, transport: str) -> dict[str, str]:
    return {
        "TWITCH_CLIENT_ID": f"app-{key_tag}",
        "TWITCH_CLIENT_SECRET": "s",
        "TWITCH_ACCESS_TOKEN": "a",
        "TWITCH_REFRESH_TOKEN": "r",
        "TWITCH_TRANSPORT": transport,
    }


async def _client(redis: Redis, key_tag: str, transport: str) -> AsyncIterator[Client]:
    settings = load_settings(
        environ=_env(key_tag, transport), env_file=None, config=False, warn=False
    )
    server = AdminServer(sources(redis, settings, key_tag), TOKEN)
    try:
        async with TestClient(TestServer(server.app())) as client:
            yield client
    finally:
        app = f"app-{key_tag}"
        await redis.delete(*(keys.joined_channels("twitch", app, k) for k in ("in", "out", "gen")))


@pytest.fixture
async def http(redis_client: Redis, key_tag: str) -> AsyncIterator[Client]:
    async for client in _client(redis_client, key_tag, "conduit"):
        yield client


@pytest.mark.redis
async def test_a_channel_joined_and_left_from_the_live_page_is_recorded_for_the_gateways(
    http: Client, redis_client: Redis, key_tag: str
) -> None:
    csrf = await login(http)
    page = await (await http.get("/live")).text()
    assert 'action="/live/twitch/channels"' in page
    joined = await http.post(
        "/live/twitch/channels", data={"channel": "#NewChan", "action": "join", "csrf": csrf}
    )
    assert "Joined #newchan" in await joined.text()
    store = RedisConduitStore(redis_client)
    assert await store.channel_changes(f"app-{key_tag}") == ({"newchan"}, set(), 1)
    left = await http.post(
        "/live/twitch/channels", data={"channel": "newchan", "action": "leave", "csrf": csrf}
    )
    assert "Left #newchan" in await left.text()
    assert await store.channel_changes(f"app-{key_tag}") == (set(), {"newchan"}, 2)
    bad = await http.post(
        "/live/twitch/channels", data={"channel": "not a name", "action": "join", "csrf": csrf}
    )
    assert "Nothing changed" in await bad.text() and "twitch.tv/&lt;login&gt;" in await bad.text()
    assert (await store.channel_changes(f"app-{key_tag}"))[2] == 2


@pytest.mark.redis
async def test_with_the_websocket_transport_there_is_no_form_and_a_join_changes_nothing(
    redis_client: Redis, key_tag: str
) -> None:
    async for http in _client(redis_client, key_tag, "websocket"):
        csrf = await login(http)
        assert 'action="/live/twitch/channels"' not in await (await http.get("/live")).text()
        refused = await http.post(
            "/live/twitch/channels", data={"channel": "newchan", "action": "join", "csrf": csrf}
        )
        assert "TWITCH_TRANSPORT=conduit" in await refused.text()
        store = RedisConduitStore(redis_client)
        assert await store.channel_changes(f"app-{key_tag}") == (set(), set(), 0)
