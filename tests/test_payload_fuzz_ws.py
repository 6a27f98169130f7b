"""Fuzzed platform payloads over the adapters' real websockets (property tests).

Discord: each recorded MESSAGE_CREATE (and a MESSAGE_DELETE and MESSAGE_UPDATE made of it),
mutated (``tests/payload_fuzz.py``: fields removed, nulled, retyped, nested too), is dispatched
by the loopback gateway as a received frame: discord.py's read loop parses it under the
adapter's ``ParserGuard``, then our handlers convert what parsed. Twitch: each recorded
EventSub event (chat message, deletion, clear-user, chat notice), mutated the same way, is
delivered by the loopback as a ``notification`` on the subscribed websocket and parsed by
twitchio 3. Slack
Socket Mode: each recorded Events API body, mutated, is pushed as an ``events_api`` envelope
through slack-sdk's socket client into bolt; every envelope must be acknowledged.

The property, per example: nothing escapes (no ERROR log: no "exception in handler", no dead
read loop), and a well-formed message right after is converted and published on the same
connection (the socket never reconnected). Deterministic and bounded (``derandomize``).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.events import ChatMessage
from tests.discord_rig import Rig as DiscordRig
from tests.discord_rig import mention, running
from tests.loopback.discord_server import DiscordServer, guild_create
from tests.loopback.slack_server import SlackServer
from tests.payload_fuzz import Held, Pick, apply, escapes, fixture, mutations
from tests.slack_rig import BOT_TOKEN, running_rig
from tests.slack_rig import Rig as SlackRig
from tests.slack_rig import mention as slack_mention
from tests.test_payload_fuzz_http import SLACK, slack_junk
from tests.test_twitch_e2e import CHANNEL, CHAT, chat_event, rig, server, twitch_env  # noqa: F401  (fixtures)
from tests.test_twitch_e2e import Rig as TwitchRig
from tests.waiting import until

FUZZ = settings(
    derandomize=True,
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
_numbers = itertools.count(1)


# -- Discord ---------------------------------------------------------------------------------------
def _discord_messages() -> list[dict[str, Any]]:
    messages = []
    for name in (
        "discord_message_create",
        "discord_message_create_docs_example",
        "discord_message_create_reply",
    ):
        data: dict[str, Any] = fixture("discord", name)["d"]
        for attachment in data.get("attachments") or []:
            attachment.pop("waveform", None)  # not base64 in hikari's fixture (see .src.txt)
        messages.append(data)
    return messages


DISCORD = _discord_messages()
DISCORD_EVENTS = ("MESSAGE_CREATE", "MESSAGE_CREATE", "MESSAGE_UPDATE", "MESSAGE_DELETE")


async def _silent(message: ChatMessage) -> str | None:
    return None  # published is what is checked; no reply needed


@pytest.fixture
async def discord() -> AsyncIterator[Held[DiscordRig]]:
    async with DiscordServer() as gateway:
        gateway.guilds = [guild_create()]
        async with running(gateway, _silent) as running_rig:
            yield Held(running_rig)


@FUZZ
@given(
    which=st.integers(0, len(DISCORD) - 1),
    event=st.sampled_from(DISCORD_EVENTS),
    picks=mutations(),
)
async def test_discord_gateway_survives_mutated_dispatches(
    discord: Held[DiscordRig], which: int, event: str, picks: list[Pick]
) -> None:
    bot, n = discord.value, next(_numbers)
    data = dict(DISCORD[which], id=str(800_000_000_000_000_000 + n))
    if event == "MESSAGE_DELETE":
        data = {k: data[k] for k in ("id", "channel_id", "guild_id") if k in data}
    junk = apply(data, picks)
    sentinel = f"sentinel {n}"
    with escapes() as caught:
        await bot.server.dispatch(event, junk)
        await bot.server.dispatch("MESSAGE_CREATE", mention(900_000_000_000_000_000 + n, sentinel))
        await until(lambda: any(m.text.endswith(sentinel) for m in bot.seen), every=0.005)
    assert caught.take() == [], (event, junk)
    assert bot.server.connections == 1, "the gateway connection stayed up"


# -- Twitch ----------------------------------------------------------------------------------------
def _twitch_events() -> list[tuple[str, dict[str, Any]]]:
    events = []
    for name in (
        "twitch_channel_chat_message",
        "twitch_channel_chat_message_docs_example",
        "twitch_channel_chat_message_cheer",
    ):
        events.append((CHAT, fixture("twitch", name)["payload"]["event"]))
    for name, kind in (
        ("twitch_channel_chat_message_delete", "channel.chat.message_delete"),
        ("twitch_channel_chat_clear_user_messages", "channel.chat.clear_user_messages"),
    ):
        events.append((kind, fixture("twitch", name)["event"]))
    for notice in ("sub", "resub", "sub_gift", "community_sub_gift", "raid", "announcement"):
        name = f"twitch_channel_chat_notification_{notice}"
        events.append(("channel.chat.notification", fixture("twitch", name)["payload"]["event"]))
    for _, event in events:
        event["broadcaster_user_id"] = CHANNEL  # the channel the rig subscribed to
    return events


TWITCH = _twitch_events()


@pytest.fixture
async def twitch(rig: TwitchRig) -> AsyncIterator[Held[TwitchRig]]:  # noqa: F811
    yield Held(rig)


@FUZZ
@given(which=st.integers(0, len(TWITCH) - 1), picks=mutations())
async def test_twitch_eventsub_survives_mutated_notifications(
    twitch: Held[TwitchRig], which: int, picks: list[Pick]
) -> None:
    bot, n = twitch.value, next(_numbers)
    kind, event = TWITCH[which]
    if kind == CHAT:
        event = dict(event, message_id=f"fuzz-{n}")
    junk = apply(event, picks)
    sentinel = f"sentinel {n}"
    connections = len(bot.server.connections)
    with escapes() as caught:
        await bot.server.notify(kind, junk)
        assert await bot.server.notify(CHAT, chat_event(f"sentinel-{n}", sentinel)) == 1
        await until(lambda: any(m.text == sentinel for m in bot.seen), every=0.005)
    assert caught.take() == [], (kind, junk)
    assert len(bot.server.connections) == connections, "the EventSub socket stayed up"


async def test_twitchio_parse_failures_are_one_warning_a_minute_and_counted(
    twitch: Held[TwitchRig], caplog: pytest.LogCaptureFixture
) -> None:
    """twitchio logs each notification it cannot parse at CRITICAL with a traceback; the
    adapter's guard turns that into one WARNING a minute naming the error type, and counts."""
    bot = twitch.value
    guard = bot.adapter.parse_guard
    before = guard.skipped
    guard._logged_at = None  # a fresh minute (the guard is the process's one)
    broken = {k: v for k, v in TWITCH[0][1].items() if k != "broadcaster_user_login"}
    with caplog.at_level(logging.WARNING):
        for n in range(3):
            await bot.server.notify(CHAT, dict(broken, message_id=f"broken-{n}"))
        assert await bot.server.notify(CHAT, chat_event("after-broken", "still here")) == 1
        await until(lambda: any(m.text == "still here" for m in bot.seen), every=0.005)
    assert guard.skipped - before == 3
    skipped = [r for r in caplog.records if "twitch notification skipped" in r.getMessage()]
    assert len(skipped) == 1 and skipped[0].levelno == logging.WARNING
    assert skipped[0].exc_info is None and skipped[0].__dict__["error"] == "KeyError"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


# -- Slack Socket Mode -----------------------------------------------------------------------------
@pytest.fixture
async def slack_socket() -> AsyncIterator[Held[SlackRig]]:
    async with SlackServer(bot_token=BOT_TOKEN) as slack:
        # The product's ping interval: with the rig's 0.5 s, aiohttp drops a socket whose pong
        # is 0.25 s late, which a loaded machine can be, and the fuzz asserts the socket stays up.
        async for socket_rig in running_rig(
            slack, app_token="xapp-test", signing_secret=None, ping_interval=10.0
        ):
            await slack.wait_for(lambda: slack.socket_connections == 1)
            yield Held(socket_rig)


@FUZZ
@given(name=st.sampled_from(SLACK), picks=mutations())
async def test_slack_socket_mode_survives_mutated_envelopes(
    slack_socket: Held[SlackRig], name: str, picks: list[Pick]
) -> None:
    bot, n = slack_socket.value, next(_numbers)
    junk = slack_junk(name, picks, f"EvSocket{n}")
    sentinel = f"sentinel {n}"
    with escapes() as caught:
        await bot.server.wait_acked(await bot.server.send_envelope("events_api", junk))
        await bot.settle()
        envelope = await bot.server.send_envelope(
            "events_api", slack_mention(f"EvSocketSentinel{n}", sentinel)
        )
        await bot.server.wait_acked(envelope)
        await bot.settle()
    assert caught.take() == [], junk
    assert any(m.text == sentinel for m in bot.seen), junk
    assert bot.server.socket_connections == 1, "the socket stayed up"
