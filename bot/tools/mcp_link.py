"""One connection to an MCP server, held by its own task: open, park, close.

Why apart from ``mcp`` (the servers and their tools): the ``mcp`` SDK runs on anyio, whose task
groups and cancel scopes must be exited by the task that entered them. So a dedicated task
(``Link._hold``) enters the transport and ``ClientSession`` contexts in one ``AsyncExitStack``,
parks until told to stop, and unwinds them itself; callers in any task only *use* the session.
A connect deadline is an anyio ``CancelScope`` around the whole stack (lifted once connected),
so a hung handshake unwinds in order. That lifecycle, the transports (stdio, streamable HTTP)
and the server's stderr (a pipe, logged at DEBUG to ``chorus.mcp.server.<name>``, the last
lines kept to explain a server that dies on start) are this module; when to reconnect and what
to offer as tools is ``mcp``'s.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
from collections import deque
from contextlib import AsyncExitStack
from typing import Any, BinaryIO

from bot.tools.mcp_config import MCPConfigError, ServerConfig, sanitise

try:
    import anyio
    import httpx2
    import mcp.types as mt
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp.client.session import MessageHandlerFnT
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("MCP servers need the mcp package: pip install 'chorus-bot[mcp]'") from exc

log = logging.getLogger("chorus.mcp")

_CLIENT_INFO = mt.Implementation(name="chorus", version="0.1.0")
_STDERR_TAIL = 5
_STDERR_DRAIN = 1.0  # seconds to read what a stopped server still had to say
_MAX_TOOL_PAGES = 100


def leaf(exc: BaseException) -> BaseException:
    """The interesting exception inside anyio's (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)]
        exc = (inner or list(exc.exceptions))[0]
    return exc


def describe(exc: BaseException, config: ServerConfig) -> tuple[str, bool]:
    """Why a connection failed, in one line, and whether it was unexpected (a bug, not setup)."""
    exc = leaf(exc)
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


class Link:
    """One connection attempt and, if it succeeds, the live connection its owner task holds."""

    def __init__(
        self,
        name: str,
        config: ServerConfig,
        *,
        on_message: MessageHandlerFnT,
        close_timeout: float,
    ) -> None:
        self.name, self.config = name, config  # ``config`` with its variables expanded
        self._on_message = on_message
        self._close_timeout = close_timeout
        self._stderr_log = logging.getLogger(f"chorus.mcp.server.{sanitise(name)}")
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

    @property
    def bound(self) -> float:
        """How long an attempt may take: ``_hold`` enforces the start timeout itself; the close
        timeout on top only guards against a hung cleanup."""
        return self.config.start_timeout + self._close_timeout

    async def open(self) -> None:
        """Start the owner task; return once connected, or raise ``ConnectFailed`` (cleaned up)."""
        config = self.config
        self.task = asyncio.create_task(self._hold(), name=f"mcp:{self.name}")
        try:
            await asyncio.wait_for(self.ready.wait(), self.bound)
        except TimeoutError:
            await self.discard()
            reason = f"no answer within {config.start_timeout:g} s"
            raise ConnectFailed(reason, None, unexpected=False) from None
        if self.session is None or not self.alive:
            await self.discard()
            error = self.error or ConnectionError("the connection ended")
            reason, unexpected = describe(error, config)
            if self.http_status and isinstance(leaf(error), MCPError):
                reason = f"{self.http_status} ({reason})"
            if self.stderr_tail:
                reason += "; stderr: " + " | ".join(self.stderr_tail)
            raise ConnectFailed(reason, error, unexpected)

    async def _hold(self) -> None:
        """The owner task: open, park until stopped (or dropped), close, in this one task."""
        config = self.config
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + config.start_timeout) as scope:
                self.scope = scope
                async with AsyncExitStack() as stack:
                    read, write = await self._open_transport(stack)
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
                    self.tools = await _list_tools(session)
                    scope.deadline = math.inf
                    self.session = session
                    self.ready.set()
                    await self.stop.wait()
            if scope.cancelled_caught and self.session is None:
                self.error = TimeoutError(f"no answer within {config.start_timeout:g} s")
        except Exception as exc:
            self.error = exc
        finally:
            if self.session is not None and not self.stop.is_set():
                log.warning(
                    "MCP server %s: connection lost (%s)",
                    self.name,
                    describe(self.error, config)[0] if self.error else "closed",
                )
            self.dead = True
            self.ready.set()

    async def _open_transport(self, stack: AsyncExitStack) -> tuple[Any, Any]:
        config = self.config
        if config.command is None:
            assert config.url is not None

            async def note_status(response: httpx2.Response) -> None:
                if response.status_code >= 400:
                    self.http_status = f"HTTP {response.status_code} {response.reason_phrase}"

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
        self.stderr_pipe = os.fdopen(read_fd, "rb", buffering=0)
        errlog = os.fdopen(write_fd, "w")
        self.stderr_task = asyncio.create_task(self._read_stderr(self.stderr_pipe))
        stack.push_async_callback(_finish_stderr, self.stderr_task)
        stack.callback(errlog.close)  # runs first on the way out: the reader can reach EOF
        params = StdioServerParameters(
            command=config.command, args=config.args, env=config.env or None, cwd=config.cwd
        )
        streams = await stack.enter_async_context(stdio_client(params, errlog=errlog))
        errlog.close()  # the child has its own copy; ours would hold the pipe open forever
        return streams

    async def _read_stderr(self, pipe: BinaryIO) -> None:
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
                    self._stderr_line(line)
            self._stderr_line(pending)
        finally:
            transport.close()

    def _stderr_line(self, raw: bytes) -> None:
        text = raw.decode("utf-8", "replace").rstrip()
        if text:
            self._stderr_log.debug("%s", text)
            self.stderr_tail.append(text[:300])

    async def discard(self) -> None:
        """Stop a link's owner task (bounded), escalating to cancellation if it hangs."""
        self.stop.set()
        if self.session is None and self.scope is not None:
            self.scope.cancel()  # still connecting
        tasks = {t for t in (self.task, self.stderr_task) if t is not None}
        if self.task is not None:
            done, _ = await asyncio.wait({self.task}, timeout=self._close_timeout)
            if not done:
                log.warning("MCP server %s did not close in time; cancelling it", self.name)
                if self.scope is not None:
                    self.scope.cancel()
                done, _ = await asyncio.wait({self.task}, timeout=self._close_timeout)
        for task in tasks:
            if not task.done():
                task.cancel()
        if tasks:
            await asyncio.wait(tasks)  # does not raise their errors, nor swallow our own cancel
        for task in tasks:
            if not task.cancelled():
                task.exception()  # retrieved: _hold records its errors on the link
        if self.stderr_pipe is not None:
            self.stderr_pipe.close()


class ConnectFailed(Exception):
    """A connection attempt failed: ``reason`` is one line for the log and the status."""

    def __init__(self, reason: str, error: BaseException | None, unexpected: bool) -> None:
        super().__init__(reason)
        self.reason, self.error, self.unexpected = reason, error, unexpected


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
