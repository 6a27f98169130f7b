"""``CHORUS_TTS*`` and ``[voice]``: what the bot says aloud on a stream overlay, and with which
voice.

Off by default (``CHORUS_VOICE``); a scope turns it on or off for one channel (``[scope.voice]``,
the same names), so one deployment may speak on one Twitch channel and stay silent elsewhere.
``CHORUS_TTS`` is the chain of providers and voices, tried in order; espeak-ng (local, no
network) is always the last link, so an overlay speaks even when every vendor is down.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from bot.settings.base import Section, comma_tuple

TTS_PROVIDERS = ("openai", "gemini", "elevenlabs", "espeak")
_LINK = re.compile(r"^(openai|gemini|elevenlabs|espeak):[\w.\-+ ]{1,100}$")


def check_chain(value: Any) -> Any:
    """``provider:voice`` links; ValueError names a bad one."""
    links = comma_tuple(value)
    if not isinstance(links, tuple):
        return value
    for link in links:
        if not _LINK.match(str(link)):
            raise ValueError(
                f"{link!r} is not provider:voice (a provider of {', '.join(TTS_PROVIDERS)})"
            )
    return links


class VoiceSettings(Section):
    """Speaking on the stream overlay: the providers and voices, what is read aloud, limits."""

    enabled: bool = Field(default=False, validation_alias="CHORUS_VOICE")
    """Whether the bot speaks on the stream overlay (Twitch and YouTube channels; a scope's
    `voice.enabled` overrides it per channel)."""
    tts: tuple[str, ...] = Field(default=("espeak:en",), validation_alias="CHORUS_TTS")
    """The speech providers and voices, tried in order: a comma list of `provider:voice` with
    provider `openai`, `gemini`, `elevenlabs` or `espeak` (e.g. `openai:alloy,espeak:en`);
    espeak-ng is always tried last."""
    answers: bool = Field(default=True, validation_alias="CHORUS_TTS_ANSWERS")
    """Whether the bot's answers to mentions are spoken, sentence by sentence as they stream."""
    cheer_min_bits: int = Field(default=100, ge=1, validation_alias="CHORUS_TTS_CHEER_MIN_BITS")
    """Twitch cheers of at least this many bits are read aloud with the viewer's name."""
    super_chats: bool = Field(default=True, validation_alias="CHORUS_TTS_SUPER_CHATS")
    """Whether YouTube Super Chats and Super Stickers are read aloud with the viewer's name."""
    rewards: tuple[str, ...] = Field(default=(), validation_alias="CHORUS_TTS_REWARDS")
    """Twitch channel-point rewards read aloud with the viewer's name and text when redeemed: a
    comma list of reward titles (any case) or reward ids, or `*` for every reward; empty: none.
    Needs the broadcaster's token (`chorus auth twitch --broadcaster`)."""
    queue_max: int = Field(default=20, ge=1, le=1000, validation_alias="CHORUS_TTS_QUEUE_MAX")
    """Items waiting to be spoken per channel, at most; more are dropped."""
    max_seconds: float = Field(
        default=30.0, gt=0, le=600, validation_alias="CHORUS_TTS_MAX_SECONDS"
    )
    """The longest one item plays, in seconds (the overlay cuts it there)."""
    max_chars: int = Field(default=500, ge=1, le=5000, validation_alias="CHORUS_TTS_MAX_CHARS")
    """The longest text of one item, in characters (a longer one is cut at a word)."""
    channel_chars_hour: int = Field(
        default=20_000, ge=0, validation_alias="CHORUS_TTS_CHANNEL_CHARS_HOUR"
    )
    """Characters spoken per channel per hour, at most (0: no limit)."""
    user_chars_hour: int = Field(default=2_000, ge=0, validation_alias="CHORUS_TTS_USER_CHARS_HOUR")
    """Characters spoken for one viewer per hour, at most (0: no limit)."""
    openai_model: str = Field(default="gpt-4o-mini-tts", validation_alias="CHORUS_TTS_OPENAI_MODEL")
    """OpenAI's speech model (the key and base URL are `OPENAI_API_KEY` / `OPENAI_BASE_URL`)."""
    gemini_model: str = Field(
        default="gemini-2.5-flash-preview-tts", validation_alias="CHORUS_TTS_GEMINI_MODEL"
    )
    """Gemini's speech model (the key and base URL are `GEMINI_API_KEY` / `GOOGLE_GEMINI_BASE_URL`)."""
    elevenlabs_model: str = Field(
        default="eleven_multilingual_v2", validation_alias="CHORUS_TTS_ELEVENLABS_MODEL"
    )
    """ElevenLabs' speech model."""
    elevenlabs_api_key: SecretStr | None = Field(
        default=None, validation_alias="ELEVENLABS_API_KEY"
    )
    """The ElevenLabs API key."""
    elevenlabs_base_url: str = Field(default="", validation_alias="ELEVENLABS_BASE_URL")
    """ElevenLabs' API address; empty: the vendor's."""
    timeout: float = Field(default=15.0, gt=0, le=300, validation_alias="CHORUS_TTS_TIMEOUT")
    """Seconds one provider may take for one item before the next in the chain is tried."""

    _chain = field_validator("tts", mode="before")(classmethod(lambda cls, v: check_chain(v)))
    _rewards = field_validator("rewards", mode="before")(classmethod(lambda cls, v: comma_tuple(v)))


class ScopeVoice(BaseModel):
    """A scope's voice settings (``[voice]``'s names)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    enabled: bool | None = None
    tts: tuple[str, ...] | None = None
    answers: bool | None = None
    cheer_min_bits: int | None = Field(default=None, ge=1)
    super_chats: bool | None = None
    rewards: tuple[str, ...] | None = None
    channel_chars_hour: int | None = Field(default=None, ge=0)
    user_chars_hour: int | None = Field(default=None, ge=0)

    @field_validator("tts", mode="before")
    @classmethod
    def _tts(cls, value: Any) -> Any:
        return check_chain(value)

    @field_validator("rewards", mode="before")
    @classmethod
    def _rewards(cls, value: Any) -> Any:
        return comma_tuple(value)
