"""Twitch's ``stream.online`` / ``stream.offline`` for plugins: with TWITCH_STREAM_STATE=true the
adapter (against the loopback EventSub server) subscribes to both per channel and publishes each
as a text-less inbound message carrying a ``ChannelEvent`` (the broadcaster its author), which
the plugins' ``on_stream_online`` / ``on_stream_offline`` handlers receive; without the setting
it subscribes to neither."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from bot.events import Author, ChannelEvent, ChannelEventKind, ChatMessage, ConversationKey
from bot.plugins.events import (
    EventContext,
    PluginEvents,
    Subscriber,
    on_stream_offline,
    on_stream_online,
)
from tests.loopback.twitch_server import TwitchServer
from tests.test_twitch_e2e import CHANNEL, CHANNEL_LOGIN, WAIT, _rig, server, twitch_env

__all__ = ["server", "twitch_env"]  # the Twitch rig's fixtures, used here too


async def test_stream_online_and_offline_reach_the_inbound_topic(
    server: TwitchServer, twitch_env: Any, key_tag: str
) -> None:
    twitch_env(server, TWITCH_STREAM_STATE="true")
    rig = await _rig(server, key_tag)
    runner = asyncio.create_task(rig.adapter.run())
    try:
        await server.wait_until(lambda: len(server.subscriptions) == 6, WAIT)
        types = sorted(s.type for s in server.subscriptions.values())
        assert types[-2:] == ["stream.offline", "stream.online"]
        who = {"broadcaster_user_id": CHANNEL, "broadcaster_user_login": CHANNEL_LOGIN}
        who |= {"broadcaster_user_name": "Streamer"}
        online = who | {"id": "9001", "type": "live", "started_at": "2026-03-04T12:00:00Z"}
        assert await server.notify("stream.online", online) == 1
        went_live = await rig.next_message()
        assert await server.notify("stream.offline", who) == 1
        ended = await rig.next_message()
    finally:
        await rig.adapter.aclose()
        await asyncio.wait_for(runner, WAIT)
        for task in rig.tasks:
            task.cancel()
        await asyncio.gather(*rig.tasks, return_exceptions=True)
        await rig.bus.close()
        await rig.redis.aclose()
    assert went_live.channel_event == ChannelEvent(kind=ChannelEventKind.STREAM_ONLINE)
    assert went_live.id == "stream-stream_online-9001" and went_live.text == ""
    assert went_live.author.id == CHANNEL and went_live.server == CHANNEL_LOGIN
    assert went_live.conversation == ConversationKey(platform="twitch", channel=CHANNEL)
    assert ended.channel_event == ChannelEvent(kind=ChannelEventKind.STREAM_OFFLINE)


async def test_the_plugins_handlers_get_them(tmp_path: Path) -> None:
    seen: list[str] = []

    @on_stream_online
    async def live(ctx: EventContext) -> None:
        seen.append(f"online {ctx.user.user_id}")

    @on_stream_offline
    async def over(ctx: EventContext) -> None:
        seen.append(f"offline {ctx.user.user_id}")

    events = PluginEvents([Subscriber("p", [live, over])])
    for kind in (ChannelEventKind.STREAM_ONLINE, ChannelEventKind.STREAM_OFFLINE):
        events.seen(
            ChatMessage(
                platform="twitch",
                id=f"stream-{kind.value}",
                conversation=ConversationKey(platform="twitch", channel=CHANNEL),
                author=Author(id=CHANNEL, display_name="Streamer"),
                text="",
                channel_event=ChannelEvent(kind=kind),
            )
        )
    await events.aclose()
    assert sorted(seen) == [f"offline {CHANNEL}", f"online {CHANNEL}"]
