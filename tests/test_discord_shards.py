"""Discord shards in one process: the real discord.py ``AutoShardedClient`` against the
loopback gateway (which recommends the shard count and routes each guild to its shard).

A dropped shard resumes while the others go on answering; one shard restarted alone (what the
supervisor does to a shard that stays down) gets a new session and the others keep theirs;
readiness is per shard; the IDENTIFYs of one process keep the window too.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from adapters.discord.adapter import DiscordAdapter
from adapters.registry import adapter_gauges
from bot.bus.base import InProcessBus
from bot.bus.topics import outbound_topic
from bot.cli import _parts
from bot.events import ChatMessage, ConversationKey, Reply, ReplyDraft
from bot.ops.health import adapter_checks
from bot.platform.supervisor import Slot
from bot.settings import ConfigError
from bot.state.client import Redis
from bot.state.interactions import PendingInteractions
from tests.discord_rig import Rig, _settings, running, slash_interaction
from tests.loopback.discord_server import (
    BOT_ID,
    CHANNEL_ID,
    GUILD_ID,
    DiscordServer,
    bot_mention,
    guild_create,
    plain_message,
)
from tests.waiting import until

pytestmark = pytest.mark.e2e

SHARDS = 2
WINDOW = 0.3


def guild_of(shard: int) -> int:
    base = GUILD_ID - (((GUILD_ID >> 22) % SHARDS) << 22)
    return base + (shard << 22)


def channel_of(shard: int) -> int:
    return guild_of(shard) + 1


def sharded_server(discord: DiscordServer) -> None:
    discord.recommended_shards, discord.max_concurrency = SHARDS, 1
    discord.identify_window = WINDOW
    discord.guilds = [
        guild_create(guild_id=guild_of(s), channel_id=channel_of(s)) for s in range(SHARDS)
    ]


async def mention_in(discord: DiscordServer, shard: int, message_id: int) -> None:
    await discord.dispatch(
        "MESSAGE_CREATE",
        plain_message(
            message_id,
            f"<@{BOT_ID}> hi {message_id}",
            mentions=[bot_mention()],
            channel_id=channel_of(shard),
            guild_id=guild_of(shard),
        ),
    )


async def test_a_dropped_shard_resumes_while_the_other_answers() -> None:
    async with DiscordServer() as discord:
        sharded_server(discord)
        async with running(discord, DISCORD_IDENTIFY_WINDOW=str(WINDOW)) as rig:
            await until(rig.adapter.ready, limit=60)
            assert sorted(s for _, s, _ in discord.identifies) == [0, 1]
            assert discord.identify_violations == []
            assert rig.adapter.client.shard_count == SHARDS  # the recommended count

            await discord.drop(shard=1)  # shard 1's connection goes; shard 0's stays
            await mention_in(discord, 0, 7001)
            (body,) = await rig.posts(channel_of(0), 1)
            assert body["content"] == "you said: hi 7001"
            await until(rig.adapter.ready, limit=60)  # shard 1 resumed by itself
            assert len(discord.ops(6)) == 1 and len(discord.identifies) == 2
            await mention_in(discord, 1, 7002)
            (body,) = await rig.posts(channel_of(1), 1)
            assert body["content"] == "you said: hi 7002"


async def test_one_shard_restarted_alone_and_readiness_per_shard() -> None:
    async with DiscordServer() as discord:
        sharded_server(discord)
        async with running(
            discord, DISCORD_IDENTIFY_WINDOW=str(WINDOW), DISCORD_SHARD_COUNT=str(SHARDS)
        ) as rig:
            adapter = rig.adapter
            made = Slot(adapter=adapter, build=lambda: adapter)
            checks = adapter_checks([made])
            assert {"adapter:discord:shard:0", "adapter:discord:shard:1"} <= set(checks)
            await until(adapter.ready, limit=60)
            shard0 = discord._shard_ws[0]
            before = len(discord.identifies)

            await adapter.restart_part("shard:1")
            await discord.wait_for(lambda: len(discord.identifies) == before + 1, limit=60)
            assert discord.identifies[-1][1] == 1, "only shard 1 identified again"
            assert discord._shard_ws[0] is shard0 and not shard0.closed, "shard 0 untouched"
            await until(checks["adapter:discord:shard:1"], limit=60)
            assert await checks["adapter:discord:shard:0"]()
            assert adapter.shards.connects == {0: 1, 1: 2}
            assert adapter.parts() == {"shard:0": True, "shard:1": True}
            assert _parts(made) == {"shard:0": True, "shard:1": True}  # chorus_adapter_part_up
            gauges = {name: read for name, _, _, read, _ in adapter_gauges(made)}
            sessions = gauges["chorus_discord_shard_sessions"]()
            assert sessions[("0", "identified")] == 1 and sessions[("1", "identified")] == 2
            assert set(gauges["chorus_discord_shard_latency_seconds"]()) <= {("0",), ("1",)}
            await mention_in(discord, 1, 7003)
            (body,) = await rig.posts(channel_of(1), 1)
            assert body["content"] == "you said: hi 7003"
        assert not await checks["adapter:discord:shard:0"]()  # closed
        assert discord.identify_violations == []


async def test_a_range_beyond_the_recommended_count_is_a_config_error() -> None:
    async with DiscordServer() as discord:
        discord.recommended_shards = SHARDS
        adapter = DiscordAdapter(InProcessBus(), _settings(discord, DISCORD_SHARD_IDS="1-2"))
        with pytest.raises(ConfigError) as error:
            await adapter.run()
    message = str(error.value)
    assert "DISCORD_SHARD_IDS names shard 2" in message
    assert "the count Discord recommends" in message and "DISCORD_SHARD_COUNT" in message


async def test_a_statefulset_pod_connects_the_block_its_name_picks() -> None:
    """``DISCORD_GATEWAY_INDEX`` from the pod's name (``metadata.name``) and the replicas in
    ``DISCORD_GATEWAY_COUNT``: pod 1 of 2 connects shard 1 of 2, and only that one."""
    async with DiscordServer() as discord:
        sharded_server(discord)
        async with running(
            discord,
            DISCORD_IDENTIFY_WINDOW=str(WINDOW),
            DISCORD_SHARD_COUNT=str(SHARDS),
            DISCORD_GATEWAY_INDEX="chorus-discord-gateway-1",
            DISCORD_GATEWAY_COUNT="2",
        ) as rig:
            await until(rig.adapter.ready, limit=60)
            assert [s for _, s, _ in discord.identifies] == [1]
            await mention_in(discord, 1, 7004)
            (body,) = await rig.posts(channel_of(1), 1)
            assert body["content"] == "you said: hi 7004"


async def _no_answer(message: ChatMessage) -> str | None:
    return None  # the answer comes on the other process's bus, published by the test


def snowflake(key_tag: str, n: int) -> str:
    """An interaction id unique to this test (its mark outlives the test by the hold's TTL)."""
    return str(int(key_tag[1:], 16) % 10**15 * 1000 + n)


@asynccontextmanager
async def two_gateways(discord: DiscordServer, store: Redis) -> AsyncIterator[tuple[Rig, Rig]]:
    """Gateway A with shard 0, gateway B with shard 1 (the fixture guild's), one store."""
    discord.recommended_shards, discord.identify_window = SHARDS, WINDOW
    discord.guilds = [guild_create()]  # the fixture guild: shard 1 of 2
    window, count = str(WINDOW), str(SHARDS)
    async with (
        running(
            discord,
            _no_answer,
            store=store,
            DISCORD_SHARD_IDS="0",
            DISCORD_IDENTIFY_WINDOW=window,
            DISCORD_SHARD_COUNT=count,
        ) as a,
        running(
            discord,
            _no_answer,
            store=store,
            DISCORD_SHARD_IDS="1",
            DISCORD_COMMAND_TIMEOUT="60",
            DISCORD_IDENTIFY_WINDOW=window,
            DISCORD_SHARD_COUNT=count,
        ) as b,
    ):
        await until(a.adapter.ready, limit=60)
        await until(b.adapter.ready, limit=60)
        assert a.adapter.pending is not None and b.adapter.pending is not None
        assert a.adapter.pending.holder != b.adapter.pending.holder
        yield a, b


def logged(caplog: pytest.LogCaptureFixture, text: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return any(text in r.getMessage() for r in caplog.records)

    return check


async def test_a_slash_answer_read_by_another_gateway_is_forwarded_to_its_holder(
    redis_client: Redis, key_tag: str, caplog: pytest.LogCaptureFixture
) -> None:
    """B receives ``/chorus pins``; its answer (after a streamed draft) reaches A's outbound. A
    forwards it to B, which sends it as the private follow-up, once: the draft and the answer
    never show in the channel, and the same answer handed out again (a redelivery) is dropped.
    An ordinary answer on A's outbound is posted as usual."""
    interaction, token = snowflake(key_tag, 1), f"token-{key_tag}"
    caplog.set_level(logging.INFO, logger="chorus.discord")
    async with DiscordServer() as discord, two_gateways(discord, redis_client) as (a, b):
        await discord.dispatch(
            "INTERACTION_CREATE", slash_interaction(interaction, "pins", token=token)
        )
        (command,) = await b.wait_seen(1)
        outbound = outbound_topic("discord")
        draft = ReplyDraft(
            conversation=command.conversation, reply_to_id=interaction, text="your pi", seq=1
        )
        private = Reply(
            conversation=command.conversation, text="your pins: secret", reply_to_id=interaction
        )
        await a.bus.publish(outbound, draft)
        await a.bus.publish(outbound, private)
        followups = await discord.wait_request("POST", f"/webhooks/{BOT_ID}/{token}")
        assert await logged(caplog, "answer forwarded to its gateway process")()
        await a.bus.publish(outbound, private)  # handed out again: already answered
        await until(logged(caplog, "came after its follow-up; dropped"), limit=60)
        ordinary = Reply(conversation=command.conversation, text="hello all", reply_to_id="99")
        await a.bus.publish(outbound, ordinary)
        (post,) = await a.posts(CHANNEL_ID, 1)
    assert post["content"] == "hello all"
    assert [(r.body["content"], r.body["flags"] & 64) for r in followups] == [
        ("your pins: secret", 64)
    ]
    assert len(discord.requests_to("POST", f"/webhooks/{BOT_ID}/{token}")) == 1
    public = [r for r in discord.requests if "/webhooks/" not in r.path]
    assert "secret" not in str([r.body for r in public])
    assert "your pi" not in str([r.body for r in public]), "no draft shown in the channel"


async def test_an_answer_for_a_gateway_that_is_gone_is_dropped_not_posted(
    redis_client: Redis, key_tag: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The process holding a slash command died (its mark stays, its liveness mark lapsed):
    the answer read by A is dropped with a log line, never posted in the channel; and an
    answer for a command B gave up on (no answer in time) is dropped too."""
    gone = PendingInteractions(redis_client, holder=f"gone{key_tag[1:]}")
    dead = snowflake(key_tag, 2)
    await gone.hold(dead, 60)  # and never reads its inbox: not alive
    given_up = snowflake(key_tag, 3)
    caplog.set_level(logging.INFO, logger="chorus.discord")
    conversation = ConversationKey(platform="discord", channel=str(CHANNEL_ID))
    outbound = outbound_topic("discord")
    async with DiscordServer() as discord, two_gateways(discord, redis_client) as (a, b):
        assert b.adapter.pending is not None
        await b.adapter.pending.hold(given_up, 60)
        await b.adapter.pending.release(given_up, 60)
        for held, text in ((dead, "orphan secret"), (given_up, "late secret")):
            await a.bus.publish(
                outbound, Reply(conversation=conversation, text=text, reply_to_id=held)
            )
        await until(logged(caplog, "is gone; its answer is dropped, not posted"), limit=60)
        await until(logged(caplog, "came after its follow-up; dropped"), limit=60)
        ordinary = Reply(conversation=conversation, text="hello all", reply_to_id="99")
        await a.bus.publish(outbound, ordinary)
        (post,) = await a.posts(CHANNEL_ID, 1)
    assert post["content"] == "hello all"
    assert "secret" not in str([r.body for r in discord.requests])
