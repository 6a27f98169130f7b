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
    """Comma list of the tools the model may use; empty: all."""
    tools_disabled: frozenset[str] = Field(
        default=frozenset(), validation_alias="CHORUS_TOOLS_DISABLED"
    )
    """Comma list of tools the model may not use."""
    tools_channels: Path | None = Field(default=None, validation_alias="CHORUS_TOOLS_CHANNELS")
    """JSON file of per-channel tool overrides."""
    tool_timeout: float = Field(default=10.0, gt=0, le=600, validation_alias="CHORUS_TOOL_TIMEOUT")
    """Seconds before a tool call is abandoned."""
    fetch_allow: frozenset[str] = Field(default=frozenset(), validation_alias="CHORUS_FETCH_ALLOW")
    """Hosts, `host:port` or CIDRs `fetch_page` and `news_headlines` may reach despite the private-
    address block (the knowledge base has its own: `CHORUS_KNOWLEDGE_FETCH_ALLOW`)."""
    fetch_max_bytes: int = Field(
        default=2_000_000, ge=1024, validation_alias="CHORUS_FETCH_MAX_BYTES"
    )
    """Largest page `fetch_page` reads, in bytes."""
    fetch_timeout: float = Field(
        default=10.0, gt=0, le=120, validation_alias="CHORUS_FETCH_TIMEOUT"
    )
    """Seconds `fetch_page` waits for a page."""
    feeds: tuple[str, ...] = Field(default=(), validation_alias="CHORUS_FEEDS")
    """Comma list of RSS/Atom URLs for `news_headlines`."""
    mcp_config: Path | None = Field(default=None, validation_alias="CHORUS_MCP_CONFIG")
    """JSON file listing MCP servers whose tools the bot may use."""

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
