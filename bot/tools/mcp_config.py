"""The MCP servers file: the widely used ``mcpServers`` JSON format, validated up front.

The same file that Claude Desktop, Claude Code or Cursor read works here, so a server's docs can
be followed as written::

    {"mcpServers": {
        "files":  {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/srv"]},
        "remote": {"url": "https://mcp.example.com/mcp",
                   "headers": {"Authorization": "Bearer ${EXAMPLE_TOKEN}"}}}}

``command`` means a local server over stdio, ``url`` a remote one over streamable HTTP. Secrets
stay out of the file: ``${VAR}`` (or ``${VAR:-default}``) in ``command``, ``args``, ``env``,
``cwd``, ``url`` and ``headers`` is replaced from the environment when the server is started, and
a variable that is not set fails only that server. A stdio server inherits only a minimal
environment (``PATH``, ``HOME``...; the ``mcp`` SDK's choice), never our API keys: pass what it
needs in ``env``. Chorus's own per-server keys: ``timeout`` (seconds per tool call),
``startTimeout``, ``permission`` (``everyone``/``moderator``/``owner``), ``enabled`` and
``tools: {"allow": [...], "deny": [...]}`` (shell-style patterns on the server's tool names).

Also here, because they are policy rather than protocol: how tools are named
(``{server}__{tool}``, at most 64 characters) and how hard to try reconnecting. This module does
not import the ``mcp`` SDK, so a bad file is reported even without the extra.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import os
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from bot.resilience import RetryPolicy
from bot.settings import ConfigError, ToolSettings
from bot.tools.base import Permission

log = logging.getLogger("chorus.mcp")

CONFIG_ENV = "CHORUS_MCP_CONFIG"
MAX_NAME = 64  # ToolSpec.name: ^[A-Za-z0-9_-]{1,64}$

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
# "type" spellings used by other MCP clients for the two transports we speak.
_STDIO_TYPES = frozenset({"stdio"})
_HTTP_TYPES = frozenset({"http", "streamable-http", "streamable_http", "streamableHttp"})


class MCPConfigError(ConfigError):
    """The MCP servers file (or one server's entry) is wrong; the message says where."""


class ToolFilter(BaseModel):
    """Which of a server's tools to offer: ``allow`` (default: all), then minus ``deny``."""

    model_config = ConfigDict(extra="forbid", defer_build=True)  # built with an MCP file only

    allow: list[str] | None = None
    deny: list[str] = Field(default_factory=list)

    def allows(self, tool_name: str) -> bool:
        if self.allow is not None and not any(
            fnmatch.fnmatchcase(tool_name, p) for p in self.allow
        ):
            return False
        return not any(fnmatch.fnmatchcase(tool_name, p) for p in self.deny)


class ServerConfig(BaseModel):
    """One entry of ``mcpServers``. Unknown keys (other clients' settings) are ignored."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)

    type: str | None = None
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeout: float = Field(default=30.0, gt=0, le=3600)
    start_timeout: float = Field(default=20.0, gt=0, le=600, alias="startTimeout")
    permission: Permission = Permission.EVERYONE
    enabled: bool = True
    tools: ToolFilter = Field(default_factory=ToolFilter)

    @field_validator("command", "url")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be empty")
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> ServerConfig:
        if self.type == "sse":
            raise ValueError(
                "the legacy SSE transport is not supported; use the server's streamable HTTP "
                "endpoint (usually .../mcp) as url"
            )
        if self.command and self.url:
            raise ValueError("give either command (stdio) or url (streamable HTTP), not both")
        if not self.command and not self.url:
            raise ValueError("needs command (a local stdio server) or url (streamable HTTP)")
        expected = _STDIO_TYPES if self.command else _HTTP_TYPES
        if self.type is not None and self.type not in expected:
            transport = "command (stdio)" if self.command else "url (streamable HTTP)"
            raise ValueError(f"type {self.type!r} does not match {transport}")
        if self.url and not self.url.startswith(("http://", "https://", "${")):
            raise ValueError(f"url must start with http:// or https://, got {self.url!r}")
        return self

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command else "http"

    @property
    def unknown_keys(self) -> list[str]:
        return sorted(self.model_extra or {})

    def expanded(self, server: str, environ: Mapping[str, str] | None = None) -> ServerConfig:
        """A copy with every ``${VAR}`` replaced; a variable that is not set is an error."""
        env = os.environ if environ is None else environ

        def sub(value: str, where: str) -> str:
            def one(match: re.Match[str]) -> str:
                name, default = match.group(1), match.group(2)
                if name in env:
                    return env[name]
                if default is not None:
                    return default
                raise MCPConfigError(
                    f"MCP server {server!r}: {where} uses ${{{name}}}, but {name} is not set "
                    "in the environment"
                )

            return _VAR.sub(one, value)

        return self.model_copy(
            update={
                "command": sub(self.command, "command") if self.command else None,
                "args": [sub(a, f"args[{i}]") for i, a in enumerate(self.args)],
                "env": {k: sub(v, f"env.{k}") for k, v in self.env.items()},
                "cwd": sub(self.cwd, "cwd") if self.cwd else None,
                "url": sub(self.url, "url") if self.url else None,
                "headers": {k: sub(v, f"headers.{k}") for k, v in self.headers.items()},
            }
        )


class MCPConfig(BaseModel):
    """The whole file. ``mcpServers`` keeps the file's order; tools are sorted later anyway."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)

    servers: dict[str, ServerConfig] = Field(alias="mcpServers")

    @field_validator("servers")
    @classmethod
    def _names(cls, value: dict[str, ServerConfig]) -> dict[str, ServerConfig]:
        for name in value:
            if not name.strip():
                raise ValueError("a server name must not be empty")
        return value

    @property
    def enabled(self) -> dict[str, ServerConfig]:
        return {name: server for name, server in self.servers.items() if server.enabled}


def _json_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", part):
            path += f".{part}" if path else part
        else:
            path += f"[{json.dumps(part)}]"
    return path or "(top level)"


def parse_config(text: str, source: str = "<string>") -> MCPConfig:
    """Parse and validate the JSON text of an MCP servers file; errors name ``source``."""
    try:
        raw: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MCPConfigError(
            f"MCP config {source}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    if not isinstance(raw, dict) or "mcpServers" not in raw:
        raise MCPConfigError(
            f'MCP config {source}: expected a JSON object with an "mcpServers" key, e.g. '
            '{"mcpServers": {"files": {"command": "python", "args": ["-m", "my_server"]}}}'
        )
    try:
        config = MCPConfig.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_url=False):
            message = error["msg"].removeprefix("Value error, ")
            problems.append(f"  {_json_path(tuple(error['loc']))}: {message}")
        raise MCPConfigError(f"MCP config {source} is invalid:\n" + "\n".join(problems)) from None
    for key in sorted(config.model_extra or {}):
        log.warning("MCP config %s: ignoring unknown top-level key %r", source, key)
    for name, server in config.servers.items():
        for key in server.unknown_keys:
            log.warning(
                "MCP config %s: ignoring unknown key %s",
                source,
                _json_path(("mcpServers", name, key)),
            )
    return config


def load_config(path: str | Path) -> MCPConfig:
    """Read and validate an MCP servers file."""
    file = Path(path).expanduser()
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MCPConfigError(
            f"MCP config file {file} does not exist (set {CONFIG_ENV} to an mcpServers JSON file)"
        ) from None
    except OSError as exc:
        raise MCPConfigError(f"MCP config file {file} cannot be read: {exc}") from None
    return parse_config(text, str(file))


def config_from_settings(settings: ToolSettings) -> MCPConfig | None:
    """The file named by ``CHORUS_MCP_CONFIG``, or ``None`` when it is unset."""
    return None if settings.mcp_config is None else load_config(settings.mcp_config)


@dataclass(frozen=True)
class ReconnectPolicy:
    """How hard to try when a server has dropped."""

    attempts: int = 3  # connection attempts per call
    backoff: RetryPolicy = field(default_factory=lambda: RetryPolicy(base_delay=0.5, max_delay=8.0))
    cooldown: float = 30.0  # after a call's attempts all failed, calls fail fast this long
    close_timeout: float = 10.0  # per server, before its owner task is cancelled
    ping_timeout: float = 5.0


# -- tool names ---------------------------------------------------------------------------------
def sanitise(raw: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", raw)


def _shorten(name: str, raw: str, *, force: bool = False) -> str:
    if len(name) <= MAX_NAME and not force:
        return name
    digest = hashlib.sha256(raw.encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME - len(digest) - 1]}_{digest}"


def namespaced_name(server: str, tool: str) -> str:
    """``server__tool`` in ``[A-Za-z0-9_-]``, cut to 64 characters with a stable hash suffix."""
    raw = f"{server}__{tool}"
    return _shorten(sanitise(raw), raw)


def unique_names(raws: list[str]) -> dict[str, str]:
    """Names for all tools at once: raw names that sanitise alike all get a hash suffix."""
    safe = {raw: sanitise(raw) for raw in raws}
    counts = Counter(safe.values())
    return {raw: _shorten(name, raw, force=counts[name] > 1) for raw, name in safe.items()}
