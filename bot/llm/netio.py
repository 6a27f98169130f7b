"""Connections for the vendor SDKs' HTTP transport (``bot.llm.transport``), on asyncio.

Why: the SDKs' stock stack reaches the socket through anyio on asyncio, a cancel scope for
every read and write and, before a kept-alive connection is reused, a readability check that
builds anyio's whole table of socket attributes. Here one ``asyncio.Protocol`` per connection
(``Wire``) keeps what the loop delivered: a read that finds bytes already received takes them
at once, a timer is armed only when a read or a write really has to wait, and whether an idle
connection is still good is read first off what the protocol was told (bytes, end of stream, a
lost connection), then off the socket.

Connections are opened as anyio opens them: addresses raced with a head start of 250 ms
(RFC 8305), which uvloop's ``create_connection`` does not offer; TLS is the loop's
``start_tls`` with the caller's SSL context; reading pauses while more than 256 KiB is received
and not yet taken, so a streamed answer read slowly does not pile up in memory.
"""

from __future__ import annotations

import asyncio
import select
import socket
import ssl
from collections.abc import Iterable
from typing import Any, cast

import httpx2

# Stop reading from the socket while this much is received and not yet taken: a streamed answer
# read slowly must not pile up in memory.
_HIGH_WATER = 256 * 1024
_LOW_WATER = 64 * 1024
# RFC 8305's recommended delay before the next address is tried, as anyio uses.
_HAPPY_EYEBALLS_DELAY = 0.25

SocketOption = (
    tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]
)


class Wire(asyncio.Protocol):
    """One connection: what the event loop delivered for it, a waiter for more, and writing."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.eof = False
        self.lost = False
        self.error: BaseException | None = None
        self._reading_paused = False
        self.writing_paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._drain: asyncio.Future[None] | None = None

    # -- the loop's calls -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > _HIGH_WATER and not self._reading_paused and self.transport:
            self._reading_paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False  # the transport closes itself: HTTP/1.1 never half-closes

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.error = exc
        self._wake()
        self._wake_drain()

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._wake_drain()

    # -- ours -----------------------------------------------------------------------------
    def take(self, max_bytes: int) -> bytes:
        if len(self.buffer) <= max_bytes:  # the usual case: all of it
            data = bytes(self.buffer)
            self.buffer.clear()
        else:
            data = bytes(self.buffer[:max_bytes])
            del self.buffer[:max_bytes]
        if self._reading_paused and len(self.buffer) < _LOW_WATER and self.transport:
            self._reading_paused = False
            self.transport.resume_reading()
        return data

    async def more(self) -> None:
        """Wait until bytes, the end of the stream or the loss of the connection arrive."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        try:
            await waiter
        finally:
            self._waiter = None

    async def drained(self) -> None:
        """Wait until the transport's write buffer is below its high-water mark again."""
        if not self.writing_paused or self.lost:
            return
        drain = asyncio.get_running_loop().create_future()
        self._drain = drain
        try:
            await drain
        finally:
            self._drain = None

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _wake_drain(self) -> None:
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)


def readable(wire: Wire) -> bool:
    """Whether an idle connection's socket would return something (bytes or the end) at once:
    a close the server just sent that the loop has not delivered yet, say. A socket gone counts
    as readable, its next read being the end."""
    sock = wire.transport.get_extra_info("socket") if wire.transport is not None else None
    fd = -1 if sock is None else sock.fileno()
    if fd < 0:
        return True
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    ready, _, _ = select.select([fd], [], [], 0)
    return bool(ready)


async def connect(
    host: str,
    port: int,
    timeout: float | None,  # noqa: ASYNC109 - one budget for TCP and TLS, as httpx2's "connect"
    socket_options: Iterable[SocketOption],
    ssl_context: ssl.SSLContext | None,
    server_hostname: str,
    request: httpx2.Request,
) -> Wire:
    """A connection to ``host`` (addresses raced), with TLS when ``ssl_context`` is given."""
    loop = asyncio.get_running_loop()
    wire: Wire | None = None
    try:
        async with asyncio.timeout(timeout):
            sock = await _race(loop, host, port)
            try:
                for option in socket_options:
                    sock.setsockopt(*option)
                _, wire = await loop.create_connection(Wire, sock=sock)
            except BaseException:
                sock.close()
                raise
            if ssl_context is not None:
                assert wire.transport is not None
                tls = await loop.start_tls(
                    wire.transport, wire, ssl_context, server_hostname=server_hostname
                )
                if tls is None:  # the peer closed during the handshake
                    raise ConnectionError("the connection closed during the TLS handshake")
                wire.transport = tls
    except BaseException as exc:
        if wire is not None:
            wire.close()
        if isinstance(exc, TimeoutError):
            message = f"timed out connecting to {host}:{port}"
            raise httpx2.ConnectTimeout(message, request=request) from exc
        if isinstance(exc, OSError | ssl.SSLError):
            raise httpx2.ConnectError(str(exc) or type(exc).__name__, request=request) from exc
        raise
    return wire


async def _race(loop: asyncio.AbstractEventLoop, host: str, port: int) -> socket.socket:
    """A connected non-blocking socket to ``host``: each resolved address gets a 250 ms head
    start over the next (RFC 8305), the first to connect wins and the others are closed."""
    infos = await _resolve(loop, host, port)
    if not infos:
        raise OSError(f"no address found for {host}")
    errors: list[OSError] = []
    attempts: set[asyncio.Task[socket.socket]] = set()
    try:
        for family, kind, proto, _, address in infos:
            attempts.add(asyncio.ensure_future(_attempt(loop, family, kind, proto, address)))
            if (winner := await _first(attempts, errors, _HAPPY_EYEBALLS_DELAY)) is not None:
                return winner
        while attempts:  # every address started: the first of those still trying
            if (winner := await _first(attempts, errors, None)) is not None:
                return winner
    finally:
        for task in attempts:  # the losers: connected at the same moment, or still trying
            if task.done() and not task.cancelled() and task.exception() is None:
                task.result().close()
            else:
                task.cancel()  # ``_attempt`` closes its socket
    raise OSError(
        f"could not connect to {host}:{port}: " + "; ".join(str(e) for e in errors)
    ) from (errors[-1] if errors else None)


async def _resolve(loop: asyncio.AbstractEventLoop, host: str, port: int) -> list[Any]:
    return await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)


async def _first(
    attempts: set[asyncio.Task[socket.socket]], errors: list[OSError], delay: float | None
) -> socket.socket | None:
    """The first attempt to connect within ``delay`` (failed ones leave ``attempts``)."""
    done, _ = await asyncio.wait(attempts, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
    for task in done:
        attempts.discard(task)
        error = task.exception()
        if error is None:
            return task.result()
        errors.append(error if isinstance(error, OSError) else OSError(str(error)))
    return None


async def _attempt(
    loop: asyncio.AbstractEventLoop,
    family: int,
    kind: int,
    proto: int,
    address: Any,
) -> socket.socket:
    sock = socket.socket(family, kind, proto)
    try:
        sock.setblocking(False)
        await loop.sock_connect(sock, address)
    except BaseException:
        sock.close()
        raise
    return sock


# TCP keep-alive as both SDKs set it on their default client's sockets: a connection left idle
# behind a NAT is probed after 60 s, every 60 s, and given up after five unanswered probes.
KEEPALIVE: tuple[SocketOption, ...] = tuple(
    (level, name, value)
    for level, name, value in (
        (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPINTVL", None), 60),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPCNT", None), 5),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPIDLE", None), 60),
    )
    if name is not None
)
