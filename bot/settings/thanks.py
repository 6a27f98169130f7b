"""``CHORUS_THANKS*``: which stream events the live-chat co-host thanks, and how it batches them.

Off by default for every kind: a streamer opts in per kind with ``CHORUS_THANKS``, a comma list
of ``raid, sub, resub, gift_sub, cheer, super_chat, super_sticker, announcement`` (or ``all``).
The same kind names serve both platforms: a YouTube membership is a ``sub``, a member milestone
a ``resub``, gifted memberships ``gift_sub`` (``bot.events.StreamEventKind``). The timing fields
are the policy's (``bot.engagement.thanks.ThanksConfig``), which checks them again.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from bot.events import StreamEventKind
from bot.settings.base import Section, comma_set

# A channel-point redemption is not thanked: the reward is the streamer's answer to it (it can
# be read aloud instead, ``CHORUS_TTS_REWARDS``).
THANKED = tuple(kind for kind in StreamEventKind if kind is not StreamEventKind.REDEMPTION)
KIND_NAMES = tuple(kind.value for kind in THANKED)


class ThanksSettings(Section):
    kinds: frozenset[StreamEventKind] = Field(default=frozenset(), validation_alias="CHORUS_THANKS")
    """Stream events the bot thanks: a comma list of `raid`, `sub`, `resub`, `gift_sub`, `cheer`,
    `super_chat`, `super_sticker`, `announcement`, or `all`; empty: none."""
    settle_seconds: float = Field(
        default=5.0, ge=0, le=600, validation_alias="CHORUS_THANKS_SETTLE_SECONDS"
    )
    """Seconds without a new event that end a burst of events."""
    max_wait_seconds: float = Field(
        default=30.0, ge=0, le=3600, validation_alias="CHORUS_THANKS_MAX_WAIT_SECONDS"
    )
    """The longest a burst's thanks waits after its first event, in seconds."""
    min_gap_seconds: float = Field(
        default=30.0, ge=0, le=3600, validation_alias="CHORUS_THANKS_MIN_GAP_SECONDS"
    )
    """Seconds between two thanks in a channel."""
    max_names: int = Field(default=3, ge=1, le=10, validation_alias="CHORUS_THANKS_MAX_NAMES")
    """People named in one thanks (the rest are thanked as a group)."""

    @field_validator("kinds", mode="before")
    @classmethod
    def _kinds(cls, value: Any) -> Any:
        names = comma_set(value.lower() if isinstance(value, str) else value)
        if not isinstance(names, frozenset):
            return value
        if names & {"all", "*"}:
            return frozenset(THANKED)
        if names & {"none", "off"}:
            return frozenset()
        unknown = sorted(str(name) for name in names if name not in KIND_NAMES)
        if unknown:
            raise ValueError(
                f"unknown stream event kind {', '.join(unknown)}; use any of "
                f"{', '.join(KIND_NAMES)}, or all"
            )
        return frozenset(StreamEventKind(name) for name in names)

    @model_validator(mode="after")
    def _waits(self) -> ThanksSettings:
        if self.max_wait_seconds < self.settle_seconds:
            raise ValueError(
                "CHORUS_THANKS_MAX_WAIT_SECONDS must be at least CHORUS_THANKS_SETTLE_SECONDS"
            )
        return self
