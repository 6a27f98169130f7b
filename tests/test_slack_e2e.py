"""The Slack adapter end to end: the real bolt app and slack-sdk against a loopback Slack.

Requests are signed exactly as Slack signs them (``v0`` HMAC-SHA256 of ``v0:ts:body`` with the
signing secret). A tiny router stand-in consumes ``inbound`` and publishes a scripted ``Reply``
to ``outbound:slack``; tests wait with ``adapter.idle()`` (every received event converted and
published) and ``bus.drain()`` (every event handled), never by sleeping. The sender gets a fake
clock and sleep, so rate-limit waits are asserted, not waited for.
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
import pytest

from adapters.slack.adapter import SlackAdapter, build_client
from adapters.slack.sender import SlackSender
from bot.bus.base import InProcessBus
from bot.bus.topics import DELETIONS, INBOUND, outbound_topic
from bot.events import AttachmentKind, ChatMessage, MessageDeleted, Reply, Role
from bot.settings import ConfigError, SlackSettings
from tests.loopback.base import ScriptedFailure
from tests.loopback.slack_server import BOT_USER_ID, SlackServer
from tests.platform_env import adapter_from_env

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
        stamp = str(int(time.time()))
        digest = hmac.new(secret.encode(), f"v0:{stamp}:{raw}".encode(), hashlib.sha256)
        sent = {
            "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": f"v0={digest.hexdigest()}",
            "Content-Type": "application/x-www-form-urlencoded" if form else "application/json",
            **(headers or {}),
        }
        assert self.adapter.http_url is not None
        async with (
            aiohttp.ClientSession() as session,
            session.post(self.adapter.http_url, data=raw.encode(), headers=sent) as response,
        ):
            return response.status, await response.text()

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


@pytest.fixture
async def server() -> AsyncIterator[SlackServer]:
    async with SlackServer(bot_token=BOT_TOKEN) as srv:
        assert isinstance(srv, SlackServer)
        yield srv


def _settings(server: SlackServer, **overrides: Any) -> SlackSettings:
    values: dict[str, Any] = {
        "bot_token": BOT_TOKEN,
        "signing_secret": SECRET,
        "http_host": "127.0.0.1",
        "http_port": 0,
        "api_base_url": server.url + "/api",  # no trailing slash: normalised
        **overrides,
    }
    return SlackSettings(**values)


async def _rig(server: SlackServer, **overrides: Any) -> AsyncIterator[Rig]:
    settings = _settings(server, **overrides)
    fake = FakeTime()
    client = build_client(settings)
    sender = SlackSender(client, sleep=fake.sleep, clock=fake.clock)
    bus = InProcessBus()
    adapter = SlackAdapter(bus, settings, client=client, sender=sender, socket_ping_interval=0.5)
    rig = Rig(server=server, bus=bus, adapter=adapter, time=fake)
    await adapter.start()
    tasks = [asyncio.create_task(_router(rig)), asyncio.create_task(_deletions(rig))]
    try:
        yield rig
    finally:
        await adapter.aclose()
        await bus.close()
        await asyncio.gather(*tasks, return_exceptions=True)


@pytest.fixture
async def rig(server: SlackServer) -> AsyncIterator[Rig]:
    async for value in _rig(server):
        yield value


@pytest.fixture
async def ambient_rig(server: SlackServer) -> AsyncIterator[Rig]:
    async for value in _rig(server, ambient_channels=frozenset({"C111"})):
        yield value


# -- HTTP Events API ----------------------------------------------------------------------------
async def test_bad_signature_is_rejected_and_nothing_published(rig: Rig) -> None:
    status, _ = await rig.post(mention(), secret="not-the-secret")
    assert status == 401
    await rig.settle()
    assert rig.seen == [] and rig.server.posts == []


async def test_url_verification_challenge_is_answered(rig: Rig) -> None:
    body = fixture("slack_url_verification")
    status, text = await rig.post(body)
    assert status == 200
    assert json.loads(text) == {"challenge": body["challenge"]}


async def test_app_mention_is_answered_in_its_thread(rig: Rig) -> None:
    rig.server.users["W222"] = {"id": "W222", "is_admin": True, "profile": {"display_name": "Ada"}}
    rig.answer = lambda m: "**Yes**, <@W222> & friends: <!channel>"
    status, text = await rig.post(mention())
    assert (status, text) == (200, "")
    await rig.settle()

    (seen,) = rig.seen
    assert seen.id == "C111:1595926230.009600"
    assert seen.text == "Hi there!" and seen.mentions_bot
    assert seen.author.display_name == "Ada" and Role.MODERATOR in seen.author.roles
    assert rig.server.posts == [
        {
            "channel": "C111",
            "thread_ts": "1595926230.009600",
            "text": "*Yes*, <@W222> &amp; friends: &lt;!channel&gt;",
            "mrkdwn": True,
            "link_names": False,
            "unfurl_links": False,
            "unfurl_media": False,
        }
    ]
    (call,) = rig.server.calls("/api/chat.postMessage")
    assert call.headers["authorization"] == f"Bearer {BOT_TOKEN}"

    # A reply in that thread, without a mention, reaches the bot: it answered there.
    follow = fixture("slack_message")
    follow["event_id"] = "Ev222"
    follow["event"].update(user="W222", ts="1595926299.000100", thread_ts="1595926230.009600")
    await rig.post(follow)
    await rig.settle()
    assert rig.seen[1].reply_to_bot and not rig.seen[1].ambient
    assert rig.server.posts[1]["thread_ts"] == "1595926230.009600"
    # ...but the same in a thread the bot is not part of does not.
    follow["event_id"] = "Ev333"
    follow["event"].update(ts="1595926300.000100", thread_ts="1595920000.000001")
    await rig.post(follow)
    await rig.settle()
    assert len(rig.seen) == 2


async def test_retried_event_is_answered_once(rig: Rig) -> None:
    body = mention(event_id="Ev0RETRY")
    assert (await rig.post(body))[0] == 200
    for attempt in (1, 2, 3):
        status, _ = await rig.post(
            body,
            headers={"X-Slack-Retry-Num": str(attempt), "X-Slack-Retry-Reason": "http_timeout"},
        )
        assert status == 200  # acknowledged, or Slack keeps retrying
    await rig.settle()
    assert len(rig.seen) == 1
    assert len(rig.server.posts) == 1


async def test_file_share_image_reaches_the_model_as_bytes(ambient_rig: Rig) -> None:
    rig = ambient_rig
    rig.server.files["file.png"] = (PNG, "image/png")
    body = fixture("slack_message_file_share")
    image = body["event"]["files"][0]
    image.update(url_private=rig.server.file_url("file.png"), size=len(PNG))
    image["url_private_download"] = image["url_private"]
    pdf = {**image, "id": "F2", "name": "a.pdf", "mimetype": "application/pdf"}
    pdf["url_private_download"] = rig.server.file_url("a.pdf")
    foreign = {
        **image,
        "id": "F3",
        "name": "x.png",
        "url_private_download": "https://evil.example/x.png",
    }
    body["event"]["files"] = [image, pdf, foreign]
    await rig.post(body)
    await rig.settle()

    (seen,) = rig.seen
    assert seen.ambient
    got, doc, elsewhere = seen.attachments
    assert (got.kind, got.mime, got.data) == (AttachmentKind.IMAGE, "image/png", PNG)
    assert (doc.kind, doc.data) == (AttachmentKind.FILE, None)
    assert (elsewhere.kind, elsewhere.data) == (AttachmentKind.IMAGE, None)
    (download,) = rig.server.calls("/files/file.png")
    assert download.headers["authorization"] == f"Bearer {BOT_TOKEN}"
    assert rig.server.calls("/files/a.pdf") == []


async def test_image_over_the_size_cap_is_not_downloaded(server: SlackServer) -> None:
    server.files["file.png"] = (PNG, "image/png")
    async for rig in _rig(server, ambient_channels=frozenset({"C111"}), max_file_bytes=100):
        body = fixture("slack_message_file_share")
        body["event"]["files"][0].update(
            url_private_download=server.file_url("file.png"), size=None
        )
        await rig.post(body)
        await rig.settle()
        assert rig.seen[0].attachments[0].data is None  # the stream was cut at the cap
        body["event"]["files"][0]["size"] = len(PNG)
        body["event_id"], body["event"]["ts"] = "Ev2", "1652227999.000001"
        await rig.post(body)
        await rig.settle()
        assert rig.seen[1].attachments[0].data is None
        assert len(server.calls("/files/file.png")) == 1  # the declared size was enough


async def test_model_text_pings_nobody(rig: Rig) -> None:
    rig.answer = lambda m: (
        "<!channel> <!here> <!everyone> <!subteam^S0123|@devs> @here @channel @everyone "
        "<@U0STRANGER> <@W222>"
    )
    await rig.post(mention())
    await rig.settle()
    (post,) = rig.server.posts
    text = post["text"]
    assert "<!" not in text and "<@U0STRANGER>" not in text
    assert text.count("<") == 1 and "<@W222>" in text  # only the addressed author
    assert post["link_names"] is False
    assert "@here" not in text and "@channel" not in text and "@everyone" not in text


async def test_long_answer_is_split_and_paced(rig: Rig) -> None:
    rig.answer = lambda m: "\n\n".join(f"Part {i}. " + "lorem ipsum " * 150 for i in range(9))
    await rig.post(mention())
    await rig.settle()
    posts = rig.server.posts
    assert len(posts) >= 3
    assert all(len(p["text"]) <= 3900 for p in posts)
    assert {p["thread_ts"] for p in posts} == {"1595926230.009600"}
    assert [p["text"].split(".")[0] for p in posts][:1] == ["Part 0"]
    assert rig.time.sleeps == [1.0] * (len(posts) - 1)  # about one message per second


async def test_rate_limited_post_is_retried_after_retry_after(rig: Rig) -> None:
    rig.server.rate_limit(7)
    await rig.post(mention())
    await rig.settle()
    calls = rig.server.calls("/api/chat.postMessage")
    assert len(calls) == 2 and calls[0].body == calls[1].body
    assert rig.time.sleeps == [7.0]
    assert len(rig.seen) == 1


async def test_failed_send_is_dropped_and_the_loop_goes_on(rig: Rig) -> None:
    rig.server.failures.append(ScriptedFailure(200, {"ok": False, "error": "channel_not_found"}))
    await rig.post(mention())
    await rig.settle()
    await rig.post(mention(event_id="Ev2", text="again"))
    await rig.settle()
    assert len(rig.server.calls("/api/chat.postMessage")) == 2  # no retry of channel_not_found
    assert rig.time.sleeps == [1.0]  # just the pacing of the second message


async def test_slash_command_answers_ephemerally(rig: Rig) -> None:
    rig.answer = lambda m: "**Pinned**: nothing yet"
    form = {
        "token": "x",
        "team_id": "T111",
        "channel_id": "C111",
        "channel_name": "general",
        "user_id": "W222",
        "user_name": "ada",
        "command": "/chorus",
        "text": "pins",
        "response_url": rig.server.response_url("r1"),
        "trigger_id": "13345224609.738474920.8088930838d88f008e0",
        "api_app_id": "A111",
    }
    status, text = await rig.post(form, form=True)
    assert (status, text) == (200, "")
    await rig.settle()
    (seen,) = rig.seen
    assert (seen.text, seen.id, seen.mentions_bot) == ("/pins", form["trigger_id"], True)
    assert rig.server.responses == [
        {"response_type": "ephemeral", "text": "*Pinned*: nothing yet", "replace_original": False}
    ]
    assert rig.server.posts == []


async def test_deleted_message_is_published(rig: Rig) -> None:
    await rig.post(fixture("slack_message_deleted"))
    await rig.settle()
    (deleted,) = rig.deleted
    assert deleted.message_id == "C111:1665368619.804829"
    assert deleted.conversation.thread == "1665368619.804829"
    assert rig.seen == []


async def test_other_bots_are_ignored(rig: Rig) -> None:
    body = mention()
    body["event"]["bot_id"] = "B0OTHER"
    await rig.post(body)
    dm = fixture("slack_message")
    dm["event_id"] = "Ev2"
    dm["event"].update(channel="D111", channel_type="im", subtype="bot_message", bot_id="B0OTHER")
    await rig.post(dm)
    await rig.settle()
    assert rig.seen == [] and rig.server.posts == []


async def test_direct_message_is_answered_top_level(rig: Rig) -> None:
    dm = fixture("slack_message")
    dm["event"].update(channel="D111", channel_type="im")
    await rig.post(dm)
    await rig.settle()
    assert rig.seen[0].is_direct
    (post,) = rig.server.posts
    assert post["channel"] == "D111" and "thread_ts" not in post


# -- startup errors -----------------------------------------------------------------------------
async def test_bad_bot_token_is_one_clear_error(server: SlackServer) -> None:
    adapter = SlackAdapter(InProcessBus(), _settings(server, bot_token="xoxb-revoked"))
    with pytest.raises(
        ConfigError, match=r"SLACK_BOT_TOKEN was rejected by Slack \(invalid_auth\)"
    ):
        await adapter.start()
    await adapter.aclose()


async def test_bad_app_token_is_one_clear_error(server: SlackServer) -> None:
    settings = _settings(server, app_token="xapp-wrong", signing_secret=None)
    adapter = SlackAdapter(InProcessBus(), settings)
    with pytest.raises(
        ConfigError, match=r"SLACK_APP_TOKEN was rejected by Slack \(invalid_auth\)"
    ):
        await adapter.start()
    await adapter.aclose()


def test_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    bus = InProcessBus()
    assert adapter_from_env(SlackAdapter, bus) is None
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-1")
    with pytest.raises(ConfigError, match="SLACK_APP_TOKEN"):
        adapter_from_env(SlackAdapter, bus)
    monkeypatch.setenv("SLACK_APP_TOKEN", "xapp-1")
    adapter = adapter_from_env(SlackAdapter, bus)
    assert adapter is not None and adapter.settings.mode == "socket"


# -- Socket Mode --------------------------------------------------------------------------------
@pytest.fixture
async def socket_rig(server: SlackServer) -> AsyncIterator[Rig]:
    async for value in _rig(server, app_token="xapp-test", signing_secret=None):
        yield value


async def test_socket_mode_acks_answers_and_reconnects(socket_rig: Rig) -> None:
    rig, server = socket_rig, socket_rig.server
    await server.wait_for(lambda: server.socket_connections == 1)
    envelope = await server.send_envelope("events_api", mention())
    await server.wait_acked(envelope)
    await rig.settle()
    assert [p["thread_ts"] for p in server.posts] == ["1595926230.009600"]

    await server.drop_socket()  # Slack closes sockets now and then; the SDK reconnects
    await server.wait_for(lambda: server.socket_connections == 2 and bool(server._sockets))
    assert len(server.calls("/api/apps.connections.open")) == 2
    again = await server.send_envelope("events_api", mention(event_id="Ev2", text="still?"))
    await server.wait_acked(again)
    await rig.settle()
    assert [m.text for m in rig.seen] == ["Hi there!", "still?"]
    assert len(server.posts) == 2

    command = {
        "command": "/chorus",
        "text": "help",
        "channel_id": "D111",
        "user_id": "W222",
        "trigger_id": "1.2.3",
        "response_url": server.response_url("r2"),
    }
    ack = await server.send_envelope("slash_commands", command)
    await server.wait_acked(ack)
    await rig.settle()
    assert rig.seen[-1].text == "/help" and rig.seen[-1].is_direct
    assert server.responses == [
        {"response_type": "ephemeral", "text": "echo: /help", "replace_original": False}
    ]


async def test_a_thread_the_bot_answered_in_addresses_it(ambient_rig: Rig) -> None:
    rig = ambient_rig
    chat = fixture("slack_message")
    chat["event"].update(thread_ts="1596180000.000001")  # a thread the bot is not part of
    await rig.post(chat)
    await rig.settle()
    assert rig.seen[0].ambient and not rig.seen[0].reply_to_bot
    assert rig.server.posts[0]["thread_ts"] == "1596180000.000001"  # the router chose to speak
    chat["event_id"] = "Ev2"
    chat["event"]["ts"] = "1596183999.000001"
    await rig.post(chat)
    await rig.settle()
    assert rig.seen[1].reply_to_bot and not rig.seen[1].ambient
