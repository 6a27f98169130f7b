"""``chorus overlay key CHANNEL [--rotate]``: print a channel's overlay key (made on first use)
or replace it, so the streamer can paste ``/overlay/CHANNEL?key=…`` into OBS. A rotated key
stops the old URL at once on every process (the keys live in the state store)."""

from __future__ import annotations

import asyncio
import sys

from bot.events import ConversationKey
from bot.settings import Settings
from bot.state.connect import open_redis
from bot.state.voice import OverlayKeys


async def overlay_key(settings: Settings, channel: str, rotate: bool) -> str:
    conv = ConversationKey.parse(channel)
    redis = await open_redis(settings.state.redis_url, data_dir=settings.state.data_path())
    try:
        keys = OverlayKeys(redis)
        return await (keys.rotate(conv) if rotate else keys.get(conv))
    finally:
        await redis.aclose()


def command(settings: Settings, channel: str, rotate: bool) -> int:
    try:
        key = asyncio.run(overlay_key(settings, channel, rotate))
    except ValueError as exc:
        print(f"chorus: overlay key: {exc}", file=sys.stderr)
        return 2
    print(f"{'new ' if rotate else ''}overlay key of {channel}: {key}")
    print(f"OBS browser source: /overlay/{channel}?key={key} on the dashboard's address")
    return 0
