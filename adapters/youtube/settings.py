"""Settings of the YouTube live chat adapter, from the environment and ``.env``.

The bot speaks as the YouTube channel that granted an OAuth refresh token (scope
``youtube.force-ssl``); without ``YOUTUBE_REFRESH_TOKEN`` the adapter is simply off. Problems
are ``ConfigError`` naming the variable and where to get its value.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from adapters.youtube.quota import QuotaConfig
from bot.config import ConfigError

CREDENTIALS_URL = "https://console.cloud.google.com/apis/credentials"
TOKEN_HELP = (
    "create an OAuth client (type: Desktop app) at "
    f"{CREDENTIALS_URL} and get a refresh token with the youtube.force-ssl scope (see README)"
)


class YouTubeSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", populate_by_name=True
    )

    client_id: str | None = Field(default=None, validation_alias="YOUTUBE_CLIENT_ID")
    client_secret: SecretStr | None = Field(default=None, validation_alias="YOUTUBE_CLIENT_SECRET")
    refresh_token: SecretStr | None = Field(default=None, validation_alias="YOUTUBE_REFRESH_TOKEN")
    video_id: str | None = Field(default=None, validation_alias="YOUTUBE_VIDEO_ID")
    bot_name: str | None = Field(default=None, validation_alias="YOUTUBE_BOT_NAME")
    unaddressed: Literal["ambient", "answer", "ignore"] = Field(
        default="ambient", validation_alias="YOUTUBE_UNADDRESSED"
    )

    api_base_url: str = Field(
        default="https://www.googleapis.com/youtube/v3", validation_alias="YOUTUBE_API_BASE_URL"
    )
    token_url: str = Field(
        default="https://oauth2.googleapis.com/token", validation_alias="GOOGLE_OAUTH_TOKEN_URL"
    )

    daily_quota: int = Field(default=10_000, ge=100, validation_alias="YOUTUBE_DAILY_QUOTA")
    cost_list: int = Field(default=5, ge=1, validation_alias="YOUTUBE_COST_LIST")
    cost_insert: int = Field(default=50, ge=1, validation_alias="YOUTUBE_COST_INSERT")
    cost_other: int = Field(default=1, ge=1, validation_alias="YOUTUBE_COST_OTHER")
    stream_hours: float = Field(default=4.0, gt=0, le=48, validation_alias="YOUTUBE_STREAM_HOURS")
    reserved_sends: int = Field(default=40, ge=0, validation_alias="YOUTUBE_RESERVED_SENDS")
    broadcast_check_seconds: float = Field(
        default=300.0, ge=10, validation_alias="YOUTUBE_BROADCAST_CHECK_SECONDS"
    )
    max_pieces: int = Field(default=2, ge=1, le=2, validation_alias="YOUTUBE_MAX_PIECES")
    http_timeout: float = Field(default=30.0, gt=0, validation_alias="YOUTUBE_HTTP_TIMEOUT")

    @property
    def enabled(self) -> bool:
        return bool(self.refresh_token and self.refresh_token.get_secret_value().strip())

    def quota(self) -> QuotaConfig:
        return QuotaConfig(
            daily_units=self.daily_quota,
            list_cost=self.cost_list,
            insert_cost=self.cost_insert,
            other_cost=self.cost_other,
            reserved_sends=self.reserved_sends,
            stream_hours=self.stream_hours,
        )

    def check(self) -> None:
        """Raise ``ConfigError`` when an enabled configuration cannot work."""
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
        ):
            if not url.startswith(("https://", "http://")):
                raise ConfigError(f"{name}={url!r} is not an http(s) URL")
        quota = self.quota()
        polls_left = quota.daily_units - quota.reserve(0)
        if polls_left < 100 * quota.list_cost:
            raise ConfigError(
                f"YOUTUBE_RESERVED_SENDS={self.reserved_sends} x YOUTUBE_COST_INSERT="
                f"{self.cost_insert} leaves {max(polls_left, 0)} of YOUTUBE_DAILY_QUOTA="
                f"{self.daily_quota} units for reading the chat; lower the reserve or raise "
                "the quota (request more in the Google Cloud console)"
            )

    def secret_values(self) -> list[str]:
        """For the log redactor."""
        secrets = (self.client_secret, self.refresh_token)
        return [s.get_secret_value() for s in secrets if s and s.get_secret_value()]


def load_youtube_settings(**overrides: object) -> YouTubeSettings:
    """Read the settings; pydantic's errors become one ``ConfigError`` naming each variable."""
    try:
        return YouTubeSettings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        lines = []
        for error in exc.errors():
            field = str(error["loc"][0]) if error["loc"] else ""
            info = YouTubeSettings.model_fields.get(field)
            name = (
                info.validation_alias if info and isinstance(info.validation_alias, str) else field
            )
            lines.append(f"{name}: {str(error['msg']).removeprefix('Value error, ')}")
        raise ConfigError("invalid YouTube settings:\n  " + "\n  ".join(lines)) from None
