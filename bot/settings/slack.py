"""Slack settings: one section of the settings root, data only (no slack-sdk import).

The variable names are Slack's own (``SLACK_BOT_TOKEN``, ``SLACK_APP_TOKEN``,
``SLACK_SIGNING_SECRET``), the ones every Slack tutorial and bolt itself use. Which transport runs
follows from what is set: an app-level token selects Socket Mode (no public URL needed); a
signing secret alone selects the HTTP Events API. Problems surface as ``ConfigError`` naming the
variable and where in the Slack app settings to find its value.

Two ways to run: one workspace (``SLACK_BOT_TOKEN``, the default) or many
(``SLACK_CLIENT_ID`` + ``SLACK_CLIENT_SECRET`` + ``SLACK_TOKEN_ENCRYPTION_KEY``): the app is
installed through the OAuth v2 flow (``/slack/install``) and each workspace's bot token is kept,
encrypted, in the state store. Many workspaces need the HTTP endpoint (the install pages live
there), so ``SLACK_SIGNING_SECRET``, not ``SLACK_APP_TOKEN``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field, SecretStr, field_validator

from bot.settings.base import ConfigError, Section

APPS_URL = "https://api.slack.com/apps"
DEFAULT_API_BASE_URL = "https://slack.com/api/"
DEFAULT_AUTHORIZE_URL = "https://slack.com/oauth/v2/authorize"
DEFAULT_SCOPES = (  # deploy/slack-app-manifest.yaml's bot scopes
    "app_mentions:read,chat:write,im:history,im:read,channels:history,groups:history,"
    "mpim:history,files:read,commands,users:read"
)

ChannelSet = frozenset[str]


class SlackMode(StrEnum):
    SOCKET = "socket"
    HTTP = "http"


class SlackSettings(Section):
    """Every variable the Slack adapter reads (documented in ``.env.example``)."""

    bot_token: SecretStr | None = Field(default=None, validation_alias="SLACK_BOT_TOKEN")
    """The Bot User OAuth Token (`xoxb-...`); setting it turns the Slack adapter on."""
    app_token: SecretStr | None = Field(default=None, validation_alias="SLACK_APP_TOKEN")
    """The app-level token (`xapp-...`, scope `connections:write`): Socket Mode, no public URL
    needed."""
    signing_secret: SecretStr | None = Field(default=None, validation_alias="SLACK_SIGNING_SECRET")
    """The app's signing secret, for the HTTP Events API instead of Socket Mode."""
    http_host: str = Field(default="0.0.0.0", validation_alias="SLACK_HTTP_HOST")
    """Address the HTTP Events API endpoint listens on."""
    http_port: int = Field(default=3000, ge=0, le=65535, validation_alias="SLACK_HTTP_PORT")
    """Port of the HTTP Events API endpoint (`/slack/events`)."""
    api_base_url: str = Field(default=DEFAULT_API_BASE_URL, validation_alias="SLACK_API_BASE_URL")
    """Slack's Web API base (GovSlack: `https://slack-gov.com/api/`; tests)."""
    ambient_channels: ChannelSet = Field(
        default=frozenset(), validation_alias="SLACK_AMBIENT_CHANNELS"
    )
    """Comma list of channel ids where the engagement policy decides when to speak."""
    always_answer_channels: ChannelSet = Field(
        default=frozenset(), validation_alias="SLACK_ALWAYS_ANSWER_CHANNELS"
    )
    """Comma list of channel ids where the bot answers every message."""
    max_file_bytes: int = Field(
        default=5 * 1024 * 1024, ge=0, validation_alias="SLACK_MAX_FILE_BYTES"
    )
    """Largest shared image downloaded for the model, in bytes."""
    native_streaming: bool = Field(
        default=True,
        validation_alias="SLACK_NATIVE_STREAMING",
    )
    """Stream answers with `chat.startStream`/`appendStream`/`stopStream` (the app's Agents & AI
    Apps feature); `false`, or when Slack refuses them: post the first part, then `chat.update` it.
    """

    client_id: str = Field(default="", validation_alias="SLACK_CLIENT_ID")
    """Many workspaces: the app's Client ID (Basic Information > App Credentials). With
    `SLACK_CLIENT_SECRET` and `SLACK_TOKEN_ENCRYPTION_KEY` it turns on the OAuth install flow
    (`/slack/install`, `/slack/oauth_redirect`) instead of the one `SLACK_BOT_TOKEN`."""
    client_secret: SecretStr | None = Field(default=None, validation_alias="SLACK_CLIENT_SECRET")
    """Many workspaces: the app's Client Secret (Basic Information > App Credentials)."""
    token_encryption_key: SecretStr | None = Field(
        default=None, validation_alias="SLACK_TOKEN_ENCRYPTION_KEY"
    )
    """Many workspaces: the key the workspaces' tokens are encrypted with in the state store (a
    Fernet key: 44 characters of URL-safe base64; make one with
    `python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"`).
    Several keys, comma-separated: the first encrypts, all decrypt (key rotation)."""
    scopes: str = Field(default=DEFAULT_SCOPES, validation_alias="SLACK_SCOPES")
    """Many workspaces: the bot scopes asked for at install, comma-separated (the same list
    as OAuth & Permissions > Bot Token Scopes of the app)."""
    redirect_uri: str = Field(default="", validation_alias="SLACK_REDIRECT_URI")
    """Many workspaces: the Redirect URL registered under OAuth & Permissions, e.g.
    `https://chorus.example.org/slack/oauth_redirect`; empty: the one registered (if only one)."""
    authorize_url: str = Field(
        default=DEFAULT_AUTHORIZE_URL, validation_alias="SLACK_AUTHORIZE_URL"
    )
    """Many workspaces: where `/slack/install` sends the browser (GovSlack:
    `https://slack-gov.com/oauth/v2/authorize`; tests)."""
    token_rotation_minutes: int = Field(
        default=120, ge=1, validation_alias="SLACK_TOKEN_ROTATION_MINUTES"
    )
    """Many workspaces, apps with token rotation on: a bot token this close to expiring (in
    minutes) is refreshed with its refresh token before it is used."""
    uninstall_grace_seconds: int = Field(
        default=7 * 24 * 3600, ge=0, validation_alias="SLACK_UNINSTALL_GRACE_SECONDS"
    )
    """Many workspaces: how long after a workspace uninstalls the app its data (conversation
    history, its members' memory) is kept before it is deleted; a reinstall within it keeps
    the data. The tokens are deleted at once."""

    @field_validator("ambient_channels", "always_answer_channels", mode="before")
    @classmethod
    def _split_channels(cls, value: Any) -> Any:
        if isinstance(value, str):
            return frozenset(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("api_base_url")
    @classmethod
    def _normalise_base_url(cls, value: str) -> str:
        return normalise_base_url(value)

    # -- derived ---------------------------------------------------------------------------
    @property
    def configured(self) -> bool:
        """``SLACK_BOT_TOKEN`` or ``SLACK_CLIENT_ID`` is set: the adapter runs (``check`` says
        whether it can)."""
        return bool(self.bot_token_value()) or self.multi_workspace

    @property
    def multi_workspace(self) -> bool:
        """``SLACK_CLIENT_ID`` is set: installed by OAuth in many workspaces."""
        return bool(self.client_id.strip())

    def client_secret_value(self) -> str:
        return _secret(self.client_secret)

    def encryption_keys(self) -> list[str]:
        """``SLACK_TOKEN_ENCRYPTION_KEY``'s keys, the encrypting one first."""
        return [k.strip() for k in _secret(self.token_encryption_key).split(",") if k.strip()]

    def scope_list(self) -> list[str]:
        return [s.strip() for s in self.scopes.split(",") if s.strip()]

    @property
    def mode(self) -> SlackMode:
        return SlackMode.SOCKET if _secret(self.app_token) else SlackMode.HTTP

    def bot_token_value(self) -> str:
        return _secret(self.bot_token)

    def app_token_value(self) -> str:
        return _secret(self.app_token)

    def signing_secret_value(self) -> str:
        return _secret(self.signing_secret)

    def secret_values(self) -> list[str]:
        """Every secret's value, for the log redactor."""
        values = (
            self.bot_token_value(),
            self.app_token_value(),
            self.signing_secret_value(),
            self.client_secret_value(),
            *self.encryption_keys(),
        )
        return [v for v in values if v]

    def check(self) -> None:
        """Raise ``ConfigError`` naming the variable when the configuration cannot work."""
        if self.multi_workspace:
            self._check_multi()
            return
        bot = self.bot_token_value()
        if not bot.startswith("xoxb-"):
            raise ConfigError(
                "SLACK_BOT_TOKEN must be the bot token (it starts with xoxb-); copy the "
                f"'Bot User OAuth Token' from OAuth & Permissions of your app at {APPS_URL}"
            )
        app = self.app_token_value()
        if app and not app.startswith("xapp-"):
            raise ConfigError(
                "SLACK_APP_TOKEN must be an app-level token (it starts with xapp-); create one "
                f"with the connections:write scope under Basic Information of your app at {APPS_URL}"
            )
        if not app and not self.signing_secret_value():
            raise ConfigError(
                "Slack needs a transport: set SLACK_APP_TOKEN (xapp-..., Socket Mode, no public "
                "URL needed; Basic Information > App-Level Tokens) or SLACK_SIGNING_SECRET "
                "(HTTP Events API on SLACK_HTTP_PORT; Basic Information > Signing Secret) "
                f"of your app at {APPS_URL}"
            )

    def _check_multi(self) -> None:
        where = f"Basic Information > App Credentials of your app at {APPS_URL}"
        if self.bot_token_value():
            raise ConfigError(
                "SLACK_BOT_TOKEN and SLACK_CLIENT_ID are both set: set SLACK_BOT_TOKEN for one "
                "workspace, or SLACK_CLIENT_ID/SLACK_CLIENT_SECRET for many (installed through "
                "/slack/install), not both"
            )
        if not self.client_secret_value():
            raise ConfigError(f"SLACK_CLIENT_ID is set but SLACK_CLIENT_SECRET is not; see {where}")
        if not self.encryption_keys():
            raise ConfigError(
                "SLACK_TOKEN_ENCRYPTION_KEY is not set: many workspaces keep each workspace's "
                'token encrypted; make a key with: python -c "from cryptography.fernet import '
                'Fernet; print(Fernet.generate_key().decode())"'
            )
        if self.app_token_value() or not self.signing_secret_value():
            raise ConfigError(
                "many workspaces need the HTTP endpoint (it serves /slack/install and "
                "/slack/oauth_redirect): set SLACK_SIGNING_SECRET (Basic Information > Signing "
                f"Secret of your app at {APPS_URL}) and unset SLACK_APP_TOKEN"
            )
        if not self.scope_list():
            raise ConfigError("SLACK_SCOPES is empty: list the app's bot scopes, comma-separated")


def normalise_base_url(value: str) -> str:
    """``https://slack-gov.com/api`` -> ``https://slack-gov.com/api/``.

    slack-sdk joins the method name onto the base URL with ``urljoin``, which drops the last
    path segment unless the base ends in ``/`` (``.../api`` + ``chat.postMessage`` would become
    ``.../chat.postMessage``).
    """
    value = value.strip()
    if not value.startswith(("http://", "https://")):
        raise ValueError(f"{value!r} is not an http(s) URL, e.g. https://slack.com/api/")
    return value if value.endswith("/") else value + "/"


def _secret(value: SecretStr | None) -> str:
    return value.get_secret_value().strip() if value is not None else ""
