"""Redis keys the Twitch adapter owns beyond the bot's own (``keys.py`` is at its line budget).

Built the same way as every key in ``bot.state.keys`` (its prefix, its escaping rule); the
catalogue entry is in docs/redis-keys.md.
"""

from __future__ import annotations

from bot.events import escape_key_part as _escape_part
from bot.state import keys


def broadcaster_tokens(app_id: str, broadcaster_id: str) -> str:
    """A broadcaster's OAuth tokens for one Twitch application (``chorus auth twitch
    --broadcaster``: ``channel:read:redemptions``), beside the bot's ``platform_tokens``."""
    if not broadcaster_id:
        raise ValueError("broadcaster_id must not be empty")
    return f"{keys.platform_tokens('twitch', app_id)}:broadcaster:{_escape_part(broadcaster_id)}"
