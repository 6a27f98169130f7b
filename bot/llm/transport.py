"""The vendor SDKs' HTTP transport: a pool of ``bot.llm.http1`` connections, per origin.

Why: the SDKs' stock transport (httpcore2 on anyio) cost a third of a model call's client CPU
with an instant model; ``bot.llm.http1`` says what replaced it and why. ``sdk_http_client``
gives an SDK its own default client class (its timeouts, limits, redirects) on this transport.
``httpx2.AsyncBaseTransport`` is httpx2's documented seam (``AsyncClient(transport=...)``), so
the SDKs' request building, retries, timeouts and error mapping stay theirs.

The pool keeps httpcore2's rules: idle connections are reused newest first, and each is checked
before reuse (bytes or a close received while idle, or ``keepalive_expiry`` passed, retire it);
at most ``max_keepalive_connections`` stay idle (the oldest closed first) and at most
``max_connections`` are open, a request waiting up to its ``pool`` timeout for room (an idle
connection to another origin is closed to make it). Not done here: HTTP/2 and Unix sockets,
which the SDKs do not use, and proxies: with ``HTTP(S)_PROXY``/``ALL_PROXY`` set the SDK keeps
its stock client, because httpx2 honours those variables only on its own transport.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import time
import urllib.request
from collections import deque
from collections.abc import Iterable
from typing import TypeVar

import httpx2

from bot.llm import http1, netio
from bot.settings import ConfigError

HttpClient = TypeVar("HttpClient", bound=httpx2.AsyncClient)
_DEFAULT_PORT = {b"http": 80, b"https": 443}
# The connection limits both SDKs give their default client.
SDK_LIMITS = httpx2.Limits(max_connections=1000, max_keepalive_connections=100)


class Transport(httpx2.AsyncBaseTransport):
    """HTTP/1.1 to any number of origins over pooled ``netio`` connections."""

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None = None,
        limits: httpx2.Limits = SDK_LIMITS,
        socket_options: Iterable[netio.SocketOption] = netio.KEEPALIVE,
    ) -> None:
        self._ssl = ssl_context  # None: httpx2's own, made at the first https connection
        self._max_open = limits.max_connections
        self._max_idle = limits.max_keepalive_connections
        self._expiry = limits.keepalive_expiry
        self._options = tuple(socket_options)
        self._idle: list[http1.Connection] = []  # oldest first
        self._open: set[http1.Connection] = set()
        self._connecting = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._closed = False

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        port = url.port or _DEFAULT_PORT.get(url.raw_scheme)
        if port is None or not url.raw_host:
            raise httpx2.UnsupportedProtocol(f"cannot send to {url}", request=request)
        timeouts = request.extensions.get("timeout") or {}
        conn = await self._acquire((url.raw_scheme, url.raw_host, port), request, timeouts)
        return await http1.exchange(conn, request, self._returned)

    def _returned(self, conn: http1.Connection, keep: bool) -> None:
        if keep:
            self.release(conn)
        else:
            self.discard(conn)

    # -- the pool ------------------------------------------------------------------------
    async def _acquire(
        self, origin: http1.Origin, request: httpx2.Request, timeouts: dict[str, float | None]
    ) -> http1.Connection:
        deadline = None
        while True:
            if self._closed:
                raise RuntimeError("the HTTP transport is closed")
            conn = self._reuse(origin)
            if conn is not None:
                return conn
            if self._max_open is None or len(self._open) + self._connecting < self._max_open:
                return await self._connect(origin, request, timeouts.get("connect"))
            if self._idle:  # full, but an idle connection to another origin can make room
                self.discard(self._idle[0])
                continue
            if deadline is None:
                pool = timeouts.get("pool")
                deadline = None if pool is None else asyncio.get_running_loop().time() + pool
            await self._wait_for_room(deadline, request)

    def _reuse(self, origin: http1.Origin) -> http1.Connection | None:
        idle, expiry = self._idle, self._expiry
        if expiry is not None:  # idle is oldest first: the expired ones lead it
            cutoff = time.monotonic() - expiry
            while idle and idle[0].idle_since < cutoff:
                self.discard(idle[0])
        index = len(idle) - 1
        while index >= 0:  # newest first
            conn = idle[index]
            if conn.origin == origin:
                del idle[index]
                if conn.reusable():
                    return conn
                self.discard(conn)  # closed or spoke while idle
            index -= 1
        return None

    async def _connect(
        self, origin: http1.Origin, request: httpx2.Request, limit: float | None
    ) -> http1.Connection:
        scheme, host, port = origin
        tls = self._tls() if scheme == b"https" else None
        sni = request.extensions.get("sni_hostname") or host.decode("ascii")
        self._connecting += 1
        try:
            wire = await netio.connect(
                host.decode("ascii"), port, limit, self._options, tls, sni, request
            )
        except BaseException:
            self._connecting -= 1
            self._wake()  # the room it held is free again
            raise
        self._connecting -= 1
        conn = http1.Connection(origin, wire)
        if self._closed:
            conn.close()
            raise RuntimeError("the HTTP transport is closed")
        self._open.add(conn)
        return conn

    def _tls(self) -> ssl.SSLContext:
        """The SSL context, made once, when the first https connection needs it: httpx2's
        (its trust store) costs an import of httpcore2 and a load of the CA bundle, which a
        plain-http server (a local model, the loopback test servers) never needs."""
        if self._ssl is None:
            try:
                self._ssl = httpx2.create_ssl_context()
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(_trust_store_error(exc)) from exc
        return self._ssl

    async def _wait_for_room(self, deadline: float | None, request: httpx2.Request) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout_at(deadline):
                await waiter
        except BaseException as exc:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            elif waiter.done() and not waiter.cancelled():
                self._wake()  # woken, but leaving: the room goes to the next in line
            if isinstance(exc, TimeoutError):
                raise httpx2.PoolTimeout(
                    "no connection came free in time", request=request
                ) from exc
            raise

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def release(self, conn: http1.Connection) -> None:
        """An exchange ended cleanly: keep the connection for the next request."""
        if self._closed or not conn.clean():  # the socket is asked before the next use
            self.discard(conn)
            return
        conn.idle_since = time.monotonic()
        self._idle.append(conn)
        if self._max_idle is not None and len(self._idle) > self._max_idle:
            self.discard(self._idle[0])
        self._wake()

    def discard(self, conn: http1.Connection) -> None:
        """Close a connection that must not carry another request."""
        conn.close()
        if conn in self._idle:
            self._idle.remove(conn)
        if conn in self._open:
            self._open.remove(conn)
            self._wake()

    async def aclose(self) -> None:
        self._closed = True
        for conn in list(self._open):
            self.discard(conn)
        while self._waiters:
            self._wake()


def _trust_store_error(exc: Exception) -> str:
    named = [f"{n}={v}" for n in ("SSL_CERT_FILE", "SSL_CERT_DIR") if (v := os.environ.get(n))]
    where = " and ".join(named) if named else "the system's CA bundle"
    return (
        f"the CA certificates for https to the model could not be loaded from {where}: {exc}. "
        "SSL_CERT_FILE / SSL_CERT_DIR must name a readable PEM bundle / directory; unset them "
        "to use the system's."
    )


def proxied() -> bool:
    """Whether the environment names an HTTP proxy, which httpx2 honours only on its own transport."""
    found = urllib.request.getproxies()
    return any(found.get(scheme) for scheme in ("http", "https", "all"))


def transport(
    limits: httpx2.Limits = SDK_LIMITS,
    *,
    socket_options: Iterable[netio.SocketOption] = netio.KEEPALIVE,
    ssl_context: ssl.SSLContext | None = None,
) -> Transport:
    """The SDKs' transport: httpx2's own SSL context (its trust store, made at the first https
    connection) unless ``ssl_context`` is given, the SDKs' limits and keep-alive socket
    options."""
    return Transport(ssl_context=ssl_context, limits=limits, socket_options=socket_options)


def sdk_http_client(default_client: type[HttpClient]) -> HttpClient | None:
    """The SDK's default client class (its timeouts, limits, redirects) on ``Transport``;
    None, meaning "the SDK's own", when a proxy is configured, so that the proxy is still used."""
    if proxied():
        return None
    return default_client(transport=transport())
