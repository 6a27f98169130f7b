"""What the Discord end-to-end tests share (tests/test_discord_e2e.py and
test_discord_failures.py).

End to end: the real discord.py client against the loopback gateway and REST stand-in.

A tiny stand-in router consumes ``inbound`` and publishes a scripted ``Reply`` to
``outbound:discord`` (the real router is not imported); deletions are collected from
``deletions``. Every wait is on an event (a recorded request, a gateway frame, a published
message), bounded by a timeout; nothing sleeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from adapters.discord.adapter import DiscordAdapter
from bot.bus.base import InProcessBus
from bot.bus.topics import DELETIONS, INBOUND, outbound_topic
from bot.events import ChatMessage, MessageDeleted, Reply
from bot.settings import DiscordSettings
from bot.state.client import Redis
from tests.loopback.discord_server import (
    BOT_ID,
    CHANNEL_ID,
    GUILD_ID,
    DiscordServer,
    bot_mention,
    load_fixture,
    plain_message,
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


def discord_env(server: DiscordServer) -> dict[str, str]:
    """The variables that point a ``chorus`` process's Discord adapter at ``server``."""
    return {
        "DISCORD_TOKEN": TOKEN,
        "DISCORD_API_BASE_URL": server.api_url,
        "DISCORD_GATEWAY_URL": server.ws_url,
    }


def _settings(server: DiscordServer, **env: Any) -> DiscordSettings:
    return DiscordSettings(**(discord_env(server) | env))


@asynccontextmanager
async def running(
    server: DiscordServer,
    script: Script = _echo,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    store: Redis | None = None,
    **env: Any,
) -> AsyncIterator[Rig]:
    """The adapter running against ``server`` (``store``: the state store its identify buckets
    and interaction marks go to, as a gateway process's do; none: in memory)."""
    bus = InProcessBus()
    adapter = DiscordAdapter(
        bus,
        _settings(server, **env),
        sleep=sleep,
        client_options={"guild_ready_timeout": 0.01},
        identify_store=store,
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


def mention(message_id: int, text: str = "hello", **kw: Any) -> dict[str, Any]:
    return plain_message(message_id, f"<@{BOT_ID}> {text}", mentions=[bot_mention()], **kw)


def slash_interaction(
    interaction_id: str,
    command: str,
    options: list[dict[str, Any]] | None = None,
    *,
    user_id: str | None = None,
    token: str = "interaction-token-secret",
) -> dict[str, Any]:
    """An INTERACTION_CREATE ``d``: ``/chorus <command>`` with ``options`` in the fixture guild's
    channel, by the docs example's author (or ``user_id``); the follow-up goes to ``token``."""
    human = dict(load_fixture("discord_message_create_docs_example")["d"]["author"])
    if user_id is not None:
        human["id"] = user_id
    return {
        "id": interaction_id,
        "application_id": str(BOT_ID),
        "type": 2,
        "token": token,
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
            "options": [{"name": command, "type": 1, "options": options or []}],
        },
        "locale": "en-US",
        "app_permissions": "0",
        "entitlements": [],
        "attachment_size_limit": 10485760,
    }
