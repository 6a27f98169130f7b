"""Tools from MCP servers: every tool a configured server offers becomes a Chorus ``Tool``.

``MCPManager.start()`` connects to every server in the ``mcpServers`` file at once; a server
that cannot start is logged (one line: its name and why) and skipped, never fatal. Its tools
are named ``{server}__{tool}`` and listed once: the specs sit in the cached prompt prefix, so
they stay byte-identical for the life of the process, reconnects included.

Why the shape:

* **One owner task per connection.** The ``mcp`` SDK runs on anyio, whose task groups and cancel
  scopes must be exited by the task that entered them. So a dedicated task (``_Server._hold``)
  enters the transport and ``ClientSession`` contexts in one ``AsyncExitStack``, parks until
  told to stop, and unwinds them itself; callers in any task only *use* the session. A
  connect deadline is an anyio ``CancelScope`` around the whole stack (lifted once connected),
  so a hung handshake unwinds in order.
* **How a drop shows up** (mcp 2.3): a dead stdio server closes stdout, the session's
  dispatcher sees EOF and every request then raises ``MCPError(CONNECTION_CLOSED)``. A failing
  HTTP request crashes the transport's task group, which cancels the owner task and closes the
  session the same way. -32000 is also in JSON-RPC's server-defined range, so a server could
  send it as its own error: a ping decides whether the connection is really gone.
* **Reconnect on use.** The next call reconnects (jittered backoff between attempts, a bounded
  number per call), re-lists the tools (a changed list is logged, not applied) and retries
  once. When every attempt fails, calls fail fast with "unavailable (reconnecting)" for a
  cooldown, so a dead server does not slow every turn down.
* **stderr never floods our log.** ``stdio_client`` hands ``errlog`` to the child as its
  stderr, so it gets a pipe; lines go to ``chorus.mcp.server.<name>`` at DEBUG and the last few
  are kept to explain a server that dies on start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import ValidationError

from bot.llm.types import ToolSpec
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
    sanitise,
    unique_names,
)

try:
    import anyio
    import httpx2
    import mcp.types as mt
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp.client.session import IncomingMessage
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("MCP servers need the mcp package: pip install 'chorus-bot[mcp]'") from exc

__all__ = ["MCPManager", "MCPTool", "ReconnectPolicy", "namespaced_name", "render_result"]

log = logging.getLogger("chorus.mcp")

Sleep = Callable[[float], Awaitable[None]]
_CLIENT_INFO = mt.Implementation(name="chorus", version="0.1.0")
_STDERR_TAIL = 5
_STDERR_DRAIN = 1.0  # seconds to read what a stopped server still had to say
_MAX_TOOL_PAGES = 100
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


def _leaf(exc: BaseException) -> BaseException:
    """The interesting exception inside anyio's (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)]
        exc = (inner or list(exc.exceptions))[0]
    return exc


def _describe(exc: BaseException, config: ServerConfig) -> tuple[str, bool]:
    """Why a connection failed, in one line, and whether it was unexpected (a bug, not setup)."""
    exc = _leaf(exc)
    if isinstance(exc, MCPConfigError):
        return str(exc), False
    if isinstance(exc, FileNotFoundError):
        if config.cwd and exc.filename == config.cwd:
            return f"working directory not found: {config.cwd}", False
        return f"command not found: {config.command}", False
    if isinstance(exc, PermissionError):
        return f"permission denied running {config.command}: {exc.strerror}", False
    if isinstance(exc, TimeoutError):
        return f"no answer within {config.start_timeout:g} s", False
    if isinstance(exc, MCPError):
        if exc.code == mt.CONNECTION_CLOSED:
            return "the server closed the connection", False
        if exc.code == mt.REQUEST_TIMEOUT:
            return f"no answer within {config.start_timeout:g} s", False
        return f"{exc.message} (MCP error {exc.code})", False
    if isinstance(exc, httpx2.TransportError):
        return f"cannot reach {config.url}: {exc or type(exc).__name__}", False
    if isinstance(exc, OSError):
        return f"{type(exc).__name__}: {exc}", False
    return f"{type(exc).__name__}: {exc}", True


def _call_error(server: str, tool: str, exc: Exception, timeout: float) -> Exception:
    if isinstance(exc, MCPError):
        if exc.code == mt.REQUEST_TIMEOUT:
            return ToolError(f"{tool} on MCP server {server} did not answer within {timeout:g} s")
        return ToolError(f"MCP server {server} rejected {tool}: {exc.message}")
    if isinstance(exc, ValidationError):
        return ToolError(f"MCP server {server} sent an invalid result for {tool}")
    return exc


# -- one server -----------------------------------------------------------------------------
class _Link:
    """One connection attempt and, if it succeeds, the live connection its owner task holds."""

    def __init__(self) -> None:
        self.ready = asyncio.Event()  # connected, or failed (after cleanup)
        self.stop = asyncio.Event()
        self.session: ClientSession | None = None
        self.tools: list[mt.Tool] = []
        self.error: BaseException | None = None
        self.dead = False
        self.scope: anyio.CancelScope | None = None
        self.task: asyncio.Task[None] | None = None
        self.stderr_task: asyncio.Task[None] | None = None
        self.stderr_pipe: BinaryIO | None = None
        self.stderr_tail: deque[str] = deque(maxlen=_STDERR_TAIL)
        self.http_status: str | None = None

    @property
    def alive(self) -> bool:
        return (
            self.session is not None
            and not self.dead
            and self.task is not None
            and not self.task.done()
        )


class _ConnectFailed(Exception):
    def __init__(self, reason: str, error: BaseException | None, unexpected: bool) -> None:
        super().__init__(reason)
        self.reason, self.error, self.unexpected = reason, error, unexpected


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
        self._link: _Link | None = None
        self._lock = asyncio.Lock()
        self._retry_at = -math.inf
        self._offered: dict[str, tuple[str | None, dict[str, Any]]] = {}
        self._closed = False
        self._stderr_log = logging.getLogger(f"chorus.mcp.server.{sanitise(name)}")

    async def start(self) -> list[mt.Tool]:
        """Connect and list the tools; a failure is logged and yields no tools."""
        async with self._lock:
            try:
                link = await self._attempt()
            except _ConnectFailed as exc:
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
                _describe(exc, self.config)[0],
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
            await self._discard(self._link)
        async with self._lock:
            if self._link is not None:
                await self._discard(self._link)
                self._link = None
        self.status = "closed"

    # -- connection management ----------------------------------------------------------------
    async def _session(self) -> ClientSession:
        unavailable = f"MCP server {self.name} is unavailable (reconnecting)"
        async with self._lock:
            link = self._link
            if link is not None and not link.ready.is_set():  # an attempt a cancelled call left
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(link.ready.wait(), self._attempt_bound())
            if self._closed:
                raise ToolError(f"MCP server {self.name} is closed")
            if link is not None and link.alive and link.session is not None:
                return link.session
            if self._clock() < self._retry_at:
                raise ToolError(unavailable)
            reason = "not connected"
            for attempt in range(1, self._policy.attempts + 1):
                if attempt > 1:
                    await self._sleep(self._policy.backoff.backoff(attempt - 1, self._rng))
                if self._closed:
                    raise ToolError(f"MCP server {self.name} is closed")
                try:
                    link = await self._attempt()
                except _ConnectFailed as exc:
                    reason = exc.reason
                    log.warning(
                        "MCP server %s: reconnect attempt %d/%d failed: %s",
                        self.name,
                        attempt,
                        self._policy.attempts,
                        reason,
                    )
                    continue
                self._check_tools(link.tools)
                self.status = "connected"
                log.info("MCP server %s reconnected", self.name)
                assert link.session is not None
                return link.session
            self._retry_at = self._clock() + self._policy.cooldown
            self.status = f"unavailable: {reason}"
            raise ToolError(unavailable)

    def _attempt_bound(self) -> float:
        # ``_hold`` enforces the start timeout itself; this only guards against a hung cleanup.
        return self.config.start_timeout + self._policy.close_timeout

    async def _attempt(self) -> _Link:
        """One connection attempt: a new owner task; returns once it is connected."""
        if self._link is not None:
            await self._discard(self._link)
            self._link = None
        try:
            config = self.config.expanded(self.name, self._environ)
        except MCPConfigError as exc:
            raise _ConnectFailed(str(exc), exc, unexpected=False) from None
        link = self._link = _Link()
        link.task = asyncio.create_task(self._hold(link, config), name=f"mcp:{self.name}")
        try:
            await asyncio.wait_for(link.ready.wait(), self._attempt_bound())
        except TimeoutError:
            await self._discard(link)
            reason = f"no answer within {config.start_timeout:g} s"
            raise _ConnectFailed(reason, None, unexpected=False) from None
        if link.session is None or not link.alive:
            await self._discard(link)
            error = link.error or ConnectionError("the connection ended")
            reason, unexpected = _describe(error, config)
            if link.http_status and isinstance(_leaf(error), MCPError):
                reason = f"{link.http_status} ({reason})"
            if link.stderr_tail:
                reason += "; stderr: " + " | ".join(link.stderr_tail)
            raise _ConnectFailed(reason, error, unexpected)
        return link

    async def _hold(self, link: _Link, config: ServerConfig) -> None:
        """The owner task: open, park until stopped (or dropped), close, in this one task."""
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + config.start_timeout) as scope:
                link.scope = scope
                async with AsyncExitStack() as stack:
                    read, write = await self._open_transport(stack, link, config)
                    session = await stack.enter_async_context(
                        ClientSession(
                            read,
                            write,
                            read_timeout_seconds=config.start_timeout,
                            client_info=_CLIENT_INFO,
                            message_handler=self._on_message,
                        )
                    )
                    await session.initialize()
                    link.tools = await _list_tools(session)
                    scope.deadline = math.inf
                    link.session = session
                    link.ready.set()
                    await link.stop.wait()
            if scope.cancelled_caught and link.session is None:
                link.error = TimeoutError(f"no answer within {config.start_timeout:g} s")
        except Exception as exc:
            link.error = exc
        finally:
            if link.session is not None and not link.stop.is_set() and not self._closed:
                log.warning(
                    "MCP server %s: connection lost (%s)",
                    self.name,
                    _describe(link.error, config)[0] if link.error else "closed",
                )
            link.dead = True
            link.ready.set()

    async def _open_transport(
        self, stack: AsyncExitStack, link: _Link, config: ServerConfig
    ) -> tuple[Any, Any]:
        if config.command is None:
            assert config.url is not None

            async def note_status(response: httpx2.Response) -> None:
                if response.status_code >= 400:
                    link.http_status = f"HTTP {response.status_code} {response.reason_phrase}"

            client = httpx2.AsyncClient(
                headers=config.headers,
                timeout=httpx2.Timeout(30.0, connect=min(30.0, config.start_timeout), read=300.0),
                event_hooks={"response": [note_status]},
            )
            await stack.enter_async_context(client)
            return await stack.enter_async_context(
                streamable_http_client(config.url, http_client=client)
            )
        read_fd, write_fd = os.pipe()
        link.stderr_pipe = os.fdopen(read_fd, "rb", buffering=0)
        errlog = os.fdopen(write_fd, "w")
        link.stderr_task = asyncio.create_task(self._read_stderr(link.stderr_pipe, link))
        stack.push_async_callback(_finish_stderr, link.stderr_task)
        stack.callback(errlog.close)  # runs first on the way out: the reader can reach EOF
        params = StdioServerParameters(
            command=config.command, args=config.args, env=config.env or None, cwd=config.cwd
        )
        streams = await stack.enter_async_context(stdio_client(params, errlog=errlog))
        errlog.close()  # the child has its own copy; ours would hold the pipe open forever
        return streams

    async def _read_stderr(self, pipe: BinaryIO, link: _Link) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
        try:
            pending = b""
            while chunk := await reader.read(65536):
                *lines, pending = (pending + chunk).split(b"\n")
                if len(pending) > 65536:
                    lines, pending = [*lines, pending], b""
                for line in lines:
                    self._stderr_line(link, line)
            self._stderr_line(link, pending)
        finally:
            transport.close()

    def _stderr_line(self, link: _Link, raw: bytes) -> None:
        text = raw.decode("utf-8", "replace").rstrip()
        if text:
            self._stderr_log.debug("%s", text)
            link.stderr_tail.append(text[:300])

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

    async def _discard(self, link: _Link) -> None:
        """Stop a link's owner task (bounded), escalating to cancellation if it hangs."""
        link.stop.set()
        if link.session is None and link.scope is not None:
            link.scope.cancel()  # still connecting
        tasks = {t for t in (link.task, link.stderr_task) if t is not None}
        if link.task is not None:
            done, _ = await asyncio.wait({link.task}, timeout=self._policy.close_timeout)
            if not done:
                log.warning("MCP server %s did not close in time; cancelling it", self.name)
                if link.scope is not None:
                    link.scope.cancel()
                done, _ = await asyncio.wait({link.task}, timeout=self._policy.close_timeout)
        for task in tasks:
            if not task.done():
                task.cancel()
        if tasks:
            await asyncio.wait(tasks)  # does not raise their errors, nor swallow our own cancel
        for task in tasks:
            if not task.cancelled():
                task.exception()  # retrieved: _hold records its errors on the link
        if link.stderr_pipe is not None:
            link.stderr_pipe.close()

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


async def _finish_stderr(task: asyncio.Task[None]) -> None:
    """Let the stderr reader reach EOF (bounded, shielded from the owner's cancel scope)."""
    with anyio.CancelScope(shield=True):
        await asyncio.wait({task}, timeout=_STDERR_DRAIN)
    if not task.done():
        task.cancel()


async def _list_tools(session: ClientSession) -> list[mt.Tool]:
    tools: list[mt.Tool] = []
    cursor: str | None = None
    for _ in range(_MAX_TOOL_PAGES):
        params = mt.PaginatedRequestParams(cursor=cursor) if cursor else None
        result = await session.list_tools(params=params)
        tools.extend(result.tools)
        cursor = result.next_cursor
        if not cursor:
            break
    return tools


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
