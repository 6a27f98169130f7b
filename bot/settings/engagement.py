"""``CHORUS_ENGAGE_*``: the live-chat policy's thresholds for every live or ambient channel.

The policy itself (``bot.engagement.policy.PolicyConfig``) validates the same fields; this section
only says which variable fills which, so the settings stay free of the policy's code. One field
is not the policy's: ``pause_hours``, how long a ``!chorus pause`` is kept in Redis for a
channel that has gone quiet (bot/state/engagement.py).

Per platform: ``CHORUS_ENGAGE_<PLATFORM>_<THRESHOLD>`` overrides a threshold for that
platform's channels (the ``Engagement.overrides`` of ``bot.engagement``; a config file may later add
per-channel ones on top). Only YouTube has a section so far, because a YouTube reply costs
quota units (50 a message) from the day's budget: its room batches default to far sparser than
Twitch's (``CHORUS_ENGAGE_YOUTUBE_MIN_GAP_SECONDS=300``, three chatters a batch); a threshold
left unset there is the global one.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from bot.settings.base import Section

PLATFORM_PREFIX = "youtube_"


class EngagementSettings(Section):
    min_pending: int = Field(default=8, ge=1, validation_alias="CHORUS_ENGAGE_MIN_PENDING")
    """Live chat: unaddressed lines that must wait before the bot speaks to the room."""
    min_gap_seconds: float = Field(
        default=45.0, ge=0, validation_alias="CHORUS_ENGAGE_MIN_GAP_SECONDS"
    )
    """Live chat: seconds since the bot last spoke before it speaks to the room again."""
    max_batch_chatters: int = Field(
        default=2, ge=1, le=5, validation_alias="CHORUS_ENGAGE_MAX_BATCH_CHATTERS"
    )
    """Live chat: chatters one room message answers at most."""
    max_mention_batch: int = Field(
        default=5, ge=1, le=20, validation_alias="CHORUS_ENGAGE_MAX_MENTION_BATCH"
    )
    """Live chat: mentioners one message answers at most when mentions wait for YouTube's reply
    budget (the replies are paced over the stream; those waiting are answered together)."""
    channel_cooldown_seconds: float = Field(
        default=5.0, ge=0, validation_alias="CHORUS_ENGAGE_CHANNEL_COOLDOWN_SECONDS"
    )
    """Live chat: the shortest quiet, in seconds, after the bot last spoke in a channel before it
    speaks to the room again."""
    user_cooldown_seconds: float = Field(
        default=10.0, ge=0, validation_alias="CHORUS_ENGAGE_USER_COOLDOWN_SECONDS"
    )
    """Live chat: seconds between answers to one person past their mention burst."""
    mention_burst: int = Field(
        default=3, ge=1, le=20, validation_alias="CHORUS_ENGAGE_MENTION_BURST"
    )
    """Live chat: answers to one person at once, before the user cooldown applies."""
    wall_max_chars: int = Field(default=400, ge=20, validation_alias="CHORUS_ENGAGE_WALL_MAX_CHARS")
    """Live chat: messages longer than this are walls of text and ignored."""
    idle_prompt_after_seconds: float | None = Field(
        default=None, gt=0, validation_alias="CHORUS_ENGAGE_IDLE_PROMPT_AFTER_SECONDS"
    )
    """Live chat: seconds of quiet after which the bot may say one on-topic line; unset: never."""
    # A pause holds until "!chorus resume", across restarts; a paused channel that stays quiet
    # this long (no chat at all) wakes up again by itself.
    pause_hours: float = Field(
        default=12.0, gt=0, le=24 * 30, validation_alias="CHORUS_ENGAGE_PAUSE_HOURS"
    )
    """Live chat: a paused channel with no chat at all for this many hours wakes up by itself."""

    # YouTube: unset = the global value above.
    youtube_min_pending: int | None = Field(
        default=None, ge=1, validation_alias="CHORUS_ENGAGE_YOUTUBE_MIN_PENDING"
    )
    """`CHORUS_ENGAGE_MIN_PENDING` for YouTube chats; unset: the same."""
    youtube_min_gap_seconds: float | None = Field(
        default=300.0, ge=0, validation_alias="CHORUS_ENGAGE_YOUTUBE_MIN_GAP_SECONDS"
    )
    """`CHORUS_ENGAGE_MIN_GAP_SECONDS` for YouTube chats, where every message costs quota."""
    youtube_max_batch_chatters: int | None = Field(
        default=3, ge=1, le=5, validation_alias="CHORUS_ENGAGE_YOUTUBE_MAX_BATCH_CHATTERS"
    )
    """`CHORUS_ENGAGE_MAX_BATCH_CHATTERS` for YouTube chats."""
    youtube_channel_cooldown_seconds: float | None = Field(
        default=None, ge=0, validation_alias="CHORUS_ENGAGE_YOUTUBE_CHANNEL_COOLDOWN_SECONDS"
    )
    """`CHORUS_ENGAGE_CHANNEL_COOLDOWN_SECONDS` for YouTube chats; unset: the same."""
    youtube_user_cooldown_seconds: float | None = Field(
        default=None, ge=0, validation_alias="CHORUS_ENGAGE_YOUTUBE_USER_COOLDOWN_SECONDS"
    )
    """`CHORUS_ENGAGE_USER_COOLDOWN_SECONDS` for YouTube chats; unset: the same."""
    youtube_idle_prompt_after_seconds: float | None = Field(
        default=None, gt=0, validation_alias="CHORUS_ENGAGE_YOUTUBE_IDLE_PROMPT_AFTER_SECONDS"
    )
    """`CHORUS_ENGAGE_IDLE_PROMPT_AFTER_SECONDS` for YouTube chats; unset: the same."""

    def thresholds(self) -> dict[str, Any]:
        """The policy's thresholds for every platform (the fields that are the policy's)."""
        return self.model_dump(exclude={"pause_hours"} | set(self._platform_fields()))

    def platform_thresholds(self) -> dict[str, dict[str, Any]]:
        """Per platform, the thresholds that differ from the global ones (set ones only)."""
        youtube = {
            name.removeprefix(PLATFORM_PREFIX): value
            for name in self._platform_fields()
            if (value := getattr(self, name)) is not None
        }
        return {"youtube": youtube} if youtube else {}

    @classmethod
    def _platform_fields(cls) -> list[str]:
        return [name for name in cls.model_fields if name.startswith(PLATFORM_PREFIX)]
