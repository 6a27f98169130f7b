"""Tools from MCP servers: every tool a configured server offers becomes a Chorus ``Tool``.

``MCPManager.start()`` connects to every server in the ``mcpServers`` file at once; a server
that cannot start is logged (one line: its name and why) and skipped, never fatal. Its tools
are named ``{server}__{tool}`` and listed once: the specs sit in the cached prompt prefix, so
they stay byte-identical for the life of the process, reconnects included.

Two modules, split where the concerns part: ``mcp_link`` holds one connection (its owner task,
the transports, the server's stderr), this module decides what to do with connections (when a
call has lost its server, when to reconnect and when to stop trying) and wraps the tools.

Why the shape:

* **How a drop shows up** (mcp 2.3): a dead stdio server closes stdout, the session's
  dispatcher sees EOF and every request then raises ``MCPError(CONNECTION_CLOSED)``. A failing
  HTTP request crashes the transport's task group, which cancels the owner task and closes the
  session the same way. -32000 is also in JSON-RPC's server-defined range, so a server could
  send it as its own error: a ping decides whether the connection is really gone.
* **Reconnect on use.** The next call reconnects (``bot.resilience``'s jittered backoff between
  attempts, ``ReconnectPolicy.attempts`` per call), re-lists the tools (a changed list is
  logged, not applied) and retries once. When every attempt fails, calls fail fast with
  "unavailable (reconnecting)" for a cooldown, so a dead server does not slow every turn down.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bot.llm.types import ToolSpec
from bot.resilience import Attempt, Failure, Sleep, retry
from bot.settings import ToolSettings
from bot.tools.base import Permission, Tool, ToolContext, ToolError
from bot.tools.mcp_config import (
    MCPConfig,
    MCPConfigError,
    ReconnectPolicy,
    ServerConfig,
    config_from_settings,
    load_config,
    namespaced_name,
    unique_names,
)
from bot.tools.mcp_link import ConnectFailed, Link, describe

try:
    import anyio
    import httpx2
    import mcp.types as mt
    from mcp import ClientSession
    from mcp.client.session import IncomingMessage
    from mcp.shared.exceptions import MCPError
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("MCP servers need the mcp package: pip install 'chorus-bot[mcp]'") from exc

__all__ = ["MCPManager", "MCPTool", "ReconnectPolicy", "namespaced_name", "render_result"]

log = logging.getLogger("chorus.mcp")

_CONNECTION_ERRORS = (
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    anyio.EndOfStream,
    OSError,
    httpx2.TransportError,
)


# -- results and failures --------------------------------------------------------------------
def _b64_size(data: str) -> int:
    data = data.strip()
    return max(0, len(data) * 3 // 4 - data[-2:].count("="))


def _block_text(block: mt.ContentBlock) -> tuple[str, bool]:
    """A content block as text, and whether it carried text (not just a summary)."""
    if isinstance(block, mt.TextContent):
        return block.text, True
    if isinstance(block, mt.ImageContent):
        return f"[image: {block.mime_type}, {_b64_size(block.data)} bytes]", False
    if isinstance(block, mt.AudioContent):
        return f"[audio: {block.mime_type}, {_b64_size(block.data)} bytes]", False
    if isinstance(block, mt.ResourceLink):
        return f"[resource link: {block.name} {block.uri}]", False
    resource = block.resource
    if isinstance(resource, mt.TextResourceContents):
        return f"[resource: {resource.uri}]\n{resource.text}", True
    mime = resource.mime_type or "application/octet-stream"
    return f"[resource: {resource.uri}, {mime}, {_b64_size(resource.blob)} bytes]", False


def render_result(result: mt.CallToolResult) -> str:
    """A tool result as the text the model reads; ``isError`` raises ``ToolError``."""
    rendered = [_block_text(block) for block in result.content]
    pieces = [text for text, _ in rendered if text]
    has_text = any(is_text and text for text, is_text in rendered)
    if result.structured_content is not None and not has_text:
        pieces.append(
            json.dumps(result.structured_content, separators=(",", ":"), ensure_ascii=False)
        )
    text = "\n".join(pieces)
    if result.is_error:
        raise ToolError(text or "the tool reported an error without details")
    return text or "(no output)"


def _reconnectable(exc: BaseException) -> Failure:
    """A failed connection attempt is worth another; anything else (closed, a bug) is not."""
    if isinstance(exc, ConnectFailed):
        return Failure(retryable=True, reason=exc.reason)
    return Failure(retryable=False)


def _call_error(server: str, tool: str, exc: Exception, timeout: float) -> Exception:
    if isinstance(exc, MCPError):
        if exc.code == mt.REQUEST_TIMEOUT:
            return ToolError(f"{tool} on MCP server {server} did not answer within {timeout:g} s")
        return ToolError(f"MCP server {server} rejected {tool}: {exc.message}")
    if isinstance(exc, ValidationError):
        return ToolError(f"MCP server {server} sent an invalid result for {tool}")
    return exc


# -- one server -----------------------------------------------------------------------------
class _Server:
    """A configured server: connects, hands out its session, reconnects after a drop."""

    def __init__(
        self,
        name: str,
        config: ServerConfig,
        *,
        policy: ReconnectPolicy,
        sleep: Sleep,
        clock: Callable[[], float],
        rng: random.Random | None,
        environ: Mapping[str, str] | None,
    ) -> None:
        self.name, self.config = name, config
        self.status = "not started"
        self._policy, self._sleep, self._clock, self._rng = policy, sleep, clock, rng
        self._environ = environ
        self._link: Link | None = None
        self._lock = asyncio.Lock()
        self._retry_at = -math.inf
        self._offered: dict[str, tuple[str | None, dict[str, Any]]] = {}
        self._closed = False

    async def start(self) -> list[mt.Tool]:
        """Connect and list the tools; a failure is logged and yields no tools."""
        async with self._lock:
            try:
                link = await self._attempt()
            except ConnectFailed as exc:
                self.status = f"failed: {exc.reason}"
                log.error(
                    "MCP server %s failed to start: %s",
                    self.name,
                    exc.reason,
                    exc_info=exc.error if exc.unexpected else None,
                )
                if not exc.unexpected and exc.error is not None:
                    log.debug("MCP server %s start failure details", self.name, exc_info=exc.error)
                return []
        tools = [t for t in link.tools if self.config.tools.allows(t.name)]
        self._offered = {t.name: (t.description, t.input_schema) for t in tools}
        self.status = "connected"
        log.info(
            "MCP server %s connected (%s): %d tools",
            self.name,
            self.config.transport,
            len(tools),
            extra={"tools": ",".join(sorted(self._offered))},
        )
        return tools

    async def call(
        self, tool: str, arguments: dict[str, Any], read_timeout: float
    ) -> mt.CallToolResult:
        """Call a tool; after a drop, reconnect and retry once."""
        session = await self._session()
        try:
            return await session.call_tool(tool, arguments, read_timeout_seconds=read_timeout)
        except Exception as exc:
            if not await self._dropped(session, exc):
                raise _call_error(self.name, tool, exc, read_timeout) from exc
            log.warning(
                "MCP server %s dropped during %s (%s); reconnecting",
                self.name,
                tool,
                describe(exc, self.config)[0],
            )
            self._mark_dead(session)
        session = await self._session()
        try:
            return await session.call_tool(tool, arguments, read_timeout_seconds=read_timeout)
        except Exception as exc:
            if await self._dropped(session, exc):
                self._mark_dead(session)
                raise ToolError(f"MCP server {self.name} is unavailable (reconnecting)") from exc
            raise _call_error(self.name, tool, exc, read_timeout) from exc

    async def aclose(self) -> None:
        self._closed = True
        if self._link is not None:  # first, so a reconnect holding the lock fails fast
            await self._link.discard()
        async with self._lock:
            if self._link is not None:
                await self._link.discard()
                self._link = None
        self.status = "closed"

    # -- connection management ----------------------------------------------------------------
    async def _session(self) -> ClientSession:
        async with self._lock:
            link = self._link
            if link is not None and not link.ready.is_set():  # an attempt a cancelled call left
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(link.ready.wait(), link.bound)
            if self._closed:
                raise ToolError(f"MCP server {self.name} is closed")
            if link is not None and link.alive and link.session is not None:
                return link.session
            if self._clock() < self._retry_at:
                raise ToolError(f"MCP server {self.name} is unavailable (reconnecting)")
            link = await retry(
                self._reconnect_once,
                _reconnectable,
                replace(self._policy.backoff, max_retries=self._policy.attempts - 1),
                what=f"reconnect MCP server {self.name}",
                sleep=self._sleep,
                rng=self._rng,
                give_up=self._cool_down,
                logger=log,
                message=f"MCP server {self.name}: reconnect attempt failed; retrying",
                extra={"server": self.name},
            )
            self._check_tools(link.tools)
            self.status = "connected"
            log.info("MCP server %s reconnected", self.name)
            assert link.session is not None
            return link.session

    async def _reconnect_once(self) -> Link:
        if self._closed:
            raise ToolError(f"MCP server {self.name} is closed")
        return await self._attempt()

    def _cool_down(self, state: Attempt) -> ToolError:
        """Every attempt failed: calls fail fast for a cooldown, so a dead server does not slow
        every turn down."""
        log.warning(
            "MCP server %s: %d reconnect attempts failed (last: %s); retrying in %g s",
            self.name,
            state.attempt,
            state.failure.reason,
            self._policy.cooldown,
        )
        self._retry_at = self._clock() + self._policy.cooldown
        self.status = f"unavailable: {state.failure.reason}"
        return ToolError(f"MCP server {self.name} is unavailable (reconnecting)")

    async def _attempt(self) -> Link:
        """One connection attempt (a new owner task); returns once it is connected."""
        if self._link is not None:
            await self._link.discard()
            self._link = None
        try:
            config = self.config.expanded(self.name, self._environ)
        except MCPConfigError as exc:
            raise ConnectFailed(str(exc), exc, unexpected=False) from None
        link = self._link = Link(
            self.name,
            config,
            on_message=self._on_message,
            close_timeout=self._policy.close_timeout,
        )
        await link.open()
        return link

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, mt.ToolListChangedNotification):
            log.info("MCP server %s changed its tools; restart Chorus to offer them", self.name)
        elif isinstance(message, Exception):
            log.debug("MCP server %s transport error", self.name, exc_info=message)

    async def _dropped(self, session: ClientSession, exc: Exception) -> bool:
        link = self._link
        if link is None or link.session is not session or not link.alive:
            return True
        if isinstance(exc, MCPError):
            if exc.code != mt.CONNECTION_CLOSED:
                return False
            try:  # -32000 may be the server's own error code: is the connection still there?
                async with asyncio.timeout(self._policy.ping_timeout):
                    await session.send_ping()
            except Exception:
                return True
            return False
        return isinstance(exc, _CONNECTION_ERRORS)

    def _mark_dead(self, session: ClientSession) -> None:
        if self._link is not None and self._link.session is session:
            self._link.dead = True

    def _check_tools(self, tools: list[mt.Tool]) -> None:
        now = {t.name: (t.description, t.input_schema) for t in tools}
        missing = sorted(set(self._offered) - set(now))
        changed = sorted(n for n in self._offered if n in now and now[n] != self._offered[n])
        if missing or changed:
            log.warning(
                "MCP server %s changed its tools after reconnecting (missing: %s; changed: %s); "
                "keeping the specs from startup",
                self.name,
                ", ".join(missing) or "none",
                ", ".join(changed) or "none",
            )


# -- public surface -----------------------------------------------------------------------------
class MCPTool:
    """A tool of an MCP server, as a Chorus ``Tool``."""

    def __init__(self, server: _Server, tool: mt.Tool, name: str) -> None:
        self._server = server
        self.server = server.name
        self.remote_name = tool.name
        description = (tool.description or "").strip()
        self.spec = ToolSpec(
            name=name,
            description=description or f"Tool {tool.name} from MCP server {server.name}",
            parameters=tool.input_schema,
        )
        self.permission: Permission = server.config.permission
        self.timeout: float = server.config.timeout

    def __repr__(self) -> str:
        return f"MCPTool({self.spec.name!r}, server={self.server!r}, tool={self.remote_name!r})"

    async def call(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        result = await self._server.call(self.remote_name, arguments, self.timeout)
        return render_result(result)


class MCPManager:
    """Connects the configured MCP servers and offers their tools; whoever starts it closes it."""

    def __init__(
        self,
        config: MCPConfig,
        *,
        policy: ReconnectPolicy | None = None,
        sleep: Sleep = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        policy = policy or ReconnectPolicy()
        self._servers = {
            name: _Server(
                name,
                server,
                policy=policy,
                sleep=sleep,
                clock=clock,
                rng=rng,
                environ=environ,
            )
            for name, server in sorted(config.enabled.items())
        }
        self._disabled = sorted(set(config.servers) - set(config.enabled))
        self._tools: list[MCPTool] = []
        self._started = False

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> MCPManager:
        return cls(load_config(path), **kwargs)

    @classmethod
    def from_settings(cls, settings: ToolSettings, **kwargs: Any) -> MCPManager | None:
        """From the file named by ``CHORUS_MCP_CONFIG``; ``None`` when that is unset."""
        config = config_from_settings(settings)
        return None if config is None else cls(config, **kwargs)

    async def start(self) -> None:
        """Connect every enabled server concurrently; failures are logged and skipped."""
        if self._started:
            return
        self._started = True
        for name in self._disabled:
            log.info("MCP server %s is disabled in the config", name)
        servers = list(self._servers.values())
        listed = await asyncio.gather(*(server.start() for server in servers))
        found = [
            (server, tool)
            for server, tools in zip(servers, listed, strict=True)
            for tool in sorted(tools, key=lambda t: t.name)
        ]
        names = unique_names([f"{server.name}__{tool.name}" for server, tool in found])
        tools = [MCPTool(s, t, names[f"{s.name}__{t.name}"]) for s, t in found]
        self._tools = sorted(tools, key=lambda t: t.spec.name)

    def tools(self) -> list[Tool]:
        """The tools of every server that started, sorted by name; stable for the process."""
        return list(self._tools)

    def status(self) -> dict[str, str]:
        """Each enabled server's state: ``connected``, ``failed: why``, ``unavailable: why``..."""
        return {name: server.status for name, server in self._servers.items()}

    async def aclose(self) -> None:
        """Close every session and stop every server process."""
        await asyncio.gather(*(server.aclose() for server in self._servers.values()))

    async def __aenter__(self) -> MCPManager:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
