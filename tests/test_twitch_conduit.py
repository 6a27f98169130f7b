"""Twitch conduits in one process: the grant checks, the fair share, and ``ConduitShards``
(real twitchio 3 against the loopback Twitch's conduit API) through the events the e2e test
cannot steer: a shard's connection dropped, a ``session_reconnect`` of a shard, two processes'
shares, a clean stop handing the shards over, a channel left, a channel refused, a gateway started with
another shard count resizing the conduit, a gateway beyond the shard count standing by.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import WSCloseCode

from adapters.twitch import TwitchAdapter
from adapters.twitch.conduit import fair_share
from adapters.twitch.grants import check_bot_scopes, refusal
from bot.bus.base import InProcessBus
from bot.settings import ConfigError
from bot.state import connect
from bot.state.conduits import RedisConduitStore
from tests.loopback.twitch_server import CLIENT_ID, TwitchServer
from tests.platform_env import adapter_from_env
from tests.test_twitch_e2e import BOT_ID, CHANNEL, CHANNEL_LOGIN, server, twitch_env
from tests.waiting import until

__all__ = ["server", "twitch_env"]  # fixtures used here
WAIT = 30.0
OTHER, OTHER_LOGIN = "5550001", "other"


def test_the_bot_must_have_granted_user_read_chat_and_user_bot() -> None:
    check_bot_scopes(["user:read:chat", "user:bot", "user:write:chat"], "mybot")
    with pytest.raises(ConfigError) as caught:
        check_bot_scopes(["user:read:chat", "user:write:chat"], "mybot")
    text = str(caught.value)
    assert "lacks user:bot" in text and "mybot" in text and "chorus auth twitch" in text


def test_a_refused_chat_subscription_says_what_the_broadcaster_must_do() -> None:
    why = refusal(
        status=403,
        sub_type="channel.chat.message",
        channel="streamer",
        bot_login="mybot",
        client_id="abc",
    )
    assert "the broadcaster streamer has not granted this app (client id abc)" in why
    assert "channel:bot" in why and "/mod mybot" in why
    assert "chorus twitch join streamer" in why
    assert "TWITCH_CLIENT_SECRET" in refusal(
        status=401, sub_type="stream.online", channel="s", bot_login="b", client_id="c"
    )
    assert "HTTP 500" in refusal(
        status=500, sub_type="stream.online", channel="s", bot_login="b", client_id="c"
    )


@pytest.mark.parametrize(
    ("shards", "members", "share"), [(4, 1, 4), (4, 2, 2), (4, 3, 2), (5, 2, 3), (2, 5, 1)]
)
def test_fair_share(shards: int, members: int, share: int) -> None:
    assert fair_share(shards, members) == share


async def _adapter(server: TwitchServer, key_tag: str) -> tuple[TwitchAdapter, Any]:
    redis = await connect.open_redis(f"memory://conduit-{key_tag}")
    adapter = adapter_from_env(TwitchAdapter, InProcessBus(), redis)
    assert adapter is not None
    return adapter, redis


@pytest.fixture
async def gateways(
    server: TwitchServer, twitch_env: Any, key_tag: str
) -> AsyncIterator[tuple[TwitchAdapter, TwitchAdapter]]:
    server.grant(BOT_ID, "access-0", "refresh-0")
    server.add_user(OTHER, OTHER_LOGIN)
    server.channel_bot.add(CHANNEL)  # the other channel's broadcaster granted nothing
    server.keepalive_every = 2.0
    twitch_env(
        server,
        TWITCH_TRANSPORT="conduit",
        TWITCH_CONDUIT_SHARDS="4",
        TWITCH_SHARD_LEASE_SECONDS="3",
        TWITCH_TOKEN_STORE="redis",
    )
    first, redis1 = await _adapter(server, key_tag)
    second, redis2 = await _adapter(server, key_tag)
    try:
        yield first, second
    finally:
        for adapter in (first, second):
            await adapter.aclose()
        await redis1.aclose()
        await redis2.aclose()


def _patches(server: TwitchServer) -> int:
    return len([r for r in server.requests if r.method == "PATCH"])


async def test_shards_split_survive_drops_and_handovers_and_move_on_a_clean_stop(
    server: TwitchServer, gateways: tuple[TwitchAdapter, TwitchAdapter]
) -> None:
    first, second = gateways
    await first.start()
    assert first.conduit is not None
    assert len(server.shard_sessions()) == 4 and await first.ready()
    assert server.conduit_subscribed(CHANNEL) == {
        "channel.chat.message",
        "channel.chat.message_delete",
        "channel.chat.clear_user_messages",
        "channel.chat.notification",
    }
    await second.start()
    assert second.conduit is not None
    assert second.conduit.conduit_id == first.conduit.conduit_id  # adopted, not created
    assert len(server.conduits) == 1

    def split() -> bool:
        a, b = first.conduit, second.conduit
        assert a is not None and b is not None
        return len(a.sessions) == 2 and len(b.sessions) == 2 and len(server.shard_sessions()) == 4

    await until(split, limit=WAIT)
    assert sorted(first.conduit.sessions) == [0, 1] and sorted(second.conduit.sessions) == [2, 3]

    conduit = first.conduit.conduit_id
    # the connection of shard 3 drops: its process opens another and PATCHes the shard to it
    old = second.conduit.sessions[3]
    conn = server._live(old)
    assert conn is not None
    await conn.ws.close(code=WSCloseCode.GOING_AWAY)
    await until(lambda: server.shard_sessions().get(f"{conduit}/3", old) != old, limit=WAIT)
    await until(lambda: len(server.shard_sessions()) == 4, limit=WAIT)

    # Twitch moves shard 0 with a session_reconnect: the shard follows, nothing is re-PATCHed
    patches = _patches(server)
    session0 = first.conduit.sessions[0]
    await server.reconnect(session0)
    await until(lambda: session0 not in server.live_sessions(), limit=WAIT)
    key0 = f"{conduit}/0"
    assert server.shard_sessions()[key0] != session0
    await asyncio.sleep(2 * first.settings.shard_lease_seconds / 3)  # two ticks go by
    assert _patches(server) == patches
    assert await first.ready()

    # a clean stop hands the shards back at once: the other process takes all four
    await first.aclose()

    def moved() -> bool:
        assert second.conduit is not None
        return len(second.conduit.sessions) == 4 and len(server.shard_sessions()) == 4

    await until(moved, limit=WAIT)
    assert await second.ready()


async def test_channels_joined_and_left_at_run_time_follow_the_store(
    server: TwitchServer,
    gateways: tuple[TwitchAdapter, TwitchAdapter],
    caplog: pytest.LogCaptureFixture,
) -> None:
    first, _ = gateways
    await first.start()
    assert first.conduit is not None
    assert first.channels == {CHANNEL: CHANNEL_LOGIN}
    store = RedisConduitStore(first.conduit_store.redis)  # type: ignore[attr-defined]
    caplog.set_level(logging.ERROR, logger="chorus.twitch.conduit")
    await store.join_channel(CLIENT_ID, OTHER_LOGIN)
    await store.leave_channel(CLIENT_ID, CHANNEL_LOGIN)
    await until(
        lambda: server.conduit_subscribed(CHANNEL) == set() and bool(caplog.records), limit=WAIT
    )
    assert first.channels == {OTHER: OTHER_LOGIN}
    assert server.conduit_subscribed(OTHER) == set()  # refused: no channel:bot, not a mod
    refused = [r.getMessage() for r in caplog.records if "has not granted" in r.getMessage()]
    assert len(refused) == 1 and "/mod mybot" in refused[0]
    # the broadcaster makes the bot a moderator; joining again subscribes it
    server.moderators[OTHER] = {BOT_ID}
    await store.join_channel(CLIENT_ID, OTHER_LOGIN)
    await until(lambda: "channel.chat.message" in server.conduit_subscribed(OTHER), limit=WAIT)


@pytest.mark.parametrize(
    ("env", "name", "says"),
    [
        ({"TWITCH_TRANSPORT": "websocket"}, "chan", "only with TWITCH_TRANSPORT=conduit"),
        ({"CHORUS_REDIS_URL": "memory://"}, "chan", "CHORUS_REDIS_URL=redis://"),
        ({}, "not a channel", "twitch.tv/<login>"),
        ({"TWITCH_CLIENT_ID": ""}, "chan", "TWITCH_CLIENT_ID is not set"),
    ],
)
def test_chorus_twitch_join_refuses_what_would_not_work(
    env: dict[str, str], name: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from bot.cli_config import twitch_command
    from bot.settings import load_settings

    environ = {
        "TWITCH_CLIENT_ID": "app",
        "TWITCH_TRANSPORT": "conduit",
        "CHORUS_REDIS_URL": "redis://127.0.0.1:9/0",
        **env,
    }
    settings = load_settings(environ=environ, env_file=None, config=False, warn=False)
    assert twitch_command(settings, "join", name) == 2
    err = capsys.readouterr().err
    assert err.startswith("chorus: twitch join: ") and says in err


async def test_a_gateway_started_with_another_shard_count_resizes_the_conduit(
    server: TwitchServer, twitch_env: Any, key_tag: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Update Conduits: a gateway started with more shards grows the conduit (the new shards
    get a transport, the running gateway takes its share of them); one started with fewer
    shrinks it (every shard that stays keeps a transport, none of the dropped ones is held);
    a gateway beyond the shard count holds none and says so."""
    server.grant(BOT_ID, "access-0", "refresh-0")
    server.channel_bot.add(CHANNEL)
    server.keepalive_every = 2.0
    caplog.set_level(logging.INFO, logger="chorus.twitch.conduit")
    adapters: list[tuple[TwitchAdapter, Any]] = []

    async def gateway(shards: int) -> TwitchAdapter:
        twitch_env(
            server,
            TWITCH_TRANSPORT="conduit",
            TWITCH_CONDUIT_SHARDS=str(shards),
            TWITCH_SHARD_LEASE_SECONDS="3",
            TWITCH_TOKEN_STORE="redis",
        )
        adapters.append(await _adapter(server, key_tag))
        await adapters[-1][0].start()
        return adapters[-1][0]

    def held(*running: TwitchAdapter) -> list[list[int]]:
        return [sorted(a.conduit.sessions) for a in running if a.conduit is not None]

    def resizes() -> list[dict[str, Any]]:
        return [
            r.body if isinstance(r.body, dict) else dict(r.query)
            for r in server.requests
            if r.method == "PATCH" and r.path == "/helix/eventsub/conduits"
        ]

    try:
        first = await gateway(4)
        assert first.conduit is not None
        conduit = server.conduits[first.conduit.conduit_id]
        assert len(server.shard_sessions()) == 4 and resizes() == []

        second = await gateway(6)  # grows it: 6 shards, each on a socket, split 3 and 3
        assert len(conduit.shards) == 6
        assert resizes() == [{"id": conduit.id, "shard_count": "6"}]
        await until(
            lambda: (
                len(server.shard_sessions()) == 6 and held(first, second) == [[0, 1, 2], [3, 4, 5]]
            ),
            limit=WAIT,
        )
        assert first.conduit.shard_count == 6  # learnt from the store, not restarted

        third = await gateway(3)  # shrinks it: shards 3..5 dropped, 0..2 kept on a socket
        assert len(conduit.shards) == 3 and resizes()[-1]["shard_count"] == "3"
        await until(
            lambda: (
                len(server.shard_sessions()) == 3
                and sorted(sum(held(first, second, third), [])) == [0, 1, 2]
            ),
            limit=WAIT,
        )
        assert {len(s) for s in held(first, second, third)} == {1}
        assert len(server.conduits) == 1
        assert not any("holds no twitch conduit shard" in r.getMessage() for r in caplog.records)

        fourth = await gateway(3)  # a fourth gateway for three shards stands by, and says so
        assert fourth.conduit is not None and fourth.conduit.sessions == {}
        idle = [r for r in caplog.records if "holds no twitch conduit shard" in r.getMessage()]
        assert len(idle) == 1 and "TWITCH_CONDUIT_SHARDS" in idle[0].getMessage()
        assert len(resizes()) == 2  # the same count: nothing to resize
    finally:
        for adapter, redis in adapters:
            await adapter.aclose()
            await redis.aclose()
