"""End to end: the real discord.py client against the loopback gateway and REST stand-in.

A tiny stand-in router consumes ``inbound`` and publishes a scripted ``Reply`` to
``outbound:discord`` (the real router is not imported); deletions are collected from
``deletions``. Every wait is on an event (a recorded request, a gateway frame, a published
message), bounded by a timeout; nothing sleeps.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from discord.http import Route

from adapters.discord.adapter import DiscordAdapter
from adapters.discord.sender import DiscordSender
from adapters.discord.settings import DiscordSettings
from bot.bus.base import InProcessBus
from bot.bus.topics import DELETIONS, INBOUND, outbound_topic
from bot.config import ConfigError
from bot.events import ChatMessage, ConversationKey, MessageDeleted, Reply
from bot.resilience import RetryPolicy
from tests.loopback.base import ScriptedFailure
from tests.loopback.discord_server import (
    BOT_ID,
    CHANNEL_ID,
    GUILD_ID,
    HUMAN_ID,
    THREAD_ID,
    DiscordServer,
    bot_mention,
    guild_create,
    load_fixture,
    plain_message,
    rate_limited,
)

TOKEN = "loopback-token-not-secret"
MESSAGE_CONTENT = 1 << 15
Script = Callable[[ChatMessage], Awaitable[str | None]]


async def _echo(message: ChatMessage) -> str | None:
    return f"you said: {message.text}"


@dataclass
class Rig:
    server: DiscordServer
    bus: InProcessBus
    adapter: DiscordAdapter
    seen: list[ChatMessage] = field(default_factory=list)
    deleted: list[MessageDeleted] = field(default_factory=list)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def wait_seen(self, count: int) -> list[ChatMessage]:
        async with asyncio.timeout(10), self.changed:
            await self.changed.wait_for(lambda: len(self.seen) >= count)
        return self.seen

    async def wait_deleted(self, count: int) -> list[MessageDeleted]:
        async with asyncio.timeout(10), self.changed:
            await self.changed.wait_for(lambda: len(self.deleted) >= count)
        return self.deleted

    async def posts(self, channel: int, count: int = 1) -> list[Any]:
        recorded = await self.server.wait_request("POST", f"/channels/{channel}/messages", count)
        return [r.body for r in recorded]


async def _router(rig: Rig, script: Script) -> None:
    async for delivery in rig.bus.consume(INBOUND, ChatMessage, group="router"):
        message = delivery.event
        async with rig.changed:
            rig.seen.append(message)
            rig.changed.notify_all()
        text = await script(message)
        if text is not None:
            await rig.bus.publish(
                outbound_topic("discord"),
                Reply(
                    conversation=message.conversation,
                    text=text,
                    reply_to_id=message.id,
                    addressed_user_ids=(message.author.id,),
                ),
            )
        await delivery.ack()


async def _deletions(rig: Rig) -> None:
    async for delivery in rig.bus.consume(DELETIONS, MessageDeleted, group="history"):
        async with rig.changed:
            rig.deleted.append(delivery.event)
            rig.changed.notify_all()
        await delivery.ack()


def _settings(server: DiscordServer, **env: Any) -> DiscordSettings:
    values = {
        "DISCORD_TOKEN": TOKEN,
        "DISCORD_API_BASE_URL": server.api_url,
        "DISCORD_GATEWAY_URL": server.ws_url,
        **env,
    }
    return DiscordSettings(**values)


@asynccontextmanager
async def running(
    server: DiscordServer,
    script: Script = _echo,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    **env: Any,
) -> AsyncIterator[Rig]:
    bus = InProcessBus()
    adapter = DiscordAdapter(
        bus, _settings(server, **env), sleep=sleep, client_options={"guild_ready_timeout": 0.01}
    )
    rig = Rig(server, bus, adapter)
    tasks = [
        asyncio.create_task(_router(rig, script)),
        asyncio.create_task(_deletions(rig)),
        asyncio.create_task(adapter.run()),
    ]
    try:
        await server.wait_op(2)  # IDENTIFY answered with READY + GUILD_CREATE
        yield rig
        await bus.drain(timeout=10)
    finally:
        await adapter.aclose()
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        await bus.close()
    for result in results:
        if isinstance(result, Exception):
            raise result


@pytest.fixture
async def server() -> AsyncIterator[DiscordServer]:
    async with DiscordServer() as srv:
        assert isinstance(srv, DiscordServer)
        srv.guilds = [guild_create()]
        yield srv


def mention(message_id: int, text: str = "hello", **kw: Any) -> dict[str, Any]:
    return plain_message(message_id, f"<@{BOT_ID}> {text}", mentions=[bot_mention()], **kw)


# -- answering -----------------------------------------------------------------------------------
async def test_mention_is_answered_as_a_reply(server: DiscordServer) -> None:
    async with running(server) as rig:
        await server.dispatch("MESSAGE_CREATE", load_fixture("discord_message_create_reply")["d"])
        (body,) = await rig.posts(CHANNEL_ID)
        (seen,) = rig.seen
    assert seen.mentions_bot and seen.reply_to_bot and seen.text == "what does this say?"
    assert body == {
        "content": "you said: what does this say?",
        "tts": False,
        "components": [],
        "nonce": "r334385199974967099.0",
        "enforce_nonce": True,
        "allowed_mentions": {"parse": [], "users": [HUMAN_ID], "replied_user": True},
        "message_reference": {
            "message_id": 334385199974967099,
            "channel_id": CHANNEL_ID,
            "fail_if_not_exists": False,
            "type": 0,
        },
    }
    (post,) = server.requests_to("POST", f"/channels/{CHANNEL_ID}/messages")
    assert post.headers["authorization"] == f"Bot {TOKEN}"
    assert len(server.created) == 1


async def test_llm_mass_and_role_mentions_ping_nobody(server: DiscordServer) -> None:
    async def rude(message: ChatMessage) -> str:
        return "Hey @everyone and @here, ask <@&987654321>!"

    async with running(server, rude) as rig:
        await server.dispatch("MESSAGE_CREATE", mention(1001))
        (body,) = await rig.posts(CHANNEL_ID)
    assert body["allowed_mentions"] == {"parse": [], "users": [HUMAN_ID], "replied_user": True}
    assert body["content"] == "Hey @\u200beveryone and @\u200bhere, ask <@&\u200b987654321>!"
    assert not re.search(r"@(everyone|here)|<@&\d+>", body["content"])


async def test_long_answer_arrives_as_valid_pieces_in_order(server: DiscordServer) -> None:
    code = "```python\n" + "\n".join(f"value_{i} = {i} * 2  # double" for i in range(120)) + "\n```"
    answer = ("A long explanation sentence. " * 50) + "\n\n" + code + "\n\n"
    answer += "Closing remark number one. " * 200
    answer = answer[:5000].rstrip()

    async def long(message: ChatMessage) -> str:
        return answer

    async with running(server, long) as rig:
        await server.dispatch("MESSAGE_CREATE", mention(1002))
        await rig.posts(CHANNEL_ID, 3)
        await rig.bus.drain(timeout=10)
        bodies = [r.body for r in server.requests_to("POST", f"/channels/{CHANNEL_ID}/messages")]
    assert len(answer) == 5000 and len(bodies) >= 3
    assert all(len(b["content"]) <= 2000 for b in bodies)
    assert all(len(re.findall(r"^```", b["content"], flags=re.M)) % 2 == 0 for b in bodies)
    assert "message_reference" in bodies[0]
    assert all("message_reference" not in b for b in bodies[1:])
    assert bodies[0]["content"].startswith("A long explanation")
    assert bodies[-1]["content"].endswith(answer[-20:])


async def test_another_bots_message_is_not_published(server: DiscordServer) -> None:
    other_bot = {
        "id": "4242",
        "username": "otherbot",
        "discriminator": "0",
        "avatar": None,
        "bot": True,
    }
    async with running(server) as rig:
        await server.dispatch("MESSAGE_CREATE", mention(1003, "loop?", author=other_bot))
        await server.dispatch("MESSAGE_CREATE", mention(1004, "sentinel"))
        await rig.wait_seen(1)
        await rig.posts(CHANNEL_ID)
        await rig.bus.drain(timeout=10)
    assert [m.id for m in rig.seen] == ["1004"]  # the bot's earlier message never arrived
    assert len(server.requests_to("POST", f"/channels/{CHANNEL_ID}/messages")) == 1


async def test_dm_is_answered(server: DiscordServer) -> None:
    async with running(server) as rig:
        await server.dispatch(
            "MESSAGE_CREATE", load_fixture("discord_message_create_docs_example")["d"]
        )
        (body,) = await rig.posts(CHANNEL_ID)
    (seen,) = rig.seen
    assert seen.is_direct and seen.text == "Supa Hot"
    assert body["content"] == "you said: Supa Hot"
    assert body["message_reference"]["message_id"] == 334385199974967042


async def test_thread_message_uses_the_thread_conversation(server: DiscordServer) -> None:
    async with running(server) as rig:
        await server.dispatch("MESSAGE_CREATE", mention(1005, channel_id=THREAD_ID))
        (body,) = await rig.posts(THREAD_ID)
    (seen,) = rig.seen
    assert seen.conversation == ConversationKey(
        platform="discord", channel=str(CHANNEL_ID), thread=str(THREAD_ID)
    )
    assert body["message_reference"]["channel_id"] == THREAD_ID


async def test_typing_is_shown_until_the_answer(server: DiscordServer) -> None:
    async def after_typing(message: ChatMessage) -> str:
        await server.wait_request("POST", f"/channels/{CHANNEL_ID}/typing")
        return "done"

    async with running(server, after_typing) as rig:
        await server.dispatch("MESSAGE_CREATE", mention(1006))
        await rig.posts(CHANNEL_ID)
        await rig.bus.drain(timeout=10)
        assert rig.adapter.typing.active == 0  # stopped by the Reply, not left to time out
    (typing,) = server.requests_to("POST", f"/channels/{CHANNEL_ID}/typing")
    assert typing.headers["authorization"] == f"Bot {TOKEN}"


async def test_ambient_channel_message_is_published_without_typing(server: DiscordServer) -> None:
    async def quiet(message: ChatMessage) -> None:
        return None

    async with running(server, quiet, DISCORD_AMBIENT_CHANNELS=str(CHANNEL_ID)) as rig:
        await server.dispatch("MESSAGE_CREATE", plain_message(1007, "just chatting"))
        (seen,) = await rig.wait_seen(1)
        assert rig.adapter.typing.active == 0
    assert seen.ambient and not seen.addressed
    assert server.requests_to("POST", f"/channels/{CHANNEL_ID}/typing") == []


# -- deletions and commands ----------------------------------------------------------------------
async def test_deletions_publish_message_deleted(server: DiscordServer) -> None:
    async with running(server) as rig:
        await server.dispatch(
            "MESSAGE_DELETE",
            {"id": "2001", "channel_id": str(THREAD_ID), "guild_id": str(GUILD_ID)},
        )
        await server.dispatch(
            "MESSAGE_DELETE_BULK",
            {"ids": ["2003", "2002"], "channel_id": str(CHANNEL_ID), "guild_id": str(GUILD_ID)},
        )
        deleted = await rig.wait_deleted(3)
    thread = ConversationKey(platform="discord", channel=str(CHANNEL_ID), thread=str(THREAD_ID))
    channel = ConversationKey(platform="discord", channel=str(CHANNEL_ID))
    assert deleted == [
        MessageDeleted(conversation=thread, message_id="2001"),
        MessageDeleted(conversation=channel, message_id="2002"),
        MessageDeleted(conversation=channel, message_id="2003"),
    ]


def _interaction(interaction_id: str, command: str) -> dict[str, Any]:
    human = load_fixture("discord_message_create_docs_example")["d"]["author"]
    return {
        "id": interaction_id,
        "application_id": str(BOT_ID),
        "type": 2,
        "token": "interaction-token-secret",
        "version": 1,
        "guild_id": str(GUILD_ID),
        "channel_id": str(CHANNEL_ID),
        "channel": {
            "id": str(CHANNEL_ID),
            "type": 0,
            "guild_id": str(GUILD_ID),
            "name": "general",
            "position": 0,
        },
        "member": {
            "user": human,
            "roles": [],
            "joined_at": "2015-04-26T06:26:56.936000+00:00",
            "deaf": False,
            "mute": False,
            "flags": 0,
            "permissions": "0",
        },
        "data": {
            "id": "1",
            "name": "chorus",
            "type": 1,
            "options": [{"name": command, "type": 1, "options": []}],
        },
        "locale": "en-US",
        "app_permissions": "0",
        "entitlements": [],
        "attachment_size_limit": 10485760,
    }


async def test_slash_command_is_answered_ephemerally(server: DiscordServer) -> None:
    async def commands(message: ChatMessage) -> str:
        return "Nothing pinned yet." if message.text == "/pins" else "?"

    async with running(server, commands) as rig:
        (sync,) = server.requests_to("PUT", f"/applications/{BOT_ID}/commands")
        await server.dispatch("INTERACTION_CREATE", _interaction("3001", "pins"))
        (followup,) = await server.wait_request(
            "POST", f"/webhooks/{BOT_ID}/interaction-token-secret"
        )
        await rig.bus.drain(timeout=10)
    (group,) = sync.body
    assert group["name"] == "chorus"
    assert {o["name"] for o in group["options"]} == {"help", "pins", "forget", "reset"}
    (seen,) = rig.seen
    assert seen.text == "/pins" and seen.id == "3001" and seen.author.id == str(HUMAN_ID)
    (callback,) = server.requests_to("POST", "/interactions/3001/interaction-token-secret/callback")
    assert callback.body == {"type": 5, "data": {"flags": 64}}  # deferred, ephemeral
    assert followup.body["content"] == "Nothing pinned yet."
    assert followup.body["flags"] & 64
    assert followup.body["allowed_mentions"] == {"parse": []}
    assert server.requests_to("POST", f"/channels/{CHANNEL_ID}/messages") == []


# -- connection and failures ---------------------------------------------------------------------
async def test_gateway_drop_resumes_and_keeps_answering(server: DiscordServer) -> None:
    async with running(server) as rig:
        await server.dispatch("MESSAGE_CREATE", mention(1010, "before"))
        await rig.posts(CHANNEL_ID, 1)
        await server.drop()
        (resume,) = await server.wait_op(6)
        await server.dispatch("MESSAGE_CREATE", mention(1011, "after"))
        bodies = await rig.posts(CHANNEL_ID, 2)
    assert resume.connection == 2 and server.connections == 2
    assert resume.data["token"] == TOKEN and resume.data["session_id"] == "foo"
    assert [b["content"] for b in bodies] == ["you said: before", "you said: after"]


async def test_429_is_retried_and_the_message_arrives_once(server: DiscordServer) -> None:
    server.failures.append(rate_limited(0.01))
    async with running(server) as rig:
        await server.dispatch("MESSAGE_CREATE", mention(1020))
        await rig.posts(CHANNEL_ID, 2)
        await rig.bus.drain(timeout=10)
    assert len(server.requests_to("POST", f"/channels/{CHANNEL_ID}/messages")) == 2
    assert [m["content"] for m in server.created] == ["you said: hello"]
    assert rig.adapter.sender.rate_limited == 1


async def test_long_rate_limit_is_waited_out_by_the_chokepoint(server: DiscordServer) -> None:
    waits: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        waits.append(seconds)

    server.failures.append(rate_limited(45.0))  # over discord.py's 30 s: raised to us
    async with running(server, sleep=fake_sleep) as rig:
        await server.dispatch("MESSAGE_CREATE", mention(1021))
        await rig.posts(CHANNEL_ID, 2)
        await rig.bus.drain(timeout=10)
    assert waits == [45.0]
    assert [m["content"] for m in server.created] == ["you said: hello"]


async def test_failed_send_is_logged_acked_and_the_loop_goes_on(
    server: DiscordServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.failures.append(ScriptedFailure(403, {"message": "Missing Permissions", "code": 50013}))
    async with running(server) as rig:
        await server.dispatch("MESSAGE_CREATE", mention(1030, "first"))
        await rig.posts(CHANNEL_ID, 1)
        await rig.bus.drain(timeout=10)  # the failed reply was acked
        await server.dispatch("MESSAGE_CREATE", mention(1031, "second"))
        await rig.posts(CHANNEL_ID, 2)
    assert [m["content"] for m in server.created] == ["you said: second"]
    (record,) = [r for r in caplog.records if "could not send" in r.getMessage()]
    assert record.exc_info is not None and record.__dict__["reply_to_id"] == "1030"


async def test_bad_token_is_one_clear_error(server: DiscordServer) -> None:
    server.reject_token = True
    default_base = Route.BASE
    adapter = DiscordAdapter(InProcessBus(), _settings(server))
    with pytest.raises(ConfigError) as caught:
        await adapter.run()
    assert default_base == Route.BASE  # the class attribute is put back
    message = str(caught.value)
    assert "DISCORD_TOKEN" in message and "discord.com/developers" in message
    assert TOKEN not in message
    assert server.ops(2) == []  # never reached the gateway


async def test_disallowed_intent_is_one_clear_error(
    server: DiscordServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.identify_close_code = 4014
    adapter = DiscordAdapter(
        InProcessBus(), _settings(server, DISCORD_MESSAGE_CONTENT_INTENT="true")
    )
    with pytest.raises(ConfigError, match="DISCORD_MESSAGE_CONTENT_INTENT") as caught:
        await adapter.run()
    await adapter.aclose()
    assert "Privileged Gateway Intents" in str(caught.value)
    (identify,) = server.ops(2)
    assert identify.data["intents"] & MESSAGE_CONTENT
    assert any(r.levelno == logging.ERROR and "4014" in r.getMessage() for r in caplog.records)


async def test_without_content_intent_one_warning_and_no_privileged_intent(
    server: DiscordServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="chorus.discord")
    async with running(server):
        pass
    (identify,) = server.ops(2)
    assert not identify.data["intents"] & MESSAGE_CONTENT
    warnings = [r for r in caplog.records if "DISCORD_MESSAGE_CONTENT_INTENT" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING


def test_from_env_needs_only_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    bus = InProcessBus()
    assert DiscordAdapter.from_env(bus) is None
    monkeypatch.setenv("DISCORD_TOKEN", "abc")
    monkeypatch.setenv("DISCORD_ALWAYS_ANSWER_CHANNELS", "12,34")
    adapter = DiscordAdapter.from_env(bus)
    assert adapter is not None and adapter.platform == "discord"
    assert adapter.settings.always_answer_channels == frozenset({12, 34})
    assert not adapter.client.intents.message_content
    monkeypatch.setenv("DISCORD_GATEWAY_URL", "https://gateway.example")
    with pytest.raises(ConfigError, match="DISCORD_GATEWAY_URL"):
        DiscordAdapter.from_env(bus)


# -- the chokepoint on its own -------------------------------------------------------------------
async def test_sender_retries_dropped_connections_with_backoff_then_gives_up() -> None:
    waits: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        waits.append(seconds)

    sender = DiscordSender(
        sleep=fake_sleep, policy=RetryPolicy(max_retries=2, base_delay=1.0, max_delay=8.0)
    )
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise ConnectionResetError("peer reset")
        return "sent"

    assert await sender.call("channel:1", flaky, what="send") == "sent"
    assert calls == 3 and len(waits) == 2
    assert 0.5 <= waits[0] <= 1.0 and 1.0 <= waits[1] <= 2.0  # upper halves of 1 s, 2 s

    async def down() -> str:
        raise ConnectionRefusedError("down")

    with pytest.raises(ConnectionRefusedError):
        await sender.call("channel:1", down, what="send")
    assert len(waits) == 4  # two more waits, then the third failure is raised


async def test_sender_serialises_one_key_but_not_two() -> None:
    sender = DiscordSender()
    order: list[str] = []
    gate = asyncio.Event()

    async def first() -> None:
        order.append("first-start")
        await gate.wait()
        order.append("first-end")

    async def second() -> None:
        order.append("second")

    async def other() -> None:
        order.append("other")
        gate.set()

    a = asyncio.create_task(sender.call("channel:1", first, what="send"))
    b = asyncio.create_task(sender.call("channel:1", second, what="send"))
    c = asyncio.create_task(sender.call("channel:2", other, what="send"))
    await asyncio.wait_for(asyncio.gather(a, b, c), 5)
    # channel 2 ran while channel 1's first call was still open; channel 1 kept its order
    assert order == ["first-start", "other", "first-end", "second"]
    assert sender._locks == {}  # no lock left behind per channel
