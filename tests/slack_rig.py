"""What the Slack adapter's end-to-end tests share: Slack's own payloads, requests signed as
Slack signs them (``v0`` HMAC-SHA256 of ``v0:ts:body`` with the signing secret), a fake clock
for the sender, and a rig that runs the real adapter (bolt, slack-sdk) against the loopback
Slack with a tiny router stand-in that answers every message with a scripted ``Reply``.
Tests wait with ``adapter.idle()`` and ``bus.drain()``, never by sleeping.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp

from adapters.slack.adapter import SlackAdapter, build_client
from adapters.slack.sender import SlackSender
from bot.bus.base import InProcessBus
from bot.bus.topics import DELETIONS, INBOUND, outbound_topic
from bot.events import ChatMessage, MessageDeleted, Reply
from bot.settings import SlackSettings
from tests.loopback.slack_server import BOT_USER_ID, SlackServer

FIXTURES = Path(__file__).parent / "fixtures" / "slack"
SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
BOT_TOKEN = "xoxb-test-token"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4


def fixture(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return copy.deepcopy(body)


def mention(event_id: str = "Ev111", text: str = "Hi there!") -> dict[str, Any]:
    body = fixture("slack_app_mention_bolt_test")
    body["event_id"] = event_id
    body["event"]["text"] = f"<@{BOT_USER_ID}> {text}"
    return body


async def post_signed(
    url: str,
    raw: bytes,
    content_type: str = "application/json",
    *,
    secret: str | None = SECRET,
    headers: dict[str, str] | None = None,
) -> tuple[int, str]:
    """POST exactly ``raw`` to a Slack events URL, signed as Slack signs (unsigned if None)."""
    sent = {"Content-Type": content_type}
    if secret is not None:
        stamp = str(int(time.time()))
        digest = hmac.new(secret.encode(), b"v0:" + stamp.encode() + b":" + raw, hashlib.sha256)
        sent["X-Slack-Request-Timestamp"] = stamp
        sent["X-Slack-Signature"] = f"v0={digest.hexdigest()}"
    sent.update(headers or {})
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=raw, headers=sent) as response,
    ):
        return response.status, await response.text()


class FakeTime:
    """A clock that only moves when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@dataclass
class Rig:
    server: SlackServer
    bus: InProcessBus
    adapter: SlackAdapter
    time: FakeTime
    seen: list[ChatMessage] = field(default_factory=list)
    deleted: list[MessageDeleted] = field(default_factory=list)
    answer: Callable[[ChatMessage], str] = lambda m: f"echo: {m.text}"

    async def post(
        self,
        body: dict[str, Any] | str,
        *,
        secret: str = SECRET,
        headers: dict[str, str] | None = None,
        form: bool = False,
    ) -> tuple[int, str]:
        """POST ``body`` to the events URL, signed like Slack does."""
        raw = urlencode(body) if form and isinstance(body, dict) else json.dumps(body)
        kind = "application/x-www-form-urlencoded" if form else "application/json"
        return await self.post_raw(raw.encode(), kind, secret=secret, headers=headers)

    async def post_raw(
        self,
        raw: bytes,
        content_type: str,
        *,
        secret: str | None = SECRET,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, str]:
        """POST exactly ``raw``, signed with ``secret`` (unsigned when it is None)."""
        assert self.adapter.http_url is not None
        return await post_signed(
            self.adapter.http_url, raw, content_type, secret=secret, headers=headers
        )

    async def settle(self) -> None:
        await self.adapter.idle()
        await self.bus.drain(timeout=5)


async def _router(rig: Rig) -> None:
    async for delivery in rig.bus.consume(INBOUND, ChatMessage, group="agent"):
        message = delivery.event
        rig.seen.append(message)
        await rig.bus.publish(
            outbound_topic("slack"),
            Reply(
                conversation=message.conversation,
                text=rig.answer(message),
                reply_to_id=message.id,
                addressed_user_ids=(message.author.id,),
                in_reply_to_platform="slack",
            ),
        )
        await delivery.ack()


async def _deletions(rig: Rig) -> None:
    async for delivery in rig.bus.consume(DELETIONS, MessageDeleted, group="agent"):
        rig.deleted.append(delivery.event)
        await delivery.ack()


def slack_settings(server: SlackServer, **overrides: Any) -> SlackSettings:
    values: dict[str, Any] = {
        "bot_token": BOT_TOKEN,
        "signing_secret": SECRET,
        "http_host": "127.0.0.1",
        "http_port": 0,
        "api_base_url": server.url + "/api",  # no trailing slash: normalised
        **overrides,
    }
    return SlackSettings(**values)


async def running_rig(
    server: SlackServer, *, ping_interval: float = 0.5, **overrides: Any
) -> AsyncIterator[Rig]:
    """The adapter on ``server``. ``ping_interval``: the Socket Mode client's (aiohttp's
    heartbeat drops a socket whose pong is half of it late); short, so a dead socket is seen
    within seconds."""
    settings = slack_settings(server, **overrides)
    fake = FakeTime()
    client = build_client(settings)
    sender = SlackSender(client, sleep=fake.sleep, clock=fake.clock)
    bus = InProcessBus()
    adapter = SlackAdapter(
        bus, settings, client=client, sender=sender, socket_ping_interval=ping_interval
    )
    rig = Rig(server=server, bus=bus, adapter=adapter, time=fake)
    await adapter.start()
    tasks = [asyncio.create_task(_router(rig)), asyncio.create_task(_deletions(rig))]
    try:
        yield rig
    finally:
        await adapter.aclose()
        await bus.close()
        await asyncio.gather(*tasks, return_exceptions=True)
