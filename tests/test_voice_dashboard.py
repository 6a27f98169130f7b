"""The dashboard's voice page and the overlay's routes in the dashboard's web app (in process,
on a real Redis): the page lists each channel with an overlay and its queue; its buttons skip,
pause, resume, set the volume and rotate the key (the same queue events and flags as ``!skip``
/ ``!tts``); the overlay answers 403 and an empty body without its key, with a wrong one and
with the old one after a rotation, and never needs (or accepts in place of its key) the admin
token."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from bot.admin.server import AdminServer
from bot.admin.views import Sources
from bot.events import ConversationKey
from bot.memory.buffers import MemoryStore
from bot.safety.audit import Audit
from bot.settings import Settings
from bot.state.history import HistoryStore
from bot.state.voice import OverlayKeys, VoiceQueue

pytestmark = pytest.mark.redis

TOKEN = "admin-token-0123456789abcdef"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
async def http(
    real_redis: Redis, key_tag: str
) -> AsyncIterator[TestClient[web.Request, web.Application]]:
    sources = Sources(
        settings=Settings(),
        redis=real_redis,
        memory=MemoryStore(real_redis),
        history=HistoryStore(real_redis, max_messages=20, ttl_seconds=3600),
        audit=Audit(real_redis, namespace=key_tag),
    )
    async with TestClient(TestServer(AdminServer(sources, TOKEN).app())) as client:
        yield client


async def test_the_voice_page_lists_channels_and_its_buttons_steer_the_queue(
    http: TestClient[web.Request, web.Application], real_redis: Redis
) -> None:
    conv = ConversationKey(platform="twitch", channel=f"v{uuid.uuid4().hex[:10]}")
    key = await OverlayKeys(real_redis).get(conv)
    queue = VoiceQueue(real_redis)
    await queue.push(conv, {"kind": "cheer", "text": "Ada cheered 500 bits", "name": "Ada"})
    page = await http.get("/voice", headers=BEARER)
    body = await page.text()
    assert page.status == 200
    assert f"/overlay/{conv}?key={key}" in body and "Ada cheered 500 bits" in body
    for action, form in (("pause", {}), ("skip", {}), ("volume", {"volume": "35"})):
        done = await http.post(
            f"/voice/{conv}/{action}", data=form, headers=BEARER, allow_redirects=False
        )
        assert done.status == 303, await done.text()
    control = await queue.control(conv)
    assert control.paused and control.volume == 35
    kinds = [e["kind"] for e in await queue.recent(conv)]
    assert kinds == ["cheer", "pause", "skip", "volume"]
    assert (await http.post(f"/voice/{conv}/resume", headers=BEARER)).status == 200
    assert not (await queue.control(conv)).paused
    anonymous = await http.get("/voice", allow_redirects=False)  # no session, no token
    assert (anonymous.status, anonymous.headers.get("Location")) == (303, "/login")


async def test_the_overlay_needs_its_own_key_and_a_rotation_retires_the_old_one(
    http: TestClient[web.Request, web.Application], real_redis: Redis
) -> None:
    conv = ConversationKey(platform="twitch", channel=f"v{uuid.uuid4().hex[:10]}")
    key = await OverlayKeys(real_redis).get(conv)
    page = f"/overlay/{conv}"
    for url in (page, f"{page}?key=nope", f"{page}?key={TOKEN}", f"{page}/audio/1-0?key=x"):
        refused = await http.get(url)
        assert (refused.status, await refused.text()) == (403, ""), url
    refused = await http.get(page, headers=BEARER)  # the admin token is not the overlay's key
    assert refused.status == 403
    shown = await http.get(f"{page}?key={key}")
    html = await shown.text()
    assert shown.status == 200 and '<audio id="voice"' in html
    assert "script-src 'self'" in shown.headers["Content-Security-Policy"]
    done = await http.post(f"/voice/{conv}/rotate", headers=BEARER, allow_redirects=False)
    assert done.status == 303
    fresh = await OverlayKeys(real_redis).get(conv)
    assert fresh != key
    assert (await http.get(f"{page}?key={key}")).status == 403
    assert (await http.get(f"{page}/events?key={key}")).status == 403
    assert (await http.get(f"{page}?key={fresh}")).status == 200
