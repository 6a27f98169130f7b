"""A plugin with one of everything, named in ``CHORUS_PLUGINS`` by the plugin tests.

Tools (one that always raises, one for moderators), commands (one that raises), a
``before_turn`` hook whose line shows up in the model's request, and an ``after_reply`` hook
that appends each reply to the file named by ``WEATHER_PLUGIN_LOG`` so a test can see that it ran
inside the real process.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from bot.plugins import (
    ChatMessage,
    CommandContext,
    Permission,
    after_reply,
    before_turn,
    command,
    tool,
)

STATION_LINE = "Weather station: online"


@tool
async def forecast(city: str) -> str:
    """The weather forecast for a city.

    Args:
        city: the city's name
    """
    return f"Sunny in {city}, 21 C"


@tool
async def explode() -> str:
    """Reads the weather station, which is on fire."""
    raise RuntimeError("the weather station is on fire")


@tool(permission=Permission.MODERATOR, timeout=3)
async def storm_warning(region: str) -> str:
    """Broadcast a storm warning for a region (moderators only)."""
    return f"storm warning sent for {region}"


@command
async def weather(ctx: CommandContext) -> str:
    """Today's weather, e.g. /weather Porto"""
    return f"Weather for {ctx.args or 'here'}: sunny"


@command
async def boom(ctx: CommandContext) -> str:
    """A command that always fails."""
    raise RuntimeError("boom")


@before_turn
async def station(message: ChatMessage) -> str:
    return STATION_LINE


@after_reply
async def remember_reply(message: ChatMessage, reply: str) -> None:
    log = os.environ.get("WEATHER_PLUGIN_LOG")
    if log:
        await asyncio.to_thread(
            _append, Path(log), f"{message.platform}:{message.author.id}: {reply}"
        )


def _append(path: Path, line: str) -> None:
    with path.open("a", encoding="utf-8") as file:
        file.write(line + "\n")
