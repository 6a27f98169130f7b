"""Rigs for the moderation actions' contract suite (``tests/test_moderation_contract.py``).

Each rig is one implementation of ``ModerationActions`` with the means to check it against the
platform's own state: the in-memory twin, and each real adapter (its real SDK) connected to its
loopback server, where ``deleted``/``timed_out``/``banned`` read what the server now holds and
``reached`` counts the moderation calls that got to it.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
import twitchio.eventsub.websockets as twitch_ws
from twitchio.http import Route

from adapters.discord.adapter import DiscordAdapter
from adapters.twitch import TwitchAdapter
from adapters.youtube.adapter import YouTubeAdapter
from bot.bus.base import InProcessBus
from bot.events import ConversationKey
from bot.platform.moderation import ModerationActions, PermissionGaps
from bot.platform.moderation_memory import MemoryModeration
from bot.resilience import RetryPolicy
from bot.settings.youtube import YouTubeSettings
from bot.state import connect
from tests.discord_rig import running
from tests.loopback.discord_moderation import MODERATOR_PERMISSIONS, member_payload
from tests.loopback.discord_server import (
    CHANNEL_ID,
    GUILD_ID,
    HUMAN_ID,
    MOD_ROLE_ID,
    DiscordServer,
    guild_create,
    load_fixture,
    plain_message,
)
from tests.loopback.twitch_moderation import SCOPE_BANS, SCOPE_CHAT
from tests.loopback.twitch_server import CLIENT_ID, CLIENT_SECRET, TwitchServer
from tests.loopback.youtube_server import YouTubeServer
from tests.platform_env import adapter_from_env

WAIT = 30.0
TWITCH_SCOPES = ("user:read:chat", "user:write:chat", "user:bot", SCOPE_CHAT, SCOPE_BANS)
_ids = itertools.count(1)


@dataclass
class Rig:
    actions: ModerationActions
    gaps: PermissionGaps
    conversation: ConversationKey
    user_id: str
    post: Callable[[], Awaitable[str]]  # a chatter's message that can be deleted: its id
    deleted: Callable[[str], bool]
    timed_out: Callable[[str], bool]
    banned: Callable[[str], bool]
    deny: Callable[[], Awaitable[None]]  # the channel takes the bot's moderator rights away
    reached: Callable[[], int]  # moderation calls that reached the platform so far


@asynccontextmanager
async def twin_rig() -> AsyncIterator[Rig]:
    twin = MemoryModeration(platform="console")
    channel = "room"

    async def post() -> str:
        message_id = f"m{next(_ids)}"
        twin.post(channel, message_id)
        return message_id

    async def deny() -> None:
        twin.deny(channel)

    yield Rig(
        actions=twin,
        gaps=twin.gaps,
        conversation=ConversationKey(platform="console", channel=channel),
        user_id="viewer",
        post=post,
        deleted=lambda m: m not in twin.messages.get(channel, set()),
        timed_out=lambda u: (channel, u) in twin.timeouts,
        banned=lambda u: (channel, u) in twin.bans,
        deny=deny,
        reached=lambda: twin.calls,
    )


TWITCH_BOT, TWITCH_BOT_LOGIN = "2914196", "mybot"
TWITCH_CHANNEL, TWITCH_CHANNEL_LOGIN = "1971641", "streamer"
TWITCH_VIEWER = "4145994"


@asynccontextmanager
async def twitch_adapter(
    monkeypatch: pytest.MonkeyPatch,
    key_tag: str,
    *,
    scopes: tuple[str, ...] = TWITCH_SCOPES,
) -> AsyncIterator[tuple[TwitchServer, TwitchAdapter]]:
    """The real Twitch adapter (twitchio 3) connected to a loopback Twitch where the bot is a
    moderator of the channel and its token carries ``scopes``."""
    monkeypatch.setattr(Route, "BASE", Route.BASE)
    monkeypatch.setattr(Route, "ID_BASE", Route.ID_BASE)
    monkeypatch.setattr(twitch_ws, "WSS", twitch_ws.WSS)
    async with TwitchServer() as server:
        server.add_user(TWITCH_BOT, TWITCH_BOT_LOGIN)
        server.add_user(TWITCH_CHANNEL, TWITCH_CHANNEL_LOGIN)
        server.grant(TWITCH_BOT, "access-0", "refresh-0", scopes=scopes)
        server.moderators[TWITCH_CHANNEL] = {TWITCH_BOT}
        env = {
            "TWITCH_CLIENT_ID": CLIENT_ID,
            "TWITCH_CLIENT_SECRET": CLIENT_SECRET,
            "TWITCH_ACCESS_TOKEN": "access-0",
            "TWITCH_REFRESH_TOKEN": "refresh-0",
            "TWITCH_CHANNELS": TWITCH_CHANNEL_LOGIN,
            "TWITCH_API_BASE_URL": server.helix_url,
            "TWITCH_AUTH_BASE_URL": server.auth_url,
            "TWITCH_EVENTSUB_WS_URL": server.ws_url,
        }
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        bus = InProcessBus()
        redis = await connect.open_redis(f"memory://moderation-{key_tag}")
        adapter = adapter_from_env(TwitchAdapter, bus, redis)
        assert adapter is not None
        adapter.retry = RetryPolicy(max_retries=2, base_delay=0.01, max_delay=0.01)
        runner = asyncio.create_task(adapter.run())
        try:
            await server.wait_until(lambda: len(server.subscriptions) == 4, WAIT)
            yield server, adapter
        finally:
            await adapter.aclose()
            await asyncio.wait_for(runner, WAIT)
            await bus.close()
            await redis.aclose()


@asynccontextmanager
async def twitch_rig(monkeypatch: pytest.MonkeyPatch, key_tag: str) -> AsyncIterator[Rig]:
    async with twitch_adapter(monkeypatch, key_tag) as (server, adapter):

        async def post() -> str:
            message_id = f"msg-{next(_ids)}"
            server.chat_messages.setdefault(TWITCH_CHANNEL, set()).add(message_id)
            return message_id

        async def deny() -> None:
            server.moderators[TWITCH_CHANNEL].discard(TWITCH_BOT)

        def ban_of(user: str) -> tuple[bool, int | None]:
            key = (TWITCH_CHANNEL, user)
            return key in server.bans, server.bans.get(key)

        yield Rig(
            actions=adapter.moderation,
            gaps=adapter.moderation.gaps,
            conversation=ConversationKey(platform="twitch", channel=TWITCH_CHANNEL),
            user_id=TWITCH_VIEWER,
            post=post,
            deleted=lambda m: m not in server.chat_messages.get(TWITCH_CHANNEL, set()),
            timed_out=lambda u: ban_of(u)[0] and ban_of(u)[1] is not None,
            banned=lambda u: ban_of(u)[0] and ban_of(u)[1] is None,
            deny=deny,
            reached=lambda: len(server.moderation_calls),
        )


DISCORD_VIEWER = str(HUMAN_ID)
VIEW_AND_SEND = (1 << 10) | (1 << 11)


def guild_with_bot(permissions: int) -> dict[str, Any]:
    """The fixture guild where the bot holds the moderator role with ``permissions`` (plus
    View Channel and Send Messages, without which Discord denies every channel permission)."""
    guild = guild_create()
    for role in guild["roles"]:
        if role["id"] == str(MOD_ROLE_ID):
            role["permissions"] = str(permissions | VIEW_AND_SEND)
    bot = load_fixture("discord_ready_docs_user")["d"]["user"]
    member = member_payload(bot["id"], bot["username"])
    guild["members"] = [{**member, "roles": [str(MOD_ROLE_ID)]}]
    return guild


@asynccontextmanager
async def discord_adapter() -> AsyncIterator[tuple[DiscordServer, DiscordAdapter]]:
    """The real Discord adapter (discord.py) on a loopback Discord where the bot's role has
    Manage Messages, Moderate Members and Ban Members."""
    async with DiscordServer() as server:
        server.guilds = [guild_with_bot(MODERATOR_PERMISSIONS)]
        server.members[DISCORD_VIEWER] = member_payload(DISCORD_VIEWER)
        async with running(server) as rig:
            client = rig.adapter.client
            await asyncio.wait_for(client.wait_until_ready(), WAIT)  # GUILD_CREATE is in
            assert client.get_guild(GUILD_ID) is not None
            yield server, rig.adapter


@asynccontextmanager
async def discord_rig() -> AsyncIterator[Rig]:
    async with discord_adapter() as (server, adapter):

        async def post() -> str:
            message = plain_message(next(_discord_ids), "a link")
            server.messages[message["id"]] = message
            return str(message["id"])

        async def deny() -> None:
            await take_discord_permissions(server, adapter)

        yield Rig(
            actions=adapter.moderation,
            gaps=adapter.moderation.gaps,
            conversation=ConversationKey(platform="discord", channel=str(CHANNEL_ID)),
            user_id=DISCORD_VIEWER,
            post=post,
            deleted=lambda m: m not in server.messages,
            timed_out=lambda u: server.timed_out_until(u) is not None,
            banned=lambda u: u in server.bans,
            deny=deny,
            reached=lambda: (
                len(server.moderation_calls)
                + sum(r.method == "DELETE" and "/messages/" in r.path for r in server.requests)
            ),
        )


async def take_discord_permissions(server: DiscordServer, adapter: DiscordAdapter) -> None:
    """The server's owner takes the bot role's permissions away (GUILD_ROLE_UPDATE)."""
    server.bot_permissions = 0
    role = next(r for r in guild_with_bot(0)["roles"] if r["id"] == str(MOD_ROLE_ID))
    updated = asyncio.ensure_future(adapter.client.wait_for("guild_role_update", timeout=WAIT))
    await server.dispatch("GUILD_ROLE_UPDATE", {"guild_id": str(GUILD_ID), "role": role})
    await updated
    guild = adapter.client.get_guild(GUILD_ID)
    assert guild is not None and guild.me is not None
    assert not guild.me.guild_permissions.ban_members


_discord_ids = itertools.count(1_100_000_000_000_000_001)


YOUTUBE_VIEWER = "UCviewer000000000000000"


@asynccontextmanager
async def youtube_adapter(key_tag: str) -> AsyncIterator[tuple[YouTubeServer, YouTubeAdapter]]:
    """The real YouTube adapter's API chokepoint and quota ledger (embedded store) on a
    loopback YouTube whose chat the bot moderates, following a chat read by polling."""
    async with YouTubeServer() as server:
        server.client_id = f"{key_tag}.apps.googleusercontent.com"
        redis = await connect.open_redis(f"memory://moderation-{key_tag}")
        values: dict[str, Any] = {
            "client_id": server.client_id,
            "client_secret": server.client_secret,
            "refresh_token": server.refresh_token,
            "api_base_url": server.api_base,
            "token_url": server.token_url,
            "read_mode": "poll",
        }
        settings = YouTubeSettings(**values)
        adapter = YouTubeAdapter.from_settings(InProcessBus(), redis, settings)
        ledger = adapter.api.ledger
        await ledger.load()
        await ledger.follow(datetime.now(UTC), "poll")
        try:
            yield server, adapter
        finally:
            await adapter.api.aclose()
            await redis.aclose()


@asynccontextmanager
async def youtube_rig(key_tag: str) -> AsyncIterator[Rig]:
    async with youtube_adapter(key_tag) as (server, adapter):

        async def post() -> str:
            message_id = f"LCC.viewer-{next(_ids)}"
            server.chat_messages.add(message_id)
            return message_id

        async def deny() -> None:
            server.bot_is_moderator = False

        def ban_of(user: str) -> dict[str, Any]:
            return server.banned(user) or {}

        yield Rig(
            actions=adapter.moderation,
            gaps=adapter.moderation.gaps,
            conversation=ConversationKey(platform="youtube", channel=server.live_chat_id),
            user_id=YOUTUBE_VIEWER,
            post=post,
            deleted=lambda m: m not in server.chat_messages,
            timed_out=lambda u: ban_of(u).get("type") == "temporary",
            banned=lambda u: ban_of(u).get("type") == "permanent",
            deny=deny,
            reached=lambda: len(server.moderation_calls),
        )
