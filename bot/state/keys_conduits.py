"""Key names of an EventSub conduit's size, beside ``bot.state.keys``'s conduit keys.

``keys.py`` is at its line budget, so the conduit's newer key lives here, built from
``keys.conduit_members`` (which checks and escapes the platform and the conduit id) so that it
shares that key's prefix: ``chorus:v1:conduit:{platform}:{conduit_id}:size``.
"""

from __future__ import annotations

from bot.state import keys

MEMBERS = ":members"


def conduit_size(platform: str, conduit_id: str) -> str:
    """The shard count every gateway process of a conduit uses (set when a process created,
    adopted or resized the conduit), so that a resize reaches the processes already running."""
    members = keys.conduit_members(platform, conduit_id)
    return f"{members.removesuffix(MEMBERS)}:size"
