"""Discord for Chorus: discord.py's gateway client wired to the event bus.

``DiscordAdapter.from_env(bus)`` returns None unless ``DISCORD_TOKEN`` is set. ``convert`` holds
the pure wire <-> core conversions; ``sender`` the one outbound chokepoint.
"""

from __future__ import annotations

from adapters.discord.adapter import DiscordAdapter
from adapters.discord.settings import DiscordSettings, load_discord_settings

__all__ = ["DiscordAdapter", "DiscordSettings", "load_discord_settings"]
