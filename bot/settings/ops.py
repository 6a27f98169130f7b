"""Running the process: logs, the health/metrics server, and the price table of the cost metric.

``CHORUS_PRICES`` is only a path here; ``bot.llm.pricing.load_prices`` reads the file, so a bad
file is reported with the same variable name as a bad value.
"""

from __future__ import annotations

from ipaddress import ip_network
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from bot.settings.base import Section, comma_tuple

DEFAULT_HEALTH_PORT = 9464


class LoggingSettings(Section):
    level: str = Field(default="INFO", validation_alias="CHORUS_LOG_LEVEL")
    """`DEBUG`, `INFO`, `WARNING` or `ERROR`."""
    format: Literal["text", "json"] = Field(default="text", validation_alias="CHORUS_LOG_FORMAT")
    """`text` (logfmt) or `json`, on stderr."""
    feed_level: str = Field(default="WARNING", validation_alias="CHORUS_LOG_FEED_LEVEL")
    """The lowest level of the log lines each process keeps in Redis for the dashboard's Logs
    page (`WARNING`; `INFO` to see more there; `OFF`: none)."""

    @field_validator("feed_level")
    @classmethod
    def _check_feed_level(cls, value: str) -> str:
        level = value.strip().upper()
        if level not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL", "OFF"}:
            raise ValueError("use DEBUG, INFO, WARNING, ERROR, CRITICAL or OFF")
        return level

    @field_validator("level")
    @classmethod
    def _check_level(cls, value: str) -> str:
        level = value.strip().upper()
        if level not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise ValueError("use DEBUG, INFO, WARNING, ERROR or CRITICAL")
        return level


class HealthSettings(Section):
    """``/healthz``, ``/readyz`` and ``/metrics``; port 0 turns the server off."""

    host: str = Field(default="0.0.0.0", min_length=1, validation_alias="CHORUS_HEALTH_HOST")
    """Address the health server (`/healthz`, `/readyz`, `/metrics`) listens on."""
    port: int = Field(
        default=DEFAULT_HEALTH_PORT, ge=0, le=65535, validation_alias="CHORUS_HEALTH_PORT"
    )
    """Port of `/healthz`, `/readyz` and `/metrics`; `0` turns the health server off."""

    @property
    def enabled(self) -> bool:
        return self.port != 0


class MetricsSettings(Section):
    prices: Path | None = Field(default=None, validation_alias="CHORUS_PRICES")
    """JSON price table for the cost metric and the daily cost cap (overrides the shipped list
    prices)."""

    @field_validator("prices", mode="before")
    @classmethod
    def _empty_path(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value


LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


class AdminSettings(Section):
    """The admin dashboard (bot/admin): off unless ``CHORUS_ADMIN_PORT`` is set; always behind
    ``CHORUS_ADMIN_TOKEN``, so a dashboard can never start open.

    ``trust_proxy`` (``CHORUS_ADMIN_TRUST_PROXY``): the reverse proxies, as addresses or
    networks, whose ``X-Forwarded-For`` and ``X-Forwarded-Proto`` the dashboard believes. Empty
    by default: those headers are anyone's to send, so they count only from a peer listed here.
    """

    host: str = Field(default="127.0.0.1", min_length=1, validation_alias="CHORUS_ADMIN_HOST")
    """Address the admin dashboard listens on (loopback: reachable from this machine only)."""
    port: int = Field(default=0, ge=0, le=65535, validation_alias="CHORUS_ADMIN_PORT")
    """Serve the admin dashboard on this port; `0`: no dashboard."""
    token: SecretStr | None = Field(default=None, validation_alias="CHORUS_ADMIN_TOKEN")
    """The dashboard's login, at least 16 characters; required when `CHORUS_ADMIN_PORT` is set."""
    trust_proxy: tuple[str, ...] = Field(default=(), validation_alias="CHORUS_ADMIN_TRUST_PROXY")
    """Comma list of the reverse proxies' addresses or networks whose `X-Forwarded-For` and
    `X-Forwarded-Proto` the dashboard believes; empty: the headers are ignored."""

    @field_validator("token", mode="before")
    @classmethod
    def _empty_token(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("trust_proxy", mode="before")
    @classmethod
    def _split_proxies(cls, value: Any) -> Any:
        return comma_tuple(value)

    @field_validator("trust_proxy")
    @classmethod
    def _check_proxies(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        networks = []
        for item in value:
            try:
                networks.append(str(ip_network(item, strict=False)))
            except ValueError:
                raise ValueError(
                    f"{item!r} is not an IP address or network; list the reverse proxies in "
                    "front of the dashboard, e.g. 127.0.0.1 or 10.0.0.0/8, separated by commas"
                ) from None
        return tuple(dict.fromkeys(networks))

    @model_validator(mode="after")
    def _token_when_enabled(self) -> AdminSettings:
        if self.enabled and self.token is None:
            where = (
                "on a loopback address"
                if self.host in LOOPBACK_HOSTS
                else f"on {self.host}, a non-loopback address reachable from the network,"
            )
            raise ValueError(
                f"CHORUS_ADMIN_TOKEN is required: the admin dashboard (CHORUS_ADMIN_PORT="
                f"{self.port}) would start {where} without a login; set CHORUS_ADMIN_TOKEN to "
                "a long random string, or unset CHORUS_ADMIN_PORT"
            )
        if self.token is not None and len(self.token.get_secret_value()) < 16:
            raise ValueError("CHORUS_ADMIN_TOKEN must be at least 16 characters long")
        return self

    @property
    def enabled(self) -> bool:
        return self.port != 0

    def secret_values(self) -> list[str]:
        return [self.token.get_secret_value()] if self.token is not None else []
