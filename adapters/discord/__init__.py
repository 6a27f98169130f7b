"""Discord for Chorus: discord.py's gateway client wired to the event bus.

``DiscordAdapter.from_section(settings.discord, bus)`` builds it when ``DISCORD_TOKEN`` is set (the
registry checks). ``convert`` holds
the pure wire <-> core conversions; ``sender`` the one outbound chokepoint.
"""

from __future__ import annotations

from adapters.discord.adapter import DiscordAdapter

__all__ = ["DiscordAdapter"]
