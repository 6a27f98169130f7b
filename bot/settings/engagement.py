"""``CHORUS_ENGAGE_*``: the live-chat policy's thresholds for every live or ambient channel.

The policy itself (``bot.live.engagement.PolicyConfig``) validates the same fields; this section
only says which variable fills which, so the settings stay free of the policy's code. One field
is not the policy's: ``pause_hours``, how long a ``!chorus pause`` is kept in Redis for a
channel that has gone quiet (bot/live/store.py).
"""

from __future__ import annotations

from pydantic import Field

from bot.settings.base import Section


class EngagementSettings(Section):
    min_pending: int = Field(default=8, ge=1, validation_alias="CHORUS_ENGAGE_MIN_PENDING")
    min_gap_seconds: float = Field(
        default=45.0, ge=0, validation_alias="CHORUS_ENGAGE_MIN_GAP_SECONDS"
    )
    max_batch_chatters: int = Field(
        default=2, ge=1, le=5, validation_alias="CHORUS_ENGAGE_MAX_BATCH_CHATTERS"
    )
    channel_cooldown_seconds: float = Field(
        default=5.0, ge=0, validation_alias="CHORUS_ENGAGE_CHANNEL_COOLDOWN_SECONDS"
    )
    user_cooldown_seconds: float = Field(
        default=10.0, ge=0, validation_alias="CHORUS_ENGAGE_USER_COOLDOWN_SECONDS"
    )
    mention_burst: int = Field(
        default=3, ge=1, le=20, validation_alias="CHORUS_ENGAGE_MENTION_BURST"
    )
    wall_max_chars: int = Field(default=400, ge=20, validation_alias="CHORUS_ENGAGE_WALL_MAX_CHARS")
    idle_prompt_after_seconds: float | None = Field(
        default=None, gt=0, validation_alias="CHORUS_ENGAGE_IDLE_PROMPT_AFTER_SECONDS"
    )
    # A pause holds until "!chorus resume", across restarts; a paused channel that stays quiet
    # this long (no chat at all) wakes up again by itself.
    pause_hours: float = Field(
        default=12.0, gt=0, le=24 * 30, validation_alias="CHORUS_ENGAGE_PAUSE_HOURS"
    )
