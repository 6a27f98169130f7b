"""Settings of the YouTube live chat adapter: one section of the settings root, data only.

The bot speaks as the YouTube channel that granted an OAuth refresh token (scope
``youtube.force-ssl``); without ``YOUTUBE_REFRESH_TOKEN`` the adapter is simply off. Problems
are ``ConfigError`` naming the variable and where to get its value.

The chat is read with ``liveChatMessages.streamList`` (gRPC, ``YOUTUBE_GRPC_TARGET``) and, when
that is unavailable, by polling ``liveChatMessages.list`` (``YOUTUBE_READ_MODE`` chooses).
``YOUTUBE_GRPC_INSECURE`` (plaintext gRPC) exists for the loopback test servers only and is
refused for any target that is not on this machine.
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr

from bot.settings.base import ConfigError, Section

CREDENTIALS_URL = "https://console.cloud.google.com/apis/credentials"
TOKEN_HELP = (
    "create an OAuth client (type: Desktop app) at "
    f"{CREDENTIALS_URL}, then run `chorus auth youtube` to get the refresh token (docs/auth.md)"
)

_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


class YouTubeSettings(Section):
    client_id: str | None = Field(default=None, validation_alias="YOUTUBE_CLIENT_ID")
    """The Google Cloud OAuth client's ID."""
    client_secret: SecretStr | None = Field(default=None, validation_alias="YOUTUBE_CLIENT_SECRET")
    """The Google Cloud OAuth client's secret."""
    refresh_token: SecretStr | None = Field(default=None, validation_alias="YOUTUBE_REFRESH_TOKEN")
    """A refresh token with the `youtube.force-ssl` scope, signed in as the bot's channel; setting
    it turns the YouTube adapter on."""
    video_id: str | None = Field(default=None, validation_alias="YOUTUBE_VIDEO_ID")
    """Follow this one stream; unset: the authorised channel's live broadcast whenever one is on
    air."""
    bot_name: str | None = Field(default=None, validation_alias="YOUTUBE_BOT_NAME")
    """An extra `@name` that counts as a mention (the channel's title and handle always do)."""
    unaddressed: Literal["ambient", "answer", "ignore"] = Field(
        default="ambient", validation_alias="YOUTUBE_UNADDRESSED"
    )
    """Unaddressed chat: `ambient` (the engagement policy decides), `answer` (always) or `ignore`.
    """

    api_base_url: str = Field(
        default="https://www.googleapis.com/youtube/v3", validation_alias="YOUTUBE_API_BASE_URL"
    )
    """The YouTube Data API base (proxies and tests)."""
    token_url: str = Field(
        default="https://oauth2.googleapis.com/token",
        validation_alias="GOOGLE_OAUTH_TOKEN_URL",
        description="Google's OAuth token endpoint: refreshes the access token, and exchanges "
        "the code of `chorus auth youtube` (a proxy or a test's loopback server)",
    )
    auth_url: str = Field(
        default="https://accounts.google.com/o/oauth2/v2/auth",
        validation_alias="GOOGLE_OAUTH_AUTH_URL",
        description="Google's OAuth authorization endpoint: the consent page `chorus auth "
        "youtube` sends the browser to (a test's loopback server)",
    )

    read_mode: Literal["auto", "stream", "poll"] = Field(
        default="auto", validation_alias="YOUTUBE_READ_MODE"
    )
    """How the chat is read: `auto` (the gRPC `streamList` stream, polling when it is unavailable),
    `stream` (never poll) or `poll` (never stream)."""
    grpc_target: str = Field(
        default="youtube.googleapis.com:443", validation_alias="YOUTUBE_GRPC_TARGET"
    )
    """The `streamList` endpoint (`host:port`, TLS)."""
    grpc_insecure: bool = Field(default=False, validation_alias="YOUTUBE_GRPC_INSECURE")
    """Plaintext gRPC, for loopback test servers only (refused for any other host)."""

    daily_quota: int = Field(default=10_000, ge=100, validation_alias="YOUTUBE_DAILY_QUOTA")
    """The project's quota units a day."""
    cost_list: int = Field(default=5, ge=1, validation_alias="YOUTUBE_COST_LIST")
    """Quota units one poll of the chat costs."""
    cost_insert: int = Field(default=50, ge=1, validation_alias="YOUTUBE_COST_INSERT")
    """Quota units one message sent costs."""
    cost_other: int = Field(default=1, ge=1, validation_alias="YOUTUBE_COST_OTHER")
    """Quota units any other call costs."""
    cost_moderation: int = Field(default=50, ge=1, validation_alias="YOUTUBE_COST_MODERATION")
    """Quota units one moderation action costs (a message deleted, a ban added or lifted); paid
    from the reply budget, like a message sent."""
    cost_stream: int = Field(default=5, ge=0, validation_alias="YOUTUBE_COST_STREAM")
    """Quota units one `streamList` connection costs (0 if your project's quota page shows the
    stream costs nothing)."""
    stream_hours: float = Field(default=4.0, gt=0, le=48, validation_alias="YOUTUBE_STREAM_HOURS")
    """How long a stream is expected to run (the day's reply budget is planned over it)."""
    # Replies a whole stream keeps for mentions at least (prorated over what is left of it).
    reserved_sends: int = Field(default=40, ge=0, validation_alias="YOUTUBE_RESERVED_SENDS")
    """Replies a whole stream keeps for mentions at least (more when mentions come faster)."""
    # While polling, reading is guaranteed a poll at least this often (the rest is for replies).
    poll_floor_seconds: float = Field(
        default=30.0, ge=5, le=600, validation_alias="YOUTUBE_POLL_FLOOR_SECONDS"
    )
    """While polling, reading is guaranteed a poll at least this often, in seconds."""
    broadcast_check_seconds: float = Field(
        default=300.0, ge=10, validation_alias="YOUTUBE_BROADCAST_CHECK_SECONDS"
    )
    """Seconds between looks for a new broadcast while none is live."""
    max_pieces: int = Field(default=2, ge=1, le=2, validation_alias="YOUTUBE_MAX_PIECES")
    """Messages one answer may take (1 or 2; 200 characters each, each paid)."""
    http_timeout: float = Field(default=30.0, gt=0, validation_alias="YOUTUBE_HTTP_TIMEOUT")
    """HTTP timeout of the YouTube API calls, in seconds."""

    @property
    def configured(self) -> bool:
        """``YOUTUBE_REFRESH_TOKEN`` is set: the adapter runs."""
        return self.enabled

    @property
    def enabled(self) -> bool:
        return bool(self.refresh_token and self.refresh_token.get_secret_value().strip())

    def check(self) -> None:
        """Raise ``ConfigError`` when the credentials or URLs cannot work (the adapter also
        checks that the quota leaves room to read the chat)."""
        if not (self.client_id and self.client_id.strip()):
            raise ConfigError(
                f"YOUTUBE_REFRESH_TOKEN is set but YOUTUBE_CLIENT_ID is not; {TOKEN_HELP}"
            )
        if not (self.client_secret and self.client_secret.get_secret_value().strip()):
            raise ConfigError(
                f"YOUTUBE_REFRESH_TOKEN is set but YOUTUBE_CLIENT_SECRET is not; {TOKEN_HELP}"
            )
        for name, url in (
            ("YOUTUBE_API_BASE_URL", self.api_base_url),
            ("GOOGLE_OAUTH_TOKEN_URL", self.token_url),
            ("GOOGLE_OAUTH_AUTH_URL", self.auth_url),
        ):
            if not url.startswith(("https://", "http://")):
                raise ConfigError(f"{name}={url!r} is not an http(s) URL")
        host = urlsplit(f"//{self.grpc_target}").hostname
        if not host or "/" in self.grpc_target:
            raise ConfigError(f"YOUTUBE_GRPC_TARGET={self.grpc_target!r} is not host:port")
        if self.grpc_insecure and host not in _LOOPBACK:
            raise ConfigError(
                "YOUTUBE_GRPC_INSECURE is for loopback test servers only; "
                f"YOUTUBE_GRPC_TARGET={self.grpc_target!r} must be reached over TLS"
            )

    def secret_values(self) -> list[str]:
        """For the log redactor."""
        secrets = (self.client_secret, self.refresh_token)
        return [s.get_secret_value() for s in secrets if s and s.get_secret_value()]
