"""The Discord adapter when things go wrong, end to end against the loopback gateway and REST stand-in: a dropped gateway, 429s and long rate limits, failed sends, a bad token, a disallowed intent, no content intent, configuration from the environment, and the outbound chokepoint on its own."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest
from discord.http import Route

from adapters.discord.adapter import DiscordAdapter
from adapters.discord.sender import DiscordSender
from bot.bus.base import InProcessBus
from bot.resilience import RetryPolicy
from bot.settings import ConfigError
from tests.discord_rig import MESSAGE_CONTENT, TOKEN, _settings, mention, running
from tests.loopback.base import ScriptedFailure
from tests.loopback.discord_server import (
    CHANNEL_ID,
    DiscordServer,
    guild_create,
    rate_limited,
)
from tests.platform_env import adapter_from_env


@pytest.fixture
async def server() -> AsyncIterator[DiscordServer]:
    async with DiscordServer() as srv:
        assert isinstance(srv, DiscordServer)
        srv.guilds = [guild_create()]
        yield srv


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


MALFORMED: list[tuple[str, dict[str, object]]] = [
    ("MESSAGE_CREATE", {"id": "1101", "channel_id": str(CHANNEL_ID)}),
    ("MESSAGE_CREATE", {**mention(1102), "author": None}),
    ("MESSAGE_CREATE", {**mention(1103), "author": None}),  # the same again: logged once
    ("MESSAGE_DELETE", {"id": None, "channel_id": str(CHANNEL_ID)}),
]


async def test_payloads_discord_py_cannot_parse_are_skipped_and_the_connection_stays(
    server: DiscordServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Each of these raised out of discord.py's read loop and ended the client (and, before
    supervision, the process with every other platform)."""
    with caplog.at_level(logging.WARNING, logger="chorus.discord"):
        async with running(server) as rig:
            for event, data in MALFORMED:
                await server.dispatch(event, data)
            await server.dispatch("MESSAGE_CREATE", mention(1104, "still there?"))
            (body,) = await rig.posts(CHANNEL_ID, 1)
    assert body["content"] == "you said: still there?"
    assert server.connections == 1 and len(server.ops(2)) == 1  # never reconnected
    assert rig.adapter.parser_guard.skipped == {"MESSAGE_CREATE": 3, "MESSAGE_DELETE": 1}
    skipped = [r for r in caplog.records if r.getMessage().startswith("discord payload skipped")]
    assert sorted(r.event for r in skipped) == ["MESSAGE_CREATE", "MESSAGE_DELETE"]  # type: ignore[attr-defined]


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
    assert adapter_from_env(DiscordAdapter, bus) is None
    monkeypatch.setenv("DISCORD_TOKEN", "abc")
    monkeypatch.setenv("DISCORD_ALWAYS_ANSWER_CHANNELS", "12,34")
    adapter = adapter_from_env(DiscordAdapter, bus)
    assert adapter is not None and adapter.platform == "discord"
    assert adapter.settings.always_answer_channels == frozenset({12, 34})
    assert not adapter.client.intents.message_content
    monkeypatch.setenv("DISCORD_GATEWAY_URL", "https://gateway.example")
    with pytest.raises(ConfigError, match="DISCORD_GATEWAY_URL"):
        adapter_from_env(DiscordAdapter, bus)


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
