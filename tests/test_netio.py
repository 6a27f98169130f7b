"""``bot.llm.netio`` and ``bot.llm.http1``: the vendor SDKs' connections, against real servers.

Every test speaks real HTTP over real sockets: the real ``anthropic`` and ``openai`` SDKs
against the loopback APIs, and raw asyncio servers where the test needs a server that
misbehaves (closes an idle connection, sends a stray 408, never answers, sends more than is
read). TLS and opening connections: ``tests/test_netio_connect.py``; HTTP/1.1 framing and the
pool's rules: ``tests/test_http1.py`` and ``tests/test_http1_pool.py``.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
from pathlib import Path

import httpx2
import pytest
import uvloop

from bot.llm import http1, netio, transport
from bot.llm.anthropic import AnthropicProvider
from bot.llm.errors import ProviderRequestError, ProviderUnavailable
from bot.llm.openai import OpenAIProvider
from bot.llm.types import LLMRequest, Message, TextPart
from bot.resilience import RetryPolicy
from bot.settings import LLMSettings, load_settings
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.openai_server import OpenAIServer
from tests.netio_rig import Counted, read_head, serve, trust_store_loads


def _no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def _request(text: str = "hi") -> LLMRequest:
    return LLMRequest(model="m", messages=(Message(role="user", parts=(TextPart(text=text),)),))


# -- the SDKs, as Chorus builds them ----------------------------------------------------------
@pytest.mark.parametrize("vendor", ["anthropic", "openai"])
async def test_providers_from_settings_send_over_one_kept_alive_asyncio_connection(
    vendor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted = Counted(monkeypatch)
    server_cls = AnthropicServer if vendor == "anthropic" else OpenAIServer
    async with server_cls() as server:
        server.default_reply = lambda body: "pong"
        if vendor == "anthropic":
            settings = LLMSettings(anthropic_api_key="k", anthropic_base_url=server.base_url)  # type: ignore[arg-type]
            provider: AnthropicProvider | OpenAIProvider = AnthropicProvider.from_settings(settings)
        else:
            settings = LLMSettings(openai_api_key="k", openai_base_url=server.base_url)  # type: ignore[arg-type]
            provider = OpenAIProvider.from_settings(settings)
        try:
            for _ in range(3):
                assert (await provider.complete(_request())).text == "pong"
            streamed = [e async for e in provider.stream(_request())]
            assert streamed, "the stream yielded nothing"
        finally:
            await provider.aclose()
        assert len(server.requests) == 4
    assert counted.connects == 1


def test_the_same_under_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    counted = Counted(monkeypatch)

    async def main() -> None:
        async with AnthropicServer() as server:
            server.default_reply = lambda body: "pong"
            settings = LLMSettings(anthropic_api_key="k", anthropic_base_url=server.base_url)  # type: ignore[arg-type]
            provider = AnthropicProvider.from_settings(settings)
            try:
                for _ in range(3):
                    assert (await provider.complete(_request())).text == "pong"
            finally:
                await provider.aclose()

    uvloop.run(main())
    assert counted.connects == 1


async def test_a_proxy_in_the_environment_is_still_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpx2 ignores proxy variables once a transport is given, so with one set Chorus keeps
    the SDK's own client: the request must reach the proxy."""
    seen: list[bytes] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await read_head(reader))
        writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()

    site = await serve(proxy)
    async with site.server:
        _no_proxy_environment(monkeypatch)
        monkeypatch.setenv("HTTP_PROXY", site.url)
        assert transport.sdk_http_client(httpx2.AsyncClient) is None
        settings = LLMSettings(
            anthropic_api_key="k",  # type: ignore[arg-type]
            anthropic_base_url="http://127.0.0.1:9",  # nothing listens: only the proxy answers
        )
        provider = AnthropicProvider.from_settings(settings, retry=RetryPolicy(max_retries=0))
        try:
            with pytest.raises((ProviderUnavailable, ProviderRequestError)):
                await provider.complete(_request())
        finally:
            await provider.aclose()
    assert seen and seen[0].startswith(b"POST http://127.0.0.1:9/v1/messages ")


def test_without_a_proxy_the_sdk_client_gets_the_asyncio_transport(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _no_proxy_environment(monkeypatch)
    client = transport.sdk_http_client(httpx2.AsyncClient)
    assert client is not None
    assert isinstance(client._transport, transport.Transport)


async def test_a_proxy_written_in_dotenv_is_not_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """README: the proxy variables come from the process's environment, not ``.env`` (the SDKs
    read them; Chorus's settings do not export ``.env``). The call goes straight to the API."""
    seen: list[bytes] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await read_head(reader))

    proxy_site = await serve(proxy)
    async with proxy_site.server, AnthropicServer() as api:
        api.default_reply = lambda body: "direct"
        _no_proxy_environment(monkeypatch)
        for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "CHORUS_MODEL"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.chdir(tmp_path)
        (tmp_path / ".env").write_text(
            f"HTTP_PROXY={proxy_site.url}\n"
            f"ANTHROPIC_API_KEY=k\nANTHROPIC_BASE_URL={api.base_url}\n",
            encoding="utf-8",
        )
        settings = load_settings()
        provider = AnthropicProvider.from_settings(settings.llm)
        try:
            assert (await provider.complete(_request())).text == "direct"
        finally:
            await provider.aclose()
    assert seen == []


def test_building_the_client_loads_no_trust_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """A load of the system's CA bundle costs tens of ms on the way to the first answer, and a
    plain-http server never needs it: the first https connection loads it (once, as the SDK's
    own client does: ``test_netio_connect``)."""
    _no_proxy_environment(monkeypatch)
    loads = trust_store_loads(monkeypatch)
    assert transport.sdk_http_client(httpx2.AsyncClient) is not None
    assert loads == []


# -- connections the server ends, or never answers --------------------------------------------
async def test_an_idle_connection_the_server_closed_is_replaced_not_reused() -> None:
    closed = asyncio.Event()

    async def once_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")  # keep-alive by default
        await writer.drain()
        writer.close()  # then the server's keep-alive ends
        await writer.wait_closed()
        closed.set()

    site = await serve(once_then_close)
    async with site.server, httpx2.AsyncClient(transport=transport.transport()) as client:
        first = await client.get(site.url)
        assert first.text == "ok"
        await closed.wait()
        await asyncio.sleep(0.05)  # the loop delivers the end of the stream
        closed.clear()
        second = await client.get(site.url)
        assert second.text == "ok"
    assert len(site.accepted) == 2


async def test_a_close_the_loop_has_not_delivered_yet_is_seen_on_the_socket() -> None:
    """The readability check asks the socket when the protocol has heard nothing: here reading
    is paused, so the server's close waits in the kernel, as it does between two loop passes."""
    closed = asyncio.Event()

    async def once_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()
        await writer.wait_closed()
        closed.set()

    site = await serve(once_then_close)
    async with (
        site.server,
        httpx2.AsyncClient(transport=transport.transport(), timeout=5) as client,
    ):
        first = await client.get(site.url)
        conn = first.extensions["network_stream"]
        assert isinstance(conn, http1.Connection) and conn.wire.transport is not None
        conn.wire.transport.pause_reading()
        await closed.wait()
        assert not conn.wire.eof and not conn.wire.lost  # nothing delivered
        second = await client.get(site.url)
        assert second.text == "ok"
    assert len(site.accepted) == 2


async def test_bytes_an_idle_connection_received_retire_it() -> None:
    """A server may send a 408 on an idle connection before it closes it; the bytes already sit
    in the protocol's buffer, out of the socket's sight, and must not answer the next request."""
    answered = asyncio.Event()

    async def stale(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await answered.wait()  # the 408 comes apart, once the connection is idle
        writer.write(b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(30)

    site = await serve(stale)
    async with (
        site.server,
        httpx2.AsyncClient(transport=transport.transport(), timeout=5) as client,
    ):
        first = await client.get(site.url)
        assert first.status_code == 200
        conn = first.extensions["network_stream"]
        assert isinstance(conn, http1.Connection)
        answered.set()
        while not conn.wire.buffer:
            await conn.wire.more()
        second = await client.get(site.url)
        assert second.status_code == 200
    assert len(site.accepted) == 2


async def test_a_server_that_never_answers_is_a_read_timeout() -> None:
    async def deaf(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_head(reader)
        await asyncio.sleep(30)

    site = await serve(deaf)
    async with (
        site.server,
        httpx2.AsyncClient(transport=transport.transport(), timeout=0.3) as client,
    ):
        with pytest.raises(httpx2.ReadTimeout):
            await client.get(site.url)


async def test_a_connection_dropped_before_the_answer_is_a_protocol_error() -> None:
    async def rude(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_head(reader)
        writer.transport.abort()

    site = await serve(rude)
    async with site.server, httpx2.AsyncClient(transport=transport.transport()) as client:
        with pytest.raises((httpx2.RemoteProtocolError, httpx2.ReadError)):
            await client.get(site.url)


async def test_a_refused_connection_is_a_connect_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: refused
        async with httpx2.AsyncClient(transport=transport.transport()) as client:
            with pytest.raises(httpx2.ConnectError):
                await client.get(f"http://127.0.0.1:{port}/")


# -- a body larger than what is read --------------------------------------------------------
async def test_a_large_body_read_slowly_is_held_in_bounded_memory_and_arrives_whole() -> None:
    body = bytes(range(256)) * (8 * 1024)  # 2 MiB

    async def big(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body))
        writer.write(body)
        await writer.drain()

    site = await serve(big)
    async with (
        site.server,
        httpx2.AsyncClient(transport=transport.transport()) as client,
        client.stream("GET", site.url) as response,
    ):
        conn = response.extensions["network_stream"]
        assert isinstance(conn, http1.Connection)
        chunks = response.aiter_raw()
        received = [await anext(chunks)]
        await asyncio.sleep(0.3)  # the server keeps sending; nobody reads
        held = len(conn.wire.buffer)
        received += [chunk async for chunk in chunks]
    assert held <= netio._HIGH_WATER + 256 * 1024  # one socket read past the mark at most
    assert hashlib.sha256(b"".join(received)).digest() == hashlib.sha256(body).digest()
