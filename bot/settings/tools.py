"""Which tools run and how: ``CHORUS_TOOLS_*``, ``CHORUS_FETCH_*``, ``CHORUS_FEEDS`` and the MCP
servers file.

The two file paths (``CHORUS_TOOLS_CHANNELS``, ``CHORUS_MCP_CONFIG``) are only paths here; the
toolbox and the MCP loader read the files, naming the variable in their errors. The fetch
allowlist is parsed now, so a bad entry fails at start with the variable named.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from bot.settings.allowlist import Allowlist
from bot.settings.base import Section, comma_set, comma_tuple


class ToolSettings(Section):
    tools_enabled: frozenset[str] | None = Field(
        default=None, validation_alias="CHORUS_TOOLS_ENABLED"
    )
    tools_disabled: frozenset[str] = Field(
        default=frozenset(), validation_alias="CHORUS_TOOLS_DISABLED"
    )
    tools_channels: Path | None = Field(default=None, validation_alias="CHORUS_TOOLS_CHANNELS")
    tool_timeout: float = Field(default=10.0, gt=0, le=600, validation_alias="CHORUS_TOOL_TIMEOUT")
    fetch_allow: frozenset[str] = Field(default=frozenset(), validation_alias="CHORUS_FETCH_ALLOW")
    fetch_max_bytes: int = Field(
        default=2_000_000, ge=1024, validation_alias="CHORUS_FETCH_MAX_BYTES"
    )
    fetch_timeout: float = Field(
        default=10.0, gt=0, le=120, validation_alias="CHORUS_FETCH_TIMEOUT"
    )
    feeds: tuple[str, ...] = Field(default=(), validation_alias="CHORUS_FEEDS")
    mcp_config: Path | None = Field(default=None, validation_alias="CHORUS_MCP_CONFIG")

    @field_validator("tools_enabled", mode="before")
    @classmethod
    def _split_enabled(cls, value: Any) -> Any:
        if isinstance(value, str):  # an empty CHORUS_TOOLS_ENABLED means "all", like unset
            return comma_set(value) or None
        return value

    @field_validator("tools_disabled", "fetch_allow", mode="before")
    @classmethod
    def _split_set(cls, value: Any) -> Any:
        return comma_set(value)

    @field_validator("tools_channels", "mcp_config", mode="before")
    @classmethod
    def _empty_path(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("fetch_allow")
    @classmethod
    def _check_allow(cls, value: frozenset[str]) -> frozenset[str]:
        Allowlist.parse(value)  # raises ValueError naming a bad entry
        return value

    @field_validator("feeds", mode="before")
    @classmethod
    def _split_feeds(cls, value: Any) -> Any:
        return comma_tuple(value)

    @field_validator("feeds")
    @classmethod
    def _check_feeds(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for url in value:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"{url!r} is not an http(s) URL")
        return value
