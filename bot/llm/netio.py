"""The vendor SDKs' HTTP connections on plain asyncio instead of anyio.

Why: the ``anthropic`` and ``openai`` SDKs send through ``httpx2``, whose connection pool
(``httpcore2``) reaches the socket through anyio on asyncio. Per request that costs a cancel
scope for every read and write and, before a kept-alive connection is reused, a readability
check that builds anyio's whole table of socket attributes: 8% of a worker's CPU per answered
message in a profile of the scale-out benchmark. On this backend a model call through Chorus's
provider costs 5 to 11% less client CPU (``python -m bench.vendor_call``; BENCHMARKS.md, "The
vendor call").

This module is an ``httpcore2`` network backend (the library's documented seam,
``AsyncConnectionPool(network_backend=...)``) written on an ``asyncio.Protocol``: a read that
finds bytes already received returns them at once, a timer is armed only when a read or a write
really has to wait, and the readability check looks at what the protocol has already been told
(bytes, end of stream, a lost connection) before it asks the socket.

Everything above the socket stays the SDK's and httpx2's own: request building, HTTP/1.1
framing (h11), keep-alive and pool limits, TLS (``start_tls`` on the loop, with httpx2's own SSL
context), error mapping. Connections are opened like anyio opens them, addresses raced with a
head start of 250 ms (RFC 8305), which uvloop's ``create_connection`` does not offer. A
configured proxy keeps httpx2's stock transport (``trust_env`` mounts), so nothing changes there.
"""

from __future__ import annotations

import asyncio
import select
import socket
import ssl
import urllib.request
from collections.abc import Iterable
from typing import Any, TypeVar, cast

import httpcore2
import httpx2

# Stop reading from the socket while this much is received and not yet taken: a streamed answer
# read slowly must not pile up in memory.
_HIGH_WATER = 256 * 1024
_LOW_WATER = 64 * 1024
# RFC 8305's recommended delay before the next address is tried, as anyio uses.
_HAPPY_EYEBALLS_DELAY = 0.25

HttpClient = TypeVar("HttpClient", bound=httpx2.AsyncClient)
SocketOption = (
    tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]
)


class _Wire(asyncio.Protocol):
    """What the event loop delivered for one connection, and a waiter for more."""

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

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _wake_drain(self) -> None:
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)


class AsyncioStream(httpcore2.AsyncNetworkStream):
    """One connection (plain or TLS) as ``httpcore2`` reads and writes it."""

    def __init__(self, wire: _Wire, transport: asyncio.Transport) -> None:
        self._wire = wire
        self._transport = transport

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        wire = self._wire
        if not wire.buffer and not wire.eof and not wire.lost:
            try:
                async with asyncio.timeout(timeout):
                    while not wire.buffer and not wire.eof and not wire.lost:
                        await wire.more()
            except TimeoutError as exc:
                raise httpcore2.ReadTimeout("timed out reading from the server") from exc
        if wire.buffer:
            return wire.take(max_bytes)
        if wire.error is not None:
            raise httpcore2.ReadError(str(wire.error) or type(wire.error).__name__)
        return b""  # the server closed the connection

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        if not buffer:
            return
        wire = self._wire
        if wire.lost or self._transport.is_closing():
            raise httpcore2.WriteError(str(wire.error) if wire.error else "connection closed")
        self._transport.write(buffer)
        if wire.writing_paused:  # the transport's buffer is full: wait for the socket
            try:
                async with asyncio.timeout(timeout):
                    await wire.drained()
            except TimeoutError as exc:
                raise httpcore2.WriteTimeout("timed out writing to the server") from exc
        if wire.lost and wire.error is not None:
            raise httpcore2.WriteError(str(wire.error))

    async def aclose(self) -> None:
        self._transport.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore2's signature
    ) -> httpcore2.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport = await loop.start_tls(
                    self._transport, self._wire, ssl_context, server_hostname=server_hostname
                )
        except TimeoutError as exc:
            self._transport.close()
            raise httpcore2.ConnectTimeout("timed out in the TLS handshake") from exc
        except (OSError, ssl.SSLError) as exc:
            self._transport.close()
            raise httpcore2.ConnectError(str(exc)) from exc
        if transport is None:  # the peer closed during the handshake
            raise httpcore2.ConnectError("the connection closed during the TLS handshake")
        self._wire.transport = transport
        return AsyncioStream(self._wire, transport)

    def get_extra_info(self, info: str) -> Any:
        transport = self._transport
        if info == "is_readable":
            wire = self._wire
            if wire.buffer or wire.eof or wire.lost or transport.is_closing():
                return True
            # Bytes the loop has not delivered yet (a close the server just sent, say).
            return _readable(transport.get_extra_info("socket"))
        if info == "ssl_object":
            return transport.get_extra_info("ssl_object")
        if info == "client_addr":
            return transport.get_extra_info("sockname")
        if info == "server_addr":
            return transport.get_extra_info("peername")
        if info == "socket":
            return transport.get_extra_info("socket")
        return None


def _readable(sock: Any) -> bool:
    """Whether the socket would return something (bytes or the end) at once; a socket gone
    counts as readable, its next read being the end."""
    fd = -1 if sock is None else sock.fileno()
    if fd < 0:
        return True
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    readable, _, _ = select.select([fd], [], [], 0)
    return bool(readable)


class AsyncioBackend(httpcore2.AsyncNetworkBackend):
    """Opens ``AsyncioStream`` TCP connections, addresses raced. (A Unix socket is asked for
    only by a pool given ``uds``, which ``transport`` never gives: the base class's refusal
    stands.)"""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore2's signature
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                sock = await _race(loop, host, port, local_address)
        except TimeoutError as exc:
            raise httpcore2.ConnectTimeout(f"timed out connecting to {host}:{port}") from exc
        except OSError as exc:
            raise httpcore2.ConnectError(str(exc)) from exc
        return await _wrap(loop, sock, socket_options)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


async def _wrap(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, options: Iterable[SocketOption] | None
) -> AsyncioStream:
    try:
        for option in options or ():
            sock.setsockopt(*option)
        transport, wire = await loop.create_connection(_Wire, sock=sock)
    except OSError as exc:
        sock.close()
        raise httpcore2.ConnectError(str(exc)) from exc
    return AsyncioStream(wire, transport)


async def _race(
    loop: asyncio.AbstractEventLoop, host: str, port: int, local_address: str | None
) -> socket.socket:
    """A connected non-blocking socket to ``host``: each resolved address gets a 250 ms head
    start over the next (RFC 8305), the first to connect wins and the others are closed."""
    infos = await _resolve(loop, host, port)
    if not infos:
        raise OSError(f"no address found for {host}")
    errors: list[OSError] = []
    attempts: set[asyncio.Task[socket.socket]] = set()
    try:
        for family, kind, proto, _, address in infos:
            attempts.add(
                asyncio.ensure_future(_attempt(loop, family, kind, proto, address, local_address))
            )
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
    local_address: str | None,
) -> socket.socket:
    sock = socket.socket(family, kind, proto)
    try:
        sock.setblocking(False)
        if local_address is not None:
            sock.bind((local_address, 0))
        await loop.sock_connect(sock, address)
    except BaseException:
        sock.close()
        raise
    return sock


# The connection limits both SDKs give their default client.
SDK_LIMITS = httpx2.Limits(max_connections=1000, max_keepalive_connections=100)
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


def transport(
    limits: httpx2.Limits = SDK_LIMITS,
    *,
    socket_options: Iterable[SocketOption] = KEEPALIVE,
    ssl_context: ssl.SSLContext | None = None,
) -> httpx2.AsyncHTTPTransport:
    """httpx2's own transport (its SSL context, limits and error mapping) on ``AsyncioBackend``.

    httpx2 builds its connection pool inside the transport and takes no network backend, so the
    pool is built again here with the same settings and ours; ``tests/test_netio.py`` fails if
    a later httpx2 stops using it.
    """
    # One SSL context for both pools (loading the trust store costs some 30 ms a context).
    context = ssl_context or httpx2.create_ssl_context()
    stock = httpx2.AsyncHTTPTransport(limits=limits, verify=context)
    stock._pool = httpcore2.AsyncConnectionPool(
        ssl_context=context,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        socket_options=list(socket_options),
        network_backend=AsyncioBackend(),
    )
    return stock


def proxied() -> bool:
    """Whether the environment names an HTTP proxy, which httpx2 honours only on its own transport."""
    found = urllib.request.getproxies()
    return any(found.get(scheme) for scheme in ("http", "https", "all"))


def sdk_http_client(default_client: type[HttpClient]) -> HttpClient | None:
    """The SDK's default client class (its timeouts, limits, redirects) on ``AsyncioBackend``;
    None, meaning "the SDK's own", when a proxy is configured, so that the proxy is still used."""
    if proxied():
        return None
    return default_client(transport=transport())
