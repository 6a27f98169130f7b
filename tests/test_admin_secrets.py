"""No secret in any page or export of the dashboard, over real HTTP (aiohttp's test server):
each secret form the settings know (a Redis URL's userinfo password and its ``password=``
option, API keys, platform tokens, the canary secret, the admin token, the password in any
other URL setting), whether it reaches the page through the settings or through data (a pin, a
chat line that quotes it)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from bot.admin.masking import Masker, mask_urls
from bot.admin.server import AdminServer
from bot.admin.views import Sources
from bot.events import ConversationKey
from bot.memory.buffers import MemoryStore, Pin, UserBuffer
from bot.safety.audit import Audit
from bot.settings import load_settings
from bot.state import connect, turnlog
from bot.state.history import HistoryEntry, HistoryStore
from tests.test_admin import TOKEN

Client = TestClient[web.Request, web.Application]
BEARER = {"Authorization": f"Bearer {TOKEN}"}
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
USERINFO, QUERY = "userinfo-secret-1111", "query-secret-2222"
REDIS_URLS = {
    "userinfo": f"redis://chorus:{USERINFO}@redis.internal:6379/0",
    "password-option": f"redis://redis.internal:6379/0?password={QUERY}",
    "both": f"rediss://:{USERINFO}@redis.internal:6380/0?ssl_cert_reqs=none&password={QUERY}",
}
SECRETS = {
    "ANTHROPIC_API_KEY": "sk-ant-api-secret-3333",
    "OPENAI_API_KEY": "sk-openai-secret-4444",
    "SLACK_BOT_TOKEN": "xoxb-slack-secret-5555",
    "DISCORD_TOKEN": "discord-secret-6666.abc",
    "TWITCH_CLIENT_SECRET": "twitch-secret-7777",
    "YOUTUBE_REFRESH_TOKEN": "youtube-secret-8888",
    "CHORUS_SAFETY_CANARY_SECRET": "canary-secret-9999",
}
OTHER_URLS = {  # URL settings the settings do not call secret, with a password in them
    "ANTHROPIC_BASE_URL": "https://proxyuser:base-url-secret-1212@llm.internal/v1",
    "CHORUS_FEEDS": "https://feeds.internal/rss?password=feed-secret-1313",
}
NEVER = [USERINFO, QUERY, TOKEN, *SECRETS.values(), "base-url-secret-1212", "feed-secret-1313"]


@pytest.fixture(params=sorted(REDIS_URLS))
async def http(request: pytest.FixtureRequest, key_tag: str) -> AsyncIterator[Client]:
    """A dashboard whose settings hold every secret form (the Redis URL in one of its forms),
    over an embedded store holding a person, a pin and a chat line that quote secrets."""
    env = {
        "CHORUS_REDIS_URL": REDIS_URLS[request.param],
        "CHORUS_ADMIN_PORT": "1",
        "CHORUS_ADMIN_TOKEN": TOKEN,
        **SECRETS,
        **OTHER_URLS,
    }
    settings = load_settings(environ=env, env_file=None, config=False, warn=False)
    redis = await connect.open_redis(f"memory://test-{key_tag}")  # not the URL shown
    await seed(redis, key_tag)
    sources = Sources(
        settings=settings,
        redis=redis,
        memory=MemoryStore(redis),
        history=HistoryStore(redis, max_messages=20, ttl_seconds=3600),
        audit=Audit(redis, namespace=key_tag),
    )
    server = AdminServer.from_settings(settings.admin, sources)
    assert server is not None
    try:
        async with TestClient(TestServer(server.app())) as client:
            yield client
    finally:
        await redis.aclose()


async def seed(redis: Redis, tag: str) -> None:
    """Alice pasted the Anthropic key and the Redis URL into a chat line; a pin kept the key."""
    conv = ConversationKey(platform="discord", channel=f"c{tag}")
    pasted = f"try {REDIS_URLS['both']} with {SECRETS['ANTHROPIC_API_KEY']} & {TOKEN}"
    await HistoryStore(redis, max_messages=20, ttl_seconds=3600).append(
        conv,
        HistoryEntry(
            role="user", text=pasted, message_id="m1", author_id="alice",
            author_name="Alice", at=NOW,
        ),
    )  # fmt: skip
    record = turnlog.TurnRecord(
        at=time.time(), message_id="m1", user_id="alice", user_name="Alice", decision="answered"
    )
    async with redis.pipeline() as pipe:
        turnlog.queue_records(pipe, conv, [record])
        await pipe.execute()
    memory = MemoryStore(redis)
    pin = Pin(
        text=f"key {SECRETS['ANTHROPIC_API_KEY']}", source="m1", confidence=0.9,
        created_at=NOW, updated_at=NOW,
    )  # fmt: skip
    await memory.save(UserBuffer(platform="discord", user_id="alice", pins=(pin,)))
    await memory.touch("discord", "alice", conv)


async def test_no_page_or_export_shows_a_secret_in_any_form(http: Client, key_tag: str) -> None:
    conv = f"discord:c{key_tag}"
    pages = {
        "/login": "Log in",
        "/": "Model chain",
        "/conversations": f"c{key_tag}",
        f"/conversations/{conv}": "redis.internal",  # the pasted line, its password masked
        "/people?q=alice": "/people/discord/alice",
        "/people/discord/alice": "key ***",
        "/people/discord/alice/export.json": '"key ***"',
        "/live": "Live channels",
        "/insights": "Next jobs",
        "/settings": "set, hidden",
        "/settings?scope=discord:1/2": "matching scopes",
        "/conversations/nonsense": "no such conversation",  # a refusal's text too
    }
    bodies = {path: await (await http.get(path, headers=BEARER)).text() for path in pages}
    leaks = {path: [secret for secret in NEVER if secret in body] for path, body in bodies.items()}
    assert {path: shown for path, shown in leaks.items() if shown} == {}
    for path, needle in pages.items():
        assert needle in bodies[path], path  # each page was there to leak
    settings = await (await http.get("/settings", headers=BEARER)).text()
    assert "redis.internal" in settings and "llm.internal" in settings  # masked, not hidden
    assert "***@" in settings or "password=***" in settings


def test_the_masker_masks_each_form_as_written_escaped_and_in_urls() -> None:
    masker = Masker(["p&ssw<rd-1234", "short", 'quo"ted-secret'])
    page = '<td>p&amp;ssw&lt;rd-1234</td> {"v": "quo\\"ted-secret"} p&ssw<rd-1234'
    assert masker(page) == '<td>***</td> {"v": "***"} ***'
    assert masker("short stays short") == "short stays short"  # too short to mask everywhere
    assert mask_urls('href="redis://u:pw@h/0?a=1&amp;password=x#f"') == (
        'href="redis://u:***@h/0?a=1&amp;password=***#f"'
    )
    assert mask_urls("see https://example.org/path and a@b") == (
        "see https://example.org/path and a@b"
    )
