"""Raw TCP servers on 127.0.0.1: scripted byte for byte (``serve``, ``Script``), for tests whose
server must misbehave in ways the loopback APIs do not (a proxy's page, a stream split anywhere,
framing that must be refused); a relay in front of a loopback API that counts the connections
made to it and can speak TLS (``relay``); and a plain-http forward proxy (``proxy``)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import aiohttp

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class Site:
    """A raw TCP server on 127.0.0.1 and the connections it accepted."""

    server: asyncio.Server
    port: int
    accepted: list[int] = field(default_factory=list)
    seen: list[bytes] = field(default_factory=list)  # request lines, where the handler keeps them

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"


async def serve(handler: Handler, *, tls: ssl.SSLContext | None = None) -> Site:
    """Run ``handler`` for each connection accepted (behind TLS with ``tls``)."""

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        site.accepted.append(1)
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0, ssl=tls)
    site = Site(server=server, port=server.sockets[0].getsockname()[1])
    return site


async def read_head(reader: asyncio.StreamReader) -> bytes:
    """One request's head; b"" when the client closed the connection instead."""
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise
        return b""


async def read_body(reader: asyncio.StreamReader, head: bytes) -> bytes:
    """The body of the request whose head is ``head``: by Content-Length or de-chunked."""
    fields: dict[bytes, bytes] = {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        fields[name.strip().lower()] = value.strip()
    if fields.get(b"transfer-encoding", b"").lower() == b"chunked":
        parts = []
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
        await reader.readuntil(b"\r\n")
        return b"".join(parts)
    return await reader.readexactly(int(fields.get(b"content-length", b"0")))


@dataclass
class Script:
    """A handler answering requests with ``answers`` in turn, whichever connection they come
    on (each answer a list of pieces written apart, ``pause`` seconds between them); after the
    last, requests get no answer. ``requests`` holds every (head, body) received; ``ended``
    counts the connections the client closed while the server waited for a request."""

    answers: Sequence[Sequence[bytes]]
    pause: float = 0.0
    requests: list[tuple[bytes, bytes]] = field(default_factory=list)
    ended: list[int] = field(default_factory=list)

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while head := await read_head(reader):
            self.requests.append((head, await read_body(reader, head)))
            number = len(self.requests) - 1
            for piece in self.answers[number] if number < len(self.answers) else ():
                writer.write(piece)
                await writer.drain()
                if self.pause:
                    await asyncio.sleep(self.pause)
        self.ended.append(1)


def ok(body: bytes = b"ok", *extra: bytes) -> list[bytes]:
    """A whole 200 answer framed by its length, as one piece (``extra`` headers added)."""
    headers = b"".join(h + b"\r\n" for h in extra)
    return [b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), headers, body)]


async def relay(port: int, *, tls: ssl.SSLContext | None = None) -> Site:
    """Bytes to and from 127.0.0.1:``port``, one upstream connection per connection accepted
    (``accepted`` counts them); with ``tls``, TLS is ended here."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass  # the other side went: the connection ends
        finally:
            writer.close()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    return await serve(handler, tls=tls)


_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding"}


@contextlib.asynccontextmanager
async def proxy() -> AsyncIterator[Site]:
    """A plain-http forward proxy (no CONNECT), running while in the context: each request,
    written in absolute form, is sent on and its answer returned whole, framed by its length,
    on a kept-alive connection. ``seen`` holds the request lines it received."""
    session = aiohttp.ClientSession(auto_decompress=False)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while head := await read_head(reader):
            line, _, rest = head.partition(b"\r\n")
            site.seen.append(line)
            method, target, _ = line.decode().split(" ")
            headers = {}
            for field_line in rest.decode().split("\r\n"):
                name, colon, value = field_line.partition(":")
                if colon and name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                    headers[name] = value.strip()
            body = await read_body(reader, head)
            async with session.request(method, target, headers=headers, data=body) as answer:
                content = await answer.read()
                kept = [
                    f"{k}: {v}\r\n"
                    for k, v in answer.headers.items()
                    if k.lower() not in _HOP_BY_HOP and k.lower() != "content-length"
                ]
                writer.write(
                    f"HTTP/1.1 {answer.status} {answer.reason}\r\n{''.join(kept)}"
                    f"Content-Length: {len(content)}\r\n\r\n".encode()
                    + content
                )
            await writer.drain()

    site = await serve(handler)
    try:
        async with site.server:
            yield site
    finally:
        await session.close()
