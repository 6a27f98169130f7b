"""What the ``bot.llm.netio`` and ``bot.llm.http1`` tests share: counting the connections the
SDKs' transport opens and the loads of a trust store, and raw TCP servers scripted byte for byte (``serve``, ``Script``)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from bot.llm import netio


class Counted:
    """Counts the connections ``netio.connect`` opens, and fails any that httpx2's stock
    transport (httpcore2 on anyio) opens."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.connects = 0
        real = netio.connect

        async def counted(*args: Any, **kwargs: Any) -> netio.Wire:
            self.connects += 1
            return await real(*args, **kwargs)

        async def stock(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("httpx2's stock network backend opened a connection")

        monkeypatch.setattr(netio, "connect", counted)
        monkeypatch.setattr("httpcore2._backends.anyio.AnyIOBackend.connect_tcp", stock)


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def trust_store_loads(monkeypatch: pytest.MonkeyPatch) -> list[ssl.SSLContext]:
    """The contexts a CA bundle is loaded into from now on (``load_verify_locations``), in
    order; the loads still happen."""
    loads: list[ssl.SSLContext] = []
    real = ssl.SSLContext.load_verify_locations

    def counted(context: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        loads.append(context)
        real(context, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    return loads


@dataclass
class Site:
    """A raw TCP server on 127.0.0.1 and the connections it accepted."""

    server: asyncio.Server
    port: int
    accepted: list[int] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"


async def serve(handler: Handler) -> Site:
    """Run ``handler`` for each connection accepted."""

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        site.accepted.append(1)
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
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
