"""Discord settings: one section of the settings root, data only (no discord.py import).

``DISCORD_TOKEN`` switches the adapter on. Channel lists are comma-separated channel ids (copy
them with Developer Mode on: right-click a channel, "Copy Channel ID"). The two URL overrides
exist for loopback tests and proxies: discord.py exposes its endpoints only as class attributes
(``discord.http.Route.BASE``, ``discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY``), so the
adapter sets them just before it connects, never at import. Problems surface as ``ConfigError``
naming the variable and where to find its value.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, SecretStr, field_validator

from bot.settings.base import Section

PORTAL_URL = "https://discord.com/developers/applications"
ChannelSet = frozenset[int]
_API_PATH = re.compile(r"/api/v\d+$")


class DiscordSettings(Section):
    """Every variable the Discord adapter reads (documented in ``.env.example``)."""

    token: SecretStr | None = Field(default=None, validation_alias="DISCORD_TOKEN")
    """The Discord bot's token (discord.com/developers/applications, Bot, Reset Token); setting it
    turns the Discord adapter on."""
    message_content_intent: bool = Field(
        default=False, validation_alias="DISCORD_MESSAGE_CONTENT_INTENT"
    )
    """Ask for the privileged Message Content intent (also switch it on in the Developer Portal:
    Bot, Message Content Intent); needed to read ambient and always-answer channels."""
    members_intent: bool = Field(default=False, validation_alias="DISCORD_MEMBERS_INTENT")
    """Ask for the privileged Server Members intent (also switch it on in the Developer Portal):
    plugins' member join and leave events."""
    answer_bots: bool = Field(default=False, validation_alias="DISCORD_ANSWER_BOTS")
    """Answer other bots (never itself)."""
    allowed_channels: ChannelSet = Field(
        default=frozenset(), validation_alias="DISCORD_ALLOWED_CHANNELS"
    )
    """Comma list of channel ids where the bot may speak; empty: everywhere."""
    always_answer_channels: ChannelSet = Field(
        default=frozenset(), validation_alias="DISCORD_ALWAYS_ANSWER_CHANNELS"
    )
    """Comma list of channel ids where the bot answers every message."""
    ambient_channels: ChannelSet = Field(
        default=frozenset(), validation_alias="DISCORD_AMBIENT_CHANNELS"
    )
    """Comma list of channel ids where the engagement policy decides when to speak."""
    sync_commands: bool = Field(default=True, validation_alias="DISCORD_SYNC_COMMANDS")
    """Register the `/chorus` slash commands (and plugins' commands) at start."""
    api_base_url: str | None = Field(default=None, validation_alias="DISCORD_API_BASE_URL")
    """Discord's REST base, ending in `/api/v10` (proxies and tests)."""
    gateway_url: str | None = Field(default=None, validation_alias="DISCORD_GATEWAY_URL")
    """Discord's gateway URL (proxies and tests)."""
    typing_timeout: float = Field(default=90.0, gt=0, validation_alias="DISCORD_TYPING_TIMEOUT")
    """Seconds the typing indicator may run."""
    command_timeout: float = Field(
        default=600.0, gt=0, le=900, validation_alias="DISCORD_COMMAND_TIMEOUT"
    )
    """Seconds a slash command's interaction may wait for its answer."""

    @field_validator(
        "allowed_channels", "always_answer_channels", "ambient_channels", mode="before"
    )
    @classmethod
    def _split_channels(cls, value: Any) -> Any:
        if isinstance(value, str):
            return frozenset(int(part) for part in value.replace(" ", "").split(",") if part)
        return value

    @field_validator("api_base_url")
    @classmethod
    def _check_api_base(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip().rstrip("/")
        if not value.startswith(("http://", "https://")) or not _API_PATH.search(value):
            raise ValueError("must be an http(s) URL ending in the API version, like /api/v10")
        return value

    @field_validator("gateway_url")
    @classmethod
    def _check_gateway(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip()
        if not value.startswith(("ws://", "wss://")):
            raise ValueError("must be a ws:// or wss:// URL")
        return value

    @property
    def configured(self) -> bool:
        """``DISCORD_TOKEN`` is set: the adapter runs."""
        return bool(self.token_value())

    def token_value(self) -> str:
        return self.token.get_secret_value().strip() if self.token is not None else ""

    def secret_values(self) -> list[str]:
        """Values a log formatter must mask."""
        token = self.token_value()
        return [token] if token else []
