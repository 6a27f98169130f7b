"""Each adapter's ``ready()`` (``/readyz``'s ``adapter:<platform>``) against its loopback
platform: True while the connection is up, False while the platform drops or refuses it, True
again once the SDK has reconnected by itself. Before these, no adapter could tell, so
``/readyz`` answered 200 with Discord's gateway down or the Slack socket gone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from adapters.discord.adapter import DiscordAdapter
from adapters.youtube import YouTubeAdapter
from bot.bus.base import InProcessBus
from bot.state import connect
from tests.discord_rig import _settings, mention, running
from tests.loopback.discord_server import CHANNEL_ID, DiscordServer, guild_create
from tests.loopback.slack_server import SlackServer
from tests.loopback.twitch_server import TwitchServer
from tests.loopback.ws_gate import WebsocketGate
from tests.loopback.youtube_server import VIDEO_ID, YouTubeServer
from tests.slack_rig import BOT_TOKEN, running_rig
from tests.slack_rig import mention as slack_mention
from tests.test_twitch_e2e import (
    BOT_ID,
    BOT_LOGIN,
    CHANNEL,
    CHANNEL_LOGIN,
    _rig,
    twitch_env,  # noqa: F401  (a fixture)
)
from tests.test_youtube_e2e import FakeTime as YouTubeTime
from tests.test_youtube_e2e import Rig as YouTubeRig
from tests.waiting import until

Check = Callable[[], Awaitable[bool]]


# -- Discord ---------------------------------------------------------------------------------------
async def test_discord_is_ready_while_its_gateway_session_is_up() -> None:
    async with DiscordServer() as discord:
        discord.guilds = [guild_create()]
        assert not await DiscordAdapter(InProcessBus(), _settings(discord)).ready()  # not run
        async with running(discord) as rig:
            await until(rig.adapter.ready, limit=60)
            await discord.go_down()  # Discord's gateway is down: dropped, then refused
            await discord.wait_for(lambda: discord.refused >= 1, limit=30)
            assert not await rig.adapter.ready()
            discord.come_back()
            await until(rig.adapter.ready, limit=60)  # discord.py reconnected the shard by itself
            # a new session on a new connection: resumed, or (discord.py's sharded client, once
            # a resume was refused) identified again
            assert discord.ops(6) or len(discord.ops(2)) >= 2, "no new session"
            assert discord.connections >= 2
            await discord.dispatch("MESSAGE_CREATE", mention(1201, "back?"))
            (body,) = await rig.posts(CHANNEL_ID, 1)
        assert body["content"] == "you said: back?"
        assert not await rig.adapter.ready()  # closed


# -- Slack -----------------------------------------------------------------------------------------
@pytest.fixture
async def slack() -> AsyncIterator[SlackServer]:
    async with SlackServer(bot_token=BOT_TOKEN) as srv:
        yield srv


async def test_slack_socket_mode_is_ready_while_the_socket_is_connected(
    slack: SlackServer,
) -> None:
    async for rig in running_rig(slack, app_token="xapp-test", signing_secret=None):
        await until(rig.adapter.ready, limit=60)
        slack.refuse_sockets = True
        await slack.drop_socket()  # the socket is gone and Slack refuses a new one
        await slack.wait_for(lambda: slack.refused_sockets >= 1, limit=30)
        assert not await rig.adapter.ready()
        slack.refuse_sockets = False
        await until(rig.adapter.ready, limit=60)  # slack-sdk reconnected by itself
        envelope = await slack.send_envelope("events_api", slack_mention(text="back?"))
        await slack.wait_acked(envelope)
        await rig.settle()
        assert [m.text for m in rig.seen] == ["back?"]
    assert not await rig.adapter.ready()


async def test_slack_http_mode_is_ready_while_the_events_endpoint_listens(
    slack: SlackServer,
) -> None:
    async for rig in running_rig(slack):
        assert await rig.adapter.ready()
        status, _ = await rig.post(slack_mention())
        assert status == 200
    assert not await rig.adapter.ready()  # the endpoint is closed


# -- Twitch ----------------------------------------------------------------------------------------
@pytest.fixture
async def twitch() -> AsyncIterator[TwitchServer]:
    async with TwitchServer() as srv:
        srv.add_user(BOT_ID, BOT_LOGIN)
        srv.add_user(CHANNEL, CHANNEL_LOGIN)
        srv.grant(BOT_ID, "access-0", "refresh-0")
        yield srv


async def _keepalives(twitch: TwitchServer) -> None:
    """Twitch sends ``session_keepalive`` when it has nothing else to say; without it twitchio
    reconnects every keepalive timeout, which is not what this test is about."""
    while True:
        await twitch.keepalive()
        await asyncio.sleep(2)


async def test_twitch_is_ready_while_the_eventsub_socket_is_welcomed_and_subscribed(
    twitch: TwitchServer,
    twitch_env: Any,  # noqa: F811 (the fixture imported above)
    key_tag: str,
) -> None:
    async with WebsocketGate(twitch.ws_url) as gate:
        twitch_env(twitch, TWITCH_EVENTSUB_WS_URL=gate.url)
        rig = await _rig(twitch, key_tag)
        runner = asyncio.create_task(rig.adapter.run())
        keepalives = asyncio.create_task(_keepalives(twitch))

        async def refused() -> bool:
            return gate.refused > 0

        try:
            await until(rig.adapter.ready, limit=60)
            assert len(twitch.subscriptions) == 4  # chat, deletions, clears, notices
            await gate.go_down()  # Twitch drops the socket, then refuses new ones
            await until(refused, limit=30)
            assert not await rig.adapter.ready()
            gate.come_back()
            await until(
                rig.adapter.ready, limit=60
            )  # twitchio reconnected, was welcomed, re-subscribed
            assert (await rig.say("m-ready-1")).text == "@mybot what is Kappa ?"
        finally:
            keepalives.cancel()
            await asyncio.wait_for(rig.adapter.aclose(), 30)
            await asyncio.wait_for(runner, 10)
            for task in [*rig.tasks, keepalives]:
                task.cancel()
            await asyncio.gather(*rig.tasks, keepalives, return_exceptions=True)
            await rig.bus.close()
            await rig.redis.aclose()
        assert not await rig.adapter.ready()


# -- YouTube ---------------------------------------------------------------------------------------
class _Sampling(YouTubeTime):
    """The e2e fake clock, and at each of the adapter's sleeps: (seconds, ready())."""

    adapter: YouTubeAdapter | None = None
    samples: list[tuple[float, bool]]

    async def sleep(self, seconds: float) -> None:
        assert self.adapter is not None
        self.samples.append((seconds, await self.adapter.ready()))
        await super().sleep(seconds)


async def test_youtube_is_ready_while_its_reads_succeed(key_tag: str) -> None:
    async with YouTubeServer() as youtube:
        redis = await connect.open_redis(f"memory://yt-ready-{key_tag}")
        rig = YouTubeRig(youtube, redis, key_tag)
        time = rig.time = _Sampling(rig.bus)
        time.samples = []

        def after_the_first_read(sleeps: int) -> None:
            if sleeps == 1:
                for _ in range(5):  # the next read fails for good: 1 try and 4 retries
                    youtube.fail("list", 503, "backendError")
                youtube.fail("list", 403, "quotaExceeded")  # then the quota is out until midnight

        time.on_sleep = after_the_first_read
        try:
            time.stop_when = lambda: youtube.calls["list"] >= 8
            task = await rig.start(video_id=VIDEO_ID)
            time.adapter = rig.adapter
            assert rig.adapter is not None and not await rig.adapter.ready()  # nothing read
            await asyncio.wait_for(time.parked.wait(), 60)
            assert not task.done()
            samples = time.samples
            assert samples[0][1], samples  # the first read (the backlog) succeeded
            gave_up = [ready for seconds, ready in samples if seconds == 60.0]
            assert gave_up == [False], samples  # the read failed for good: retrying in a minute
            resets = [ready for seconds, ready in samples if seconds > 3600]
            assert resets == [False], samples  # quota out: waiting for the reset
            assert await rig.adapter.ready()  # the read after the reset succeeded
            rig.time.now += timedelta(hours=1)  # ...but no read for an hour: overdue
            assert not await rig.adapter.ready()
        finally:
            await rig.close()
            await redis.aclose()
