"""Twitch settings: one section of the settings root, data only (no twitchio import).

Chorus talks to Twitch as one bot *user* (EventSub ``channel.chat.message`` and the Send Chat
Message API both act as a user), so besides the application's client id and secret it needs that
user's access and refresh tokens. The refreshed pair is stored where ``TWITCH_TOKEN_STORE`` says
(Redis by default, or a file), never in the working directory. Problems surface as
``ConfigError`` naming the variable and where to get its value.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator

from bot.settings.base import ConfigError, Section

CONSOLE_URL = "https://dev.twitch.tv/console/apps"
TOKEN_HELP = (
    "run `chorus auth twitch` to sign the bot account in and store them in .env "
    "(scopes user:read:chat user:write:chat user:bot; docs/auth.md)"
)
DEFAULT_API_BASE_URL = "https://api.twitch.tv/helix/"
DEFAULT_AUTH_BASE_URL = "https://id.twitch.tv/"
DEFAULT_EVENTSUB_WS_URL = "wss://eventsub.wss.twitch.tv/ws"

_LOGIN = re.compile(r"^[a-z0-9_]{1,25}$")
Channels = tuple[str, ...]


class TwitchSettings(Section):
    """Every variable the Twitch adapter reads (documented in ``.env.example``)."""

    client_id: str | None = Field(default=None, validation_alias="TWITCH_CLIENT_ID")
    """The Twitch application's Client ID (dev.twitch.tv/console/apps); setting it turns the Twitch
    adapter on."""
    client_secret: SecretStr | None = Field(default=None, validation_alias="TWITCH_CLIENT_SECRET")
    """The Twitch application's client secret."""
    access_token: SecretStr | None = Field(default=None, validation_alias="TWITCH_ACCESS_TOKEN")
    """The bot account's user access token (scopes `user:read:chat user:write:chat user:bot`);
    refreshed and stored automatically."""
    refresh_token: SecretStr | None = Field(default=None, validation_alias="TWITCH_REFRESH_TOKEN")
    """The bot account's refresh token."""
    bot_id: str | None = Field(default=None, validation_alias="TWITCH_BOT_ID")
    """The bot account's user id; unset: read from the token."""
    channels: Channels = Field(default=(), validation_alias="TWITCH_CHANNELS")
    """Comma list of the channels (logins or ids) the bot joins."""
    ambient: bool = Field(default=True, validation_alias="TWITCH_AMBIENT")
    """`false`: publish only messages addressed to the bot (no engagement policy)."""
    stream_state: bool = Field(default=False, validation_alias="TWITCH_STREAM_STATE")
    """Subscribe to `stream.online` / `stream.offline` for plugins' stream events (two more
    EventSub subscriptions per channel, so only when asked for)."""
    redemptions: bool = Field(default=True, validation_alias="TWITCH_REDEMPTIONS")
    """Read channel-point redemptions in each channel whose broadcaster signed in with `chorus
    auth twitch --broadcaster` (websocket transport); `false`: never, and no notice about it."""
    bot_is_mod: bool | None = Field(default=None, validation_alias="TWITCH_BOT_IS_MOD")
    """Whether the bot is a moderator (100 messages per 30 s instead of 20); unset: detected from
    its own chat badges."""
    token_store: str = Field(default="redis", validation_alias="TWITCH_TOKEN_STORE")
    """Where refreshed tokens are kept: `redis`, or `file:/path/tokens.json`."""
    api_base_url: str = Field(default=DEFAULT_API_BASE_URL, validation_alias="TWITCH_API_BASE_URL")
    """Twitch's Helix API base (proxies and tests)."""
    auth_base_url: str = Field(
        default=DEFAULT_AUTH_BASE_URL, validation_alias="TWITCH_AUTH_BASE_URL"
    )
    """Twitch's OAuth base (proxies and tests)."""
    eventsub_ws_url: str = Field(
        default=DEFAULT_EVENTSUB_WS_URL, validation_alias="TWITCH_EVENTSUB_WS_URL"
    )
    """Twitch's EventSub WebSocket URL (proxies and tests)."""
    max_pieces: int = Field(default=2, ge=1, le=5, validation_alias="TWITCH_MAX_PIECES")
    """Messages one answer may take at most (500 characters each)."""
    transport: Literal["websocket", "conduit"] = Field(
        default="websocket", validation_alias="TWITCH_TRANSPORT"
    )
    """`websocket`: one EventSub WebSocket per process, subscribed with the bot's user token.
    `conduit`: an EventSub conduit whose shards the gateway processes share, subscribed with the
    app access token (each channel's broadcaster grants `channel:bot`, or makes the bot a
    moderator); channels join and leave without a restart (`chorus twitch join NAME`)."""
    conduit_id: str | None = Field(default=None, validation_alias="TWITCH_CONDUIT_ID")
    """With conduits: the conduit to use; unset: the one Chorus created before (kept in the
    state store), else a new one."""
    conduit_shards: int = Field(
        default=4, ge=1, le=20_000, validation_alias="TWITCH_CONDUIT_SHARDS"
    )
    """With conduits: the shard count of Chorus's conduit (one WebSocket each, spread over the
    gateway processes): a new conduit is created with it, and Chorus's existing one is resized
    to it (Update Conduits) by a gateway starting with another value. Set the same on every
    gateway; a conduit named by TWITCH_CONDUIT_ID keeps its own size."""
    shard_lease_seconds: float = Field(
        default=15.0, ge=3.0, le=600.0, validation_alias="TWITCH_SHARD_LEASE_SECONDS"
    )
    """With conduits: how long a gateway process's hold on its shards lasts unrenewed; a process
    dead this long has its shards moved to the others."""

    @field_validator("channels", mode="before")
    @classmethod
    def _split_channels(cls, value: Any) -> Any:
        if isinstance(value, str):
            parts = (p.strip().lstrip("#").lower() for p in value.split(","))
            return tuple(dict.fromkeys(p for p in parts if p))
        return value

    @field_validator("api_base_url", "auth_base_url")
    @classmethod
    def _slash(cls, value: str) -> str:
        # twitchio joins Route.BASE + path without a separator.
        return value.rstrip("/") + "/"

    @field_validator("token_store")
    @classmethod
    def _check_store(cls, value: str) -> str:
        value = value.strip()
        if value != "redis" and not (value.startswith("file:") and len(value) > len("file:")):
            raise ValueError("use 'redis' or 'file:/path/to/tokens.json'")
        return value

    # -- derived ---------------------------------------------------------------------------
    @property
    def configured(self) -> bool:
        return bool((self.client_id or "").strip())

    def secret(self, name: str) -> str:
        value: SecretStr | None = getattr(self, name)
        return value.get_secret_value().strip() if value else ""

    def channel_ids(self) -> list[str]:
        return [c for c in self.channels if c.isdigit()]

    def channel_logins(self) -> list[str]:
        return [c for c in self.channels if not c.isdigit()]

    def secret_values(self) -> list[str]:
        """Every secret's value, so the log formatter can mask any that leak."""
        names = ("client_secret", "access_token", "refresh_token")
        return [v for v in (self.secret(n) for n in names) if v]

    def require_complete(self) -> None:
        """Raise ``ConfigError`` naming the first missing or invalid variable."""
        if not self.secret("client_secret"):
            raise ConfigError(
                "TWITCH_CLIENT_ID is set but TWITCH_CLIENT_SECRET is not; create a secret for "
                f"the application at {CONSOLE_URL} (Manage -> New Secret)"
            )
        if not self.secret("access_token") or not self.secret("refresh_token"):
            raise ConfigError(
                "TWITCH_ACCESS_TOKEN and TWITCH_REFRESH_TOKEN must both be set to the bot "
                f"account's user tokens: {TOKEN_HELP}"
            )
        if not self.channels and self.transport != "conduit":
            raise ConfigError(
                "TWITCH_CHANNELS is empty; set it to the channels to join, as comma-separated "
                "logins or user ids (e.g. TWITCH_CHANNELS=mychannel,otherchannel)"
            )
        bad = [c for c in self.channel_logins() if not _LOGIN.match(c)]
        if bad:
            raise ConfigError(
                f"TWITCH_CHANNELS has {bad[0]!r}, which is neither a Twitch login "
                "(letters, digits, underscore; at most 25) nor a numeric user id"
            )
        if self.bot_id is not None and not self.bot_id.strip().isdigit():
            raise ConfigError(
                f"TWITCH_BOT_ID={self.bot_id!r} must be the bot account's numeric user id "
                "(leave it unset to read it from the access token)"
            )
