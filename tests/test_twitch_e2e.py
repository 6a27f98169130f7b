"""The Twitch adapter end to end: real twitchio 3 against the loopback Twitch, the real bus.

A tiny task stands in for the router: it consumes ``inbound`` and answers every message with a
scripted ``Reply`` on ``outbound:twitch``. Nothing sleeps to wait for work: tests await the
router's queue, ``bus.drain()`` and the server's ``wait_until`` (all bounded by timeouts).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import twitchio.eventsub.websockets as twitch_ws
from redis.asyncio import Redis
from twitchio.http import Route

from adapters.twitch import TwitchAdapter
from adapters.twitch.tokens import StoredTokens, fingerprint, token_key
from bot.bus.base import InProcessBus
from bot.bus.topics import DELETIONS, INBOUND, outbound_topic
from bot.events import ChatMessage, MessageDeleted, Reply, Role
from bot.ops.logs import redact
from bot.resilience import RetryPolicy
from bot.settings import ConfigError
from bot.state import connect
from tests.loopback.twitch_server import CLIENT_ID, CLIENT_SECRET, TwitchServer, fixture
from tests.platform_env import adapter_from_env

BOT_ID, BOT_LOGIN = "2914196", "mybot"
CHANNEL, CHANNEL_LOGIN = "1971641", "streamer"
VIEWER = "4145994"
CHAT = "channel.chat.message"
WAIT = 10.0


def chat_event(
    message_id: str, text: str = "@mybot what is Kappa ?", **extra: Any
) -> dict[str, Any]:
    event: dict[str, Any] = copy.deepcopy(
        fixture("twitch_channel_chat_message")["payload"]["event"]
    )
    event.update(message_id=message_id, reply=None, **extra)
    if text != event["message"]["text"]:
        event["message"] = {
            "text": text,
            "fragments": [
                {"type": "text", "text": text, "cheermote": None, "emote": None, "mention": None}
            ],
        }
    return event


def webhook_event(name: str) -> dict[str, Any]:
    event: dict[str, Any] = copy.deepcopy(fixture(name)["event"])
    event.update(broadcaster_user_id=CHANNEL, broadcaster_user_login=CHANNEL_LOGIN)
    return event


def _files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


class FakeTime:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@dataclass
class Rig:
    server: TwitchServer
    bus: InProcessBus
    redis: Redis
    adapter: TwitchAdapter
    time: FakeTime
    inbound: asyncio.Queue[ChatMessage] = field(default_factory=asyncio.Queue)
    deletions: asyncio.Queue[MessageDeleted] = field(default_factory=asyncio.Queue)
    seen: list[ChatMessage] = field(default_factory=list)
    answer: str = "Kappa is a **classic** emote"
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def router(self) -> None:
        """Stand-in router: record each message, answer it with a scripted Reply."""
        async for delivery in self.bus.consume(INBOUND, ChatMessage, group="router"):
            message = delivery.event
            self.seen.append(message)
            reply = Reply(
                conversation=message.conversation,
                text=self.answer,
                reply_to_id=message.id,
                addressed_user_ids=(message.author.id,),
            )
            await self.bus.publish(outbound_topic("twitch"), reply)
            await delivery.ack()
            self.inbound.put_nowait(message)

    async def deletion_sink(self) -> None:
        async for delivery in self.bus.consume(DELETIONS, MessageDeleted, group="router"):
            self.deletions.put_nowait(delivery.event)
            await delivery.ack()

    async def next_message(self) -> ChatMessage:
        return await asyncio.wait_for(self.inbound.get(), WAIT)

    async def say(self, message_id: str, **extra: Any) -> ChatMessage:
        assert await self.server.notify(CHAT, chat_event(message_id, **extra)) == 1
        return await self.next_message()


@pytest.fixture
def twitch_env(monkeypatch: pytest.MonkeyPatch) -> Any:
    # the adapter points twitchio's process-wide endpoints at the loopback; undo that afterwards.
    monkeypatch.setattr(Route, "BASE", Route.BASE)
    monkeypatch.setattr(Route, "ID_BASE", Route.ID_BASE)
    monkeypatch.setattr(twitch_ws, "WSS", twitch_ws.WSS)

    def apply(server: TwitchServer, **extra: str) -> None:
        env = {
            "TWITCH_CLIENT_ID": CLIENT_ID,
            "TWITCH_CLIENT_SECRET": CLIENT_SECRET,
            "TWITCH_ACCESS_TOKEN": "access-0",
            "TWITCH_REFRESH_TOKEN": "refresh-0",
            "TWITCH_CHANNELS": CHANNEL_LOGIN,
            "TWITCH_API_BASE_URL": server.helix_url,
            "TWITCH_AUTH_BASE_URL": server.auth_url,
            "TWITCH_EVENTSUB_WS_URL": server.ws_url,
            **extra,
        }
        for name, value in env.items():
            monkeypatch.setenv(name, value)

    return apply


@pytest.fixture
async def server() -> AsyncIterator[TwitchServer]:
    twitch = TwitchServer()
    await twitch.start()
    twitch.add_user(BOT_ID, BOT_LOGIN)
    twitch.add_user(CHANNEL, CHANNEL_LOGIN)
    twitch.grant(BOT_ID, "access-0", "refresh-0")
    try:
        yield twitch
    finally:
        await twitch.close()


async def _rig(server: TwitchServer, key_tag: str, **env: str) -> Rig:
    bus = InProcessBus()
    redis = await connect.open_redis(f"memory://twitch-{key_tag}")
    adapter = adapter_from_env(TwitchAdapter, bus, redis)
    assert adapter is not None
    time = FakeTime()
    adapter.limiter.clock, adapter.limiter.sleep = time.clock, time.sleep
    adapter.retry = RetryPolicy(max_retries=3, base_delay=2.0, max_delay=2.0)
    rig = Rig(server=server, bus=bus, redis=redis, adapter=adapter, time=time)
    rig.tasks = [asyncio.create_task(rig.router()), asyncio.create_task(rig.deletion_sink())]
    return rig


@pytest.fixture
async def rig(server: TwitchServer, twitch_env: Any, key_tag: str) -> AsyncIterator[Rig]:
    twitch_env(server)
    rig = await _rig(server, key_tag)
    runner = asyncio.create_task(rig.adapter.run())
    try:
        await server.wait_until(lambda: len(server.subscriptions) == 4, WAIT)
        yield rig
    finally:
        await rig.adapter.aclose()
        await asyncio.wait_for(runner, WAIT)
        for task in rig.tasks:
            task.cancel()
        await asyncio.gather(*rig.tasks, return_exceptions=True)
        await rig.bus.close()
        await rig.redis.aclose()


async def test_welcome_subscribe_notify_and_send(rig: Rig) -> None:
    server = rig.server
    (session,) = server.live_sessions()
    posts = [r for r in server.requests if r.path == "/helix/eventsub/subscriptions"]
    assert sorted(p.body["type"] for p in posts) == [
        "channel.chat.clear_user_messages",
        "channel.chat.message",
        "channel.chat.message_delete",
        "channel.chat.notification",
    ]
    for post in posts:
        assert post.body["condition"] == {"broadcaster_user_id": CHANNEL, "user_id": BOT_ID}
        assert post.body["transport"] == {"method": "websocket", "session_id": session}
        assert post.headers["authorization"] == "Bearer access-0"  # the bot's user token
    assert server.connections[0].query == {"keepalive_timeout_seconds": "10"}

    await server.keepalive()
    message = await rig.say("m-1")
    assert message.id == "m-1" and message.mentions_bot and not message.ambient
    assert message.author.id == VIEWER and Role.MODERATOR in message.author.roles
    await rig.bus.drain(WAIT)
    assert server.sent == [
        {
            "broadcaster_id": CHANNEL,
            "sender_id": BOT_ID,
            "message": "Kappa is a classic emote",
            "reply_parent_message_id": "m-1",
        }
    ]
    ambient = await rig.say("m-2", text="anyone here play chess?")
    assert ambient.ambient and not ambient.addressed
    await rig.bus.drain(WAIT)
    assert rig.adapter.sent == 2 and rig.adapter.drops_total == 0
    assert len(server.connections) == 1  # the keepalive did not make twitchio reconnect


@pytest.mark.parametrize("same_session", [False, True], ids=["new-session", "same-session"])
async def test_session_reconnect_moves_without_losing_or_duplicating(
    rig: Rig, same_session: bool
) -> None:
    server = rig.server
    server.same_session_on_reconnect = same_session
    await rig.say("before")
    (old,) = server.live_sessions()
    url = await server.reconnect(old)
    await server.wait_until(lambda: len(server.connections) == 2 and server.connections[0].closed)
    new = server.connections[1]
    assert new.query == {"reconnect": old}  # the client followed reconnect_url
    assert url.endswith(f"?reconnect={old}")
    assert (new.session_id == old) is same_session
    assert all(s.session_id == new.session_id for s in server.subscriptions.values())

    await rig.say("after")
    await rig.say("later")
    await rig.bus.drain(WAIT)
    assert [m.id for m in rig.seen] == ["before", "after", "later"]
    posts = [r for r in server.requests if r.path == "/helix/eventsub/subscriptions"]
    assert len(posts) == 4  # twitchio did not re-subscribe: Twitch moved the subscriptions
    assert len(server.sent) == 3

    await rig.adapter.aclose()  # every socket is closed, even one twitchio lost track of
    await server.wait_until(lambda: all(c.closed for c in server.connections))


async def test_dropped_send_is_logged_counted_and_backed_off(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    server = rig.server
    server.drops.append({"code": "msg_ratelimit", "message": "Your message was not sent."})
    with caplog.at_level(logging.INFO, logger="chorus.twitch"):
        await rig.say("m-1")
        await rig.bus.drain(WAIT)
    assert [s["reply_parent_message_id"] for s in server.sent] == ["m-1"]  # sent on retry
    assert rig.adapter.dropped == {"msg_ratelimit": 1}
    drops = [r for r in caplog.records if getattr(r, "drop_code", None) == "msg_ratelimit"]
    assert drops and drops[0].drop_message == "Your message was not sent."  # type: ignore[attr-defined]
    assert len(rig.time.sleeps) == 1 and 1.0 <= rig.time.sleeps[0] <= 2.0  # backed off once
    assert any(getattr(r, "wait_s", None) for r in caplog.records)  # the wait was logged

    server.drops.append({"code": "channel_settings", "message": "Followers-only mode."})
    await rig.say("m-2")
    await rig.bus.drain(WAIT)
    assert rig.adapter.dropped == {"msg_ratelimit": 1, "channel_settings": 1}
    assert len(server.sent) == 1  # a settings drop is not retried
    assert rig.adapter.drops_total == 2


async def test_expired_token_is_refreshed_and_stored(rig: Rig) -> None:
    server = rig.server
    server.revoke("access-0")
    await rig.say("m-1")
    await rig.bus.drain(WAIT)
    ((old_refresh, new_access),) = server.refreshed
    assert old_refresh == "refresh-0"
    chats = [r for r in server.requests if r.path == "/helix/chat/messages"]
    assert [c.headers["authorization"] for c in chats] == [
        "Bearer access-0",
        f"Bearer {new_access}",
    ]
    assert len(server.sent) == 1
    raw = await rig.redis.get(token_key(CLIENT_ID))
    assert raw is not None
    stored = StoredTokens.model_validate_json(raw)
    assert stored.access_token == new_access and stored.refresh_token != "refresh-0"
    assert stored.user_id == BOT_ID and stored.seed == fingerprint("refresh-0")
    assert ".tio.tokens.json" not in _files(Path.cwd())
    # the refreshed pair is masked in every log line from now on, like the configured one
    line = redact(f"access={new_access} refresh={stored.refresh_token} seed=refresh-0")
    assert new_access not in line and stored.refresh_token not in line


async def test_failed_refresh_is_logged_without_secrets(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    server = rig.server
    server.revoke("access-0")
    server.refresh_tokens.clear()  # the refresh token was revoked too: re-authorisation needed
    with caplog.at_level(logging.INFO):
        await rig.say("m-1")
        await rig.bus.drain(WAIT)  # the reply was acked, the loop goes on
    assert server.sent == [] and rig.adapter.failed == 1
    (failure,) = [r for r in caplog.records if r.getMessage() == "twitch reply not sent"]
    assert failure.exc_info and "HTTP 400 from oauth2/token" in str(failure.exc_info[1])
    logged = caplog.text + "".join(
        logging.Formatter().formatException(r.exc_info) for r in caplog.records if r.exc_info
    )
    assert CLIENT_SECRET not in logged and "refresh-0" not in logged
    assert "Invalid refresh token" in logged


async def test_deletions_are_published(rig: Rig) -> None:
    server = rig.server
    await server.notify(
        "channel.chat.message_delete", webhook_event("twitch_channel_chat_message_delete")
    )
    deleted = await asyncio.wait_for(rig.deletions.get(), WAIT)
    assert deleted.conversation.channel == CHANNEL
    assert (deleted.message_id, deleted.author_id) == (
        "ab24e0b0-2260-4bac-94e4-05eedd4ecd0e",
        "7734",
    )
    await server.notify(
        "channel.chat.clear_user_messages",
        webhook_event("twitch_channel_chat_clear_user_messages"),
    )
    cleared = await asyncio.wait_for(rig.deletions.get(), WAIT)
    assert (cleared.message_id, cleared.author_id) == (None, "7734")


async def test_own_moderator_badge_raises_the_send_limit(rig: Rig) -> None:
    assert rig.adapter.budget(CHANNEL) == (BOT_ID, 20)
    own = chat_event(
        "own-1", text="hello chat", chatter_user_id=BOT_ID, chatter_user_login=BOT_LOGIN
    )
    await rig.server.notify(CHAT, own)  # badges include moderator
    await rig.say("m-1")  # dispatched after the bot's own message, so it has been seen
    assert rig.seen[-1].id == "m-1" and len(rig.seen) == 1  # the bot's own line is not inbound
    assert rig.adapter.budget(CHANNEL) == (f"{BOT_ID}:{CHANNEL}", 100)


async def test_file_token_store_and_no_token_file_in_the_cwd(
    server: TwitchServer, twitch_env: Any, key_tag: str, tmp_path: Path
) -> None:
    path = tmp_path / "secrets" / "twitch.json"
    twitch_env(server, TWITCH_TOKEN_STORE=f"file:{path}")
    server.tokens["access-0"].expires_in = 600  # about to expire: twitchio refreshes on add
    rig = await _rig(server, key_tag)
    try:
        await rig.adapter.start()
        assert os.getcwd() == str(tmp_path)  # conftest runs each test in an empty directory
        stored = StoredTokens.model_validate_json(path.read_text())
        ((_, new_access),) = server.refreshed
        assert stored.access_token == new_access
        assert path.stat().st_mode & 0o777 == 0o600
    finally:
        await rig.adapter.aclose()
        for task in rig.tasks:
            task.cancel()
        await asyncio.gather(*rig.tasks, return_exceptions=True)
        await rig.redis.aclose()
    assert _files(tmp_path) == ["secrets"]  # and no .tio.tokens.json


async def test_stored_pair_wins_until_the_environment_changes(
    server: TwitchServer, twitch_env: Any, key_tag: str
) -> None:
    twitch_env(server)
    server.grant(BOT_ID, "access-stored", "refresh-stored")
    redis = await connect.open_redis(f"memory://twitch-{key_tag}")
    stored = StoredTokens(
        access_token="access-stored", refresh_token="refresh-stored", seed=fingerprint("refresh-0")
    )
    await redis.set(token_key(CLIENT_ID), stored.model_dump_json())
    rig = await _rig(server, key_tag)
    try:
        await rig.adapter.start()
        subs = [r for r in server.requests if r.path == "/helix/eventsub/subscriptions"]
        assert {s.headers["authorization"] for s in subs} == {"Bearer access-stored"}
    finally:
        await rig.adapter.aclose()
        for task in rig.tasks:
            task.cancel()
        await asyncio.gather(*rig.tasks, return_exceptions=True)
        await rig.redis.aclose()
        await redis.aclose()


async def test_from_env_none_and_config_errors(
    server: TwitchServer, twitch_env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    bus, redis = InProcessBus(), await connect.open_redis("memory://twitch-config")
    try:
        assert adapter_from_env(TwitchAdapter, bus, redis) is None
        twitch_env(server)
        monkeypatch.delenv("TWITCH_CLIENT_SECRET")
        with pytest.raises(ConfigError, match="TWITCH_CLIENT_SECRET"):
            adapter_from_env(TwitchAdapter, bus, redis)
        twitch_env(server, TWITCH_CHANNELS="")
        with pytest.raises(ConfigError, match="TWITCH_CHANNELS"):
            adapter_from_env(TwitchAdapter, bus, redis)
        twitch_env(server, TWITCH_TOKEN_STORE="s3://bucket")
        with pytest.raises(ConfigError, match="TWITCH_TOKEN_STORE"):
            adapter_from_env(TwitchAdapter, bus, redis)
        twitch_env(server, TWITCH_CLIENT_SECRET="wrong-secret", TWITCH_TOKEN_STORE="redis")
        adapter = adapter_from_env(TwitchAdapter, bus, redis)
        assert adapter is not None
        try:
            with pytest.raises(ConfigError, match="TWITCH_CLIENT_SECRET") as refused:
                await adapter.start()
            assert "wrong-secret" not in str(refused.value)
        finally:
            await adapter.aclose()
        # a TWITCH_BOT_ID that is not the token's user is found at start
        twitch_env(server, TWITCH_BOT_ID="12345", TWITCH_CLIENT_SECRET=CLIENT_SECRET)
        adapter = adapter_from_env(TwitchAdapter, bus, redis)
        assert adapter is not None
        try:
            with pytest.raises(ConfigError, match="TWITCH_BOT_ID=12345"):
                await adapter.start()
        finally:
            await adapter.aclose()
    finally:
        await redis.aclose()
