"""The Slack adapter end to end: start-up errors, configuration from the environment, Socket
Mode (acks, answers, reconnects, slash commands over the socket) and thread participation,
against the loopback Slack (tests/slack_rig.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.adapter import SlackAdapter
from adapters.slack.convert import PostArgs
from adapters.slack.sender import SlackSender, SlackSendError
from bot.bus.base import InProcessBus
from bot.resilience import RetryPolicy
from bot.settings import ConfigError
from tests.loopback.slack_server import SlackServer
from tests.platform_env import adapter_from_env
from tests.slack_rig import (
    BOT_TOKEN,
    Rig,
    fixture,
    mention,
    running_rig,
    slack_settings,
)


@pytest.fixture
async def server() -> AsyncIterator[SlackServer]:
    async with SlackServer(bot_token=BOT_TOKEN) as srv:
        assert isinstance(srv, SlackServer)
        yield srv


@pytest.fixture
async def ambient_rig(server: SlackServer) -> AsyncIterator[Rig]:
    async for value in running_rig(server, ambient_channels=frozenset({"C111"})):
        yield value


# -- startup errors -----------------------------------------------------------------------------
async def test_bad_bot_token_is_one_clear_error(server: SlackServer) -> None:
    adapter = SlackAdapter(InProcessBus(), slack_settings(server, bot_token="xoxb-revoked"))
    with pytest.raises(
        ConfigError, match=r"SLACK_BOT_TOKEN was rejected by Slack \(invalid_auth\)"
    ):
        await adapter.start()
    await adapter.aclose()


async def test_bad_app_token_is_one_clear_error(server: SlackServer) -> None:
    settings = slack_settings(server, app_token="xapp-wrong", signing_secret=None)
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
    async for value in running_rig(server, app_token="xapp-test", signing_secret=None):
        yield value


async def test_socket_mode_acks_answers_and_reconnects(socket_rig: Rig) -> None:
    rig, server = socket_rig, socket_rig.server
    await server.wait_for(lambda: server.socket_connections == 1)
    envelope = await server.send_envelope("events_api", mention())
    await server.wait_acked(envelope)
    await rig.settle()
    assert [p["thread_ts"] for p in server.posts] == ["1595926230.009600"]

    await server.drop_socket()  # Slack closes sockets now and then; the SDK reconnects
    # (at least once: on a starved machine the rig's 0.5 s heartbeat may drop one more socket)
    await server.wait_for(lambda: server.socket_connections >= 2 and bool(server._sockets))
    assert len(server.calls("/api/apps.connections.open")) == server.socket_connections
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


# -- the chokepoint: posting is not idempotent -----------------------------------------------------
@contextlib.asynccontextmanager
async def stalled_sender(server: SlackServer, retries: int) -> AsyncIterator[SlackSender]:
    """A sender whose client gives up after 1 s, talking to a Slack that records each
    chat.postMessage and then never answers it (until the test ends)."""
    server.stall_posts = asyncio.Event()
    client = AsyncWebClient(
        token=BOT_TOKEN, base_url=server.url + "/api/", timeout=1, retry_handlers=[]
    )
    policy = RetryPolicy(max_retries=retries, base_delay=0.01)
    sender = SlackSender(client, interval=0.0, policy=policy)
    try:
        yield sender
    finally:
        server.stall_posts.set()
        await sender.aclose()


async def test_a_post_that_timed_out_after_sending_is_not_posted_again(
    server: SlackServer,
) -> None:
    """Slack does not deduplicate chat.postMessage: a retry after a timeout posted twice."""
    async with stalled_sender(server, retries=3) as sender:
        with pytest.raises(SlackSendError, match="chat.postMessage failed: TimeoutError"):
            await sender.post_message(PostArgs(channel="C111", text="once", thread_ts=None))
    assert len(server.calls("/api/chat.postMessage")) == 1


async def test_a_call_that_may_run_twice_is_retried_after_a_timeout(server: SlackServer) -> None:
    """A call the chokepoint may repeat (the default) is retried after a timeout, as before."""
    async with stalled_sender(server, retries=1) as sender:
        with pytest.raises(SlackSendError, match="failed after 2 attempts"):
            await sender.request(
                lambda: sender.client.chat_postMessage(channel="C111", text="read-like"),
                what="chat.postMessage (as if idempotent)",
            )
    assert len(server.calls("/api/chat.postMessage")) == 2
