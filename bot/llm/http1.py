"""HTTP/1.1 on one connection: the request written, the response head parsed, the body framed.

Why: with an instant model the vendor call is most of a worker's CPU per answered message, and
a third of that call was the layers under httpx2: httpcore2's connection pool (an anyio lock, a
shielded cancel scope and a request queue per request), its HTTP/1.1 connection and h11's state
machine, event by event. The SDKs speak plain request/response HTTP/1.1, so ``exchange`` does
just that: the request head written with its body in one ``write``, the response head parsed in
one pass over what the protocol received (1xx answers skipped), the body framed by length, by
chunks or by the end of the connection (RFC 9112 section 6.3). A connection may carry another
request only when its answer was read to the end, neither side said ``Connection: close``, the
answer was HTTP/1.1 and nothing arrived past its end. The pool is ``bot.llm.transport``;
``python -m bench.vendor_call`` measures both.

Refused, as h11 refuses them: a header with CR, LF or NUL in a request (request splitting), a
malformed status line or header (obsolete line folding included), a head over 64 KiB,
conflicting ``Content-Length`` values, a bad chunk size, an upgrade (101). The errors are
httpx2's, as its stock transport raises them, so the SDKs map and retry them unchanged.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable

import httpx2

from bot.llm import netio

# Refuse a response head larger than this (h11 refuses at 16 KiB, httpcore2 passes it 64 KiB).
MAX_HEAD = 64 * 1024
_EMPTY_LINE = b"\r\n\r\n"
_FORBIDDEN = re.compile(rb"[\r\n\0]")  # never in a header value: request splitting
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # a header name (RFC 9110 section 5.1)
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")
_NO_BODY, _LENGTH, _CHUNKED, _UNTIL_CLOSE = range(4)

Origin = tuple[bytes, bytes, int]  # scheme, host, port
Returned = Callable[["Connection", bool], None]  # the connection, and whether it may be reused


class Connection:
    """One open connection to an origin, idle in the pool or carrying one exchange."""

    __slots__ = ("origin", "wire", "idle_since")

    def __init__(self, origin: Origin, wire: netio.Wire) -> None:
        self.origin = origin
        self.wire = wire
        self.idle_since = 0.0

    def clean(self) -> bool:
        """Nothing received past the last answer and no close heard of."""
        wire = self.wire
        return not (wire.buffer or wire.eof or wire.lost or wire.closing())

    def reusable(self) -> bool:
        """``clean``, and the socket agrees (a close the loop has not delivered yet)."""
        return self.clean() and not netio.readable(self.wire)

    async def more(self, limit: float | None, request: httpx2.Request) -> None:
        """Wait for more bytes (or the end): a timer only when there is something to wait for."""
        try:
            async with asyncio.timeout(limit):
                await self.wire.more()
        except TimeoutError as exc:
            raise httpx2.ReadTimeout("timed out reading from the server", request=request) from exc

    async def write(self, data: bytes, limit: float | None, request: httpx2.Request) -> None:
        wire = self.wire
        if wire.lost or wire.closing():
            raise httpx2.WriteError(_reason(wire, "connection closed"), request=request)
        wire.write(data)
        if wire.writing_paused:  # the transport's buffer is full: wait for the socket
            try:
                async with asyncio.timeout(limit):
                    await wire.drained()
            except TimeoutError as exc:
                raise httpx2.WriteTimeout(
                    "timed out writing to the server", request=request
                ) from exc
        if wire.lost and wire.error is not None:
            raise httpx2.WriteError(_reason(wire, "connection lost"), request=request)

    async def line(self, limit: float | None, request: httpx2.Request) -> bytes:
        """One CRLF-terminated line of a chunked body, without its CRLF."""
        wire = self.wire
        while (end := wire.buffer.find(b"\r\n")) < 0:
            if len(wire.buffer) > MAX_HEAD:
                raise httpx2.RemoteProtocolError("a chunk line over 64 KiB", request=request)
            await self.wait_or_fail(limit, request, "in a chunked body")
        return wire.take(end + 2)[:-2]

    async def wait_or_fail(self, limit: float | None, request: httpx2.Request, where: str) -> None:
        """``more``, unless the connection already ended: then the error saying ``where``."""
        wire = self.wire
        if wire.eof or wire.lost:
            if wire.error is not None:
                raise httpx2.ReadError(_reason(wire, "connection lost"), request=request)
            raise httpx2.RemoteProtocolError(
                f"the server closed the connection {where}", request=request
            )
        await self.more(limit, request)

    def close(self) -> None:
        self.wire.close()


def _reason(wire: netio.Wire, default: str) -> str:
    if wire.error is None:
        return default
    return str(wire.error) or type(wire.error).__name__


def _request_head(request: httpx2.Request) -> tuple[bytes, bool, bool]:
    """The request line and headers; whether the body is chunked and the connection closes."""
    parts = [request.method.encode("ascii"), b" ", request.url.raw_path, b" HTTP/1.1\r\n"]
    chunked = close = False
    for name, value in request.headers.raw:
        if not _TOKEN.fullmatch(name) or _FORBIDDEN.search(value):
            raise httpx2.LocalProtocolError(f"illegal header {name!r}", request=request)
        lowered = name.lower()
        if lowered == b"transfer-encoding":
            chunked = value.strip().lower().endswith(b"chunked")
        elif lowered == b"connection":
            close = b"close" in value.lower()
        parts += (name, b": ", value, b"\r\n")
    parts.append(b"\r\n")
    return b"".join(parts), chunked, close


async def _send(conn: Connection, request: httpx2.Request, limit: float | None) -> bool:
    """Write the request, head and body; whether the request asked to close the connection."""
    head, chunked, close = _request_head(request)
    pending, size = [head], len(head)
    assert isinstance(request.stream, httpx2.AsyncByteStream)
    async for chunk in request.stream:
        if not chunk:
            continue
        if chunked:
            pending += (b"%x\r\n" % len(chunk), chunk, b"\r\n")
        else:
            pending.append(chunk)
        size += len(chunk)
        if size >= 65536:  # a large body goes out as it comes, not all held at once
            await conn.write(b"".join(pending), limit, request)
            pending, size = [], 0
    if chunked:
        pending.append(b"0\r\n\r\n")
    await conn.write(b"".join(pending), limit, request)
    return close


async def _read_head(
    conn: Connection, limit: float | None, request: httpx2.Request
) -> tuple[bytes, int, bytes, list[tuple[bytes, bytes]]]:
    """The final response head: HTTP version, status, reason and headers (1xx ones skipped)."""
    wire = conn.wire
    while True:
        start = 0
        while (end := wire.buffer.find(_EMPTY_LINE, start, MAX_HEAD + 4)) < 0:
            if len(wire.buffer) >= MAX_HEAD + 4:
                raise httpx2.RemoteProtocolError("a response head over 64 KiB", request=request)
            if (wire.eof or wire.lost) and not wire.buffer and wire.error is None:
                raise httpx2.RemoteProtocolError(
                    "Server disconnected without sending a response.", request=request
                )
            start = max(0, len(wire.buffer) - 3)
            await conn.wait_or_fail(limit, request, "in the response head")
        version, status, reason, headers = _parse_head(wire.take(end + 4)[:end], request)
        if status == 101:
            raise httpx2.RemoteProtocolError("an upgrade (101) was not asked for", request=request)
        if status >= 200:
            return version, status, reason, headers


def _parse_head(
    raw: bytes, request: httpx2.Request
) -> tuple[bytes, int, bytes, list[tuple[bytes, bytes]]]:
    lines = raw.lstrip(b"\r\n").split(b"\r\n")  # a stray empty line before it is allowed
    version, _, rest = lines[0].partition(b" ")
    code, _, reason = rest.partition(b" ")
    if version not in (b"HTTP/1.1", b"HTTP/1.0") or len(code) != 3 or not code.isdigit():
        raise httpx2.RemoteProtocolError(
            f"not an HTTP/1.1 status line: {lines[0][:60]!r}", request=request
        )
    headers: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name[-1:] in b" \t" or line[:1] in b" \t":
            raise httpx2.RemoteProtocolError(
                f"a malformed response header: {line[:60]!r}", request=request
            )
        headers.append((name, value.strip(b" \t")))
    return version, int(code), reason, headers


def _framing(
    method: str, status: int, headers: list[tuple[bytes, bytes]], request: httpx2.Request
) -> tuple[tuple[int, int], bool]:
    """How the body ends (RFC 9112 section 6.3) and, when by length, its length; and whether
    the answer said ``Connection: close`` (one pass over the headers for both)."""
    lengths: set[bytes] = set()
    coding = None
    close = False
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"transfer-encoding":
            coding = value.rsplit(b",", 1)[-1].strip().lower()
        elif lowered == b"content-length":
            lengths.update(v.strip() for v in value.split(b","))
        elif lowered == b"connection":
            close = close or b"close" in value.lower()
    if method == "HEAD" or status in (204, 304):
        return (_NO_BODY, 0), close
    if coding is not None:
        return (_CHUNKED, 0) if coding == b"chunked" else (_UNTIL_CLOSE, 0), close
    if not lengths:
        return (_UNTIL_CLOSE, 0), close
    (length,) = lengths if len(lengths) == 1 else (b"",)
    if not length.isdigit():
        raise httpx2.RemoteProtocolError(f"a bad Content-Length: {lengths}", request=request)
    return (_LENGTH, int(length)), close


async def exchange(
    conn: Connection, request: httpx2.Request, returned: Returned
) -> httpx2.Response:
    """Send ``request`` on ``conn`` and return the response, its body still to be read;
    ``returned(conn, keep)`` hears once whether the connection can carry another request."""
    timeouts = request.extensions.get("timeout") or {}
    read = timeouts.get("read")
    try:
        try:
            close = await _send(conn, request, timeouts.get("write"))
        except httpx2.WriteError:  # the server may have answered and closed: read that
            if not conn.wire.buffer:
                raise
            close = True
        version, status, reason, headers = await _read_head(conn, read, request)
        framing, closes = _framing(request.method, status, headers, request)
    except BaseException:
        returned(conn, False)
        raise
    keep = not (close or closes) and version == b"HTTP/1.1" and framing[0] != _UNTIL_CLOSE
    body = Body(conn, framing, keep, read, request, returned)
    extensions = {"http_version": version, "reason_phrase": reason, "network_stream": conn}
    return httpx2.Response(status, headers=headers, stream=body, extensions=extensions)


class Body(httpx2.AsyncByteStream):
    """A response body as it arrives; its connection goes back to the pool once it was read
    to the end and closed, or is closed if the body was left unread or broke."""

    def __init__(
        self,
        conn: Connection,
        framing: tuple[int, int],
        keep: bool,
        limit: float | None,
        request: httpx2.Request,
        returned: Returned,
    ) -> None:
        self._conn, self._keep, self._returned = conn, keep, returned
        self._framing, self._limit, self._request = framing, limit, request
        self._complete = False
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        kind, length = self._framing
        try:
            if kind == _LENGTH:
                async for data in self._exactly(length, "before the body's end"):
                    yield data
            elif kind == _CHUNKED:
                async for data in self._chunks():
                    yield data
            elif kind == _UNTIL_CLOSE:
                async for data in self._to_close():
                    yield data
            self._complete = True
        except BaseException:  # GeneratorExit too: a body left half read
            self._finish()
            raise

    async def _exactly(self, count: int, where: str) -> AsyncIterator[bytes]:
        conn, wire = self._conn, self._conn.wire
        while count:
            if not wire.buffer:
                await conn.wait_or_fail(self._limit, self._request, where)
                continue
            data = wire.take(count)
            count -= len(data)
            yield data

    async def _chunks(self) -> AsyncIterator[bytes]:
        conn, limit, request = self._conn, self._limit, self._request
        while True:
            size_text = (await conn.line(limit, request)).split(b";", 1)[0].strip(b" \t")
            if not _HEX.fullmatch(size_text):
                raise httpx2.RemoteProtocolError(
                    f"a bad chunk size: {size_text[:20]!r}", request=request
                )
            size = int(size_text, 16)
            if size == 0:
                while await conn.line(limit, request):  # trailers, up to the empty line
                    pass
                return
            async for data in self._exactly(size, "in a chunk"):
                yield data
            if await conn.line(limit, request):
                raise httpx2.RemoteProtocolError("a chunk longer than its size", request=request)

    async def _to_close(self) -> AsyncIterator[bytes]:
        conn, wire = self._conn, self._conn.wire
        while True:
            if wire.buffer:
                yield wire.take(len(wire.buffer))
            elif wire.eof or wire.lost:
                if wire.error is not None:
                    raise httpx2.ReadError(_reason(wire, "connection lost"), request=self._request)
                return
            else:
                await conn.more(self._limit, self._request)

    async def aclose(self) -> None:
        self._finish()

    def _finish(self) -> None:
        if not self._closed:
            self._closed = True
            self._returned(self._conn, self._complete and self._keep)
