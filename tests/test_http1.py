"""``bot.llm.http1``: HTTP/1.1 framing, read and written, against raw servers on real sockets.

Each server here is scripted byte for byte (``tests.netio_rig.Script``), so every way RFC 9112
lets an answer end (by length, by chunks, by the close, or not at all) is met as it arrives,
split at awkward places, and so are the answers h11 refuses. Whether a connection is reused is
read off the server: how many connections it accepted. The pool's own rules:
``tests/test_http1_pool.py``; the SDKs on this transport: ``tests/test_netio.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx2
import pytest

from bot.llm import http1, transport
from tests.netio_rig import Handler, Script, Site, ok, read_head, serve


async def _client(timeout: float = 5) -> httpx2.AsyncClient:  # noqa: ASYNC109
    return httpx2.AsyncClient(transport=transport.transport(), timeout=timeout)


async def _twice(script: Handler, method: str = "GET") -> tuple[list[httpx2.Response], Site]:
    """Two requests in turn on one client; the site says how many connections they took."""
    site = await serve(script)
    async with site.server, await _client() as client:
        answers = [await client.request(method, site.url) for _ in range(2)]
    return answers, site


# -- how an answer ends -----------------------------------------------------------------------
async def test_a_chunked_answer_split_anywhere_arrives_whole_and_keeps_the_connection() -> None:
    answer = [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r",  # the head split before its end
        b"\n\r\n5;ext=1\r\nhel",
        b"lo\r\n",
        b"7\r\n, world\r",
        b"\n0\r\nTrailer-One: x\r\nTrailer-Two: y\r\n",  # trailers, then the empty line
        b"\r\n",
    ]
    script = Script([answer, answer], pause=0.01)
    (first, second), site = await _twice(script)
    assert first.content == second.content == b"hello, world"
    assert len(site.accepted) == 1


async def test_a_length_framed_answer_in_pieces_keeps_the_connection() -> None:
    body = b"x" * 70_000
    answer = [b"HTTP/1.1 200 OK\r\nContent-Length: 70000\r\n\r\n", body[:3], body[3:]]
    (first, second), site = await _twice(Script([answer, answer], pause=0.01))
    assert first.content == second.content == body
    assert len(site.accepted) == 1


async def test_an_answer_ended_by_the_close_is_read_whole_and_the_connection_not_reused() -> None:
    async def until_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n\r\nall of ")
        await writer.drain()
        await asyncio.sleep(0.02)
        writer.write(b"it")
        await writer.drain()

    (first, second), site = await _twice(until_close)
    assert first.content == second.content == b"all of it"
    assert len(site.accepted) == 2


@pytest.mark.parametrize(
    ("method", "answer"),
    [
        ("HEAD", b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n"),
        ("GET", b"HTTP/1.1 204 No Content\r\nContent-Length: 12\r\n\r\n"),
        ("GET", b"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n"),
    ],
)
async def test_answers_without_a_body_keep_the_connection(method: str, answer: bytes) -> None:
    (first, second), site = await _twice(Script([[answer], [answer]]), method)
    assert first.content == second.content == b""
    assert len(site.accepted) == 1


async def test_interim_answers_are_skipped() -> None:
    interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
    (first, second), site = await _twice(Script([[interim, *ok(b"final")], ok(b"again")]))
    assert (first.status_code, first.content, second.content) == (200, b"final", b"again")
    assert "link" not in first.headers
    assert len(site.accepted) == 1


@pytest.mark.parametrize(
    "answer",
    [
        ok(b"ok", b"Connection: close"),
        [b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"],
    ],
    ids=["connection-close", "http-1.0"],
)
async def test_an_answer_that_ends_the_connection_is_not_reused(answer: list[bytes]) -> None:
    (first, second), site = await _twice(Script([answer, answer]))
    assert first.content == second.content == b"ok"
    assert len(site.accepted) == 2


async def test_bytes_past_the_end_of_an_answer_retire_its_connection() -> None:
    (first, second), site = await _twice(Script([[ok()[0] + b"HTTP/1.1 200 OK\r\n"], ok()]))
    assert first.content == second.content == b"ok"
    assert len(site.accepted) == 2


async def test_status_reason_version_and_headers_reach_the_response() -> None:
    answer = b"HTTP/1.1 418 I'm a teapot\r\nX-One: a\r\nX-One:  b \r\nContent-Length: 0\r\n\r\n"
    site = await serve(Script([[answer]]))
    async with site.server, await _client() as client:
        response = await client.get(site.url)
    assert (response.status_code, response.reason_phrase, response.http_version) == (
        418,
        "I'm a teapot",
        "HTTP/1.1",
    )
    assert response.headers.get_list("x-one") == ["a", "b"]


# -- answers refused ------------------------------------------------------------------------
MALFORMED = {
    "status line": b"HTTP/1.1 2OO OK\r\nContent-Length: 0\r\n\r\n",
    "not http": b"SSH-2.0-OpenSSH_9.2\r\n\r\n",
    "folded header": b"HTTP/1.1 200 OK\r\nX-A: 1\r\n  continued\r\nContent-Length: 0\r\n\r\n",
    "no colon": b"HTTP/1.1 200 OK\r\nX-A 1\r\nContent-Length: 0\r\n\r\n",
    "space before colon": b"HTTP/1.1 200 OK\r\nContent-Length : 0\r\n\r\n",
    "two lengths": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
    "bad length": b"HTTP/1.1 200 OK\r\nContent-Length: -2\r\n\r\nok",
    "bad chunk size": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\nok\r\n0\r\n\r\n",
    "long chunk": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokk\r\n0\r\n\r\n",
    "upgrade": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
    "huge head": b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"p" * http1.MAX_HEAD + b"\r\n\r\n",
}


@pytest.mark.parametrize("answer", MALFORMED.values(), ids=MALFORMED.keys())
async def test_a_malformed_answer_is_a_protocol_error_and_the_next_request_works(
    answer: bytes,
) -> None:
    site = await serve(Script([[answer], ok(b"fine")]))
    async with site.server, await _client() as client:
        with pytest.raises(httpx2.RemoteProtocolError):
            await client.get(site.url)
        assert (await client.get(site.url)).content == b"fine"
    assert len(site.accepted) == 2  # the broken connection was not reused


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Le",
        b"",
    ],
    ids=["by-length", "chunked", "in-the-head", "before-the-head"],
)
async def test_a_server_closing_mid_answer_is_a_protocol_error(answer: bytes) -> None:
    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_head(reader)
        writer.write(answer)
        await writer.drain()

    site = await serve(cut)
    async with site.server, await _client() as client:
        with pytest.raises(httpx2.RemoteProtocolError, match="closed|disconnected"):
            await client.get(site.url)


async def test_a_stall_between_chunks_is_a_read_timeout() -> None:
    answer = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n"]
    site = await serve(Script([answer]))
    async with (
        site.server,
        await _client(timeout=0.3) as client,
        client.stream("GET", site.url) as response,
    ):
        with pytest.raises(httpx2.ReadTimeout):
            await response.aread()


# -- what is written --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "header",
    [{"X-Note": "a\r\nX-Injected: 1"}, {"X-Injected: 1\r\nX-Note": "a"}, {"X Note": "a"}],
    ids=["line-break-in-value", "line-break-in-name", "space-in-name"],
)
async def test_an_illegal_header_is_refused_and_nothing_is_sent(header: dict[str, str]) -> None:
    script = Script([ok()])
    site = await serve(script)
    async with site.server, await _client() as client:
        with pytest.raises(httpx2.LocalProtocolError, match="illegal header"):
            await client.get(site.url, headers=header)
        assert (await client.get(site.url)).content == b"ok"
    assert len(script.requests) == 1 and b"X-Injected" not in script.requests[0][0]


async def test_request_bodies_arrive_whole_by_length_and_chunked() -> None:
    large = bytes(range(256)) * 8192  # 2 MiB, more than one write

    async def pieces() -> AsyncIterator[bytes]:
        for start in range(0, len(large), 100_000):
            yield large[start : start + 100_000]

    script = Script([ok(), ok()])
    site = await serve(script)
    async with site.server, await _client() as client:
        await client.post(site.url, content=large)
        await client.post(site.url, content=pieces())
    (head_1, body_1), (head_2, body_2) = script.requests
    assert b"Content-Length: 2097152\r\n" in head_1 and body_1 == large
    assert b"Transfer-Encoding: chunked\r\n" in head_2 and body_2 == large
    assert head_1.startswith(b"POST / HTTP/1.1\r\nHost: 127.0.0.1:")
    assert len(site.accepted) == 1


async def test_an_answer_sent_before_the_connection_broke_mid_request_is_returned() -> None:
    """A server may answer (413, say) and drop the connection before the body is sent; the
    answer, not the write's error, is what the caller gets (as httpcore2 does)."""
    sent = asyncio.Event()
    drop = asyncio.Event()

    async def early(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 413 Content Too Large\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        sent.set()
        await drop.wait()
        writer.transport.abort()

    site = await serve(early)
    async with site.server, await _client() as client:
        conn = await _idle_connection(client, site)
        await sent.wait()
        while not conn.wire.buffer:  # the answer is in, before the connection breaks
            await conn.wire.more()
        drop.set()
        while not conn.wire.lost:
            await conn.wire.more()
        answer = await http1.exchange(
            conn, client.build_request("POST", site.url, content=b"x"), _drop
        )
    assert answer.status_code == 413


async def _idle_connection(client: httpx2.AsyncClient, site: Site) -> http1.Connection:
    """A connection of the client's transport to ``site``, opened, with nothing sent yet."""
    pool = client._transport
    assert isinstance(pool, transport.Transport)
    request = client.build_request("GET", site.url)
    return await pool._acquire((b"http", b"127.0.0.1", site.port), request, {})


def _drop(conn: http1.Connection, keep: bool) -> None:
    conn.close()


async def test_the_request_line_is_what_the_url_says() -> None:
    script = Script([ok()])
    site = await serve(script)
    async with site.server, await _client() as client:
        await client.get(site.url + "v1/messages?beta=true&q=a%20b")
    head = script.requests[0][0]
    assert head.startswith(b"GET /v1/messages?beta=true&q=a%20b HTTP/1.1\r\n")
