"""``bot.llm.netio``: opening connections, TLS and racing the resolved addresses.

Real sockets throughout: an aiohttp server behind TLS with a throwaway CA (``trustme``), on the
standard loop and on uvloop; for the address race (RFC 8305) real listening and refused ports,
with the resolver (and, for a black-holed address, one attempt) replaced by the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trustme
import uvloop
from aiohttp import web

from bot.llm import http1, netio, transport
from bot.llm.errors import ProviderRequestError
from bot.llm.openai import OpenAIProvider
from bot.llm.types import LLMRequest, Message, TextPart
from bot.resilience import RetryPolicy
from bot.settings import ConfigError, LLMSettings
from tests.netio_rig import Counted, trust_store_loads


# -- TLS ------------------------------------------------------------------------------------
@contextlib.asynccontextmanager
async def _tls_site(ca: trustme.CA) -> AsyncIterator[int]:
    """An aiohttp server on 127.0.0.1 behind TLS, its certificate (for "localhost" and the
    address) issued by ``ca``; yields its port."""
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(server_context)

    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="over tls")

    app = web.Application()
    app.router.add_get("/", hello)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_context).start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


@pytest.fixture
async def tls_server() -> AsyncIterator[tuple[int, trustme.CA]]:
    ca = trustme.CA()
    async with _tls_site(ca) as port:
        yield port, ca


async def test_https_runs_the_tls_handshake_on_the_connection(
    tls_server: tuple[int, trustme.CA],
) -> None:
    port, ca = tls_server
    context = ssl.create_default_context()
    ca.configure_trust(context)
    async with httpx2.AsyncClient(transport=transport.transport(ssl_context=context)) as client:
        response = await client.get(f"https://localhost:{port}/")
        assert response.text == "over tls"
        conn = response.extensions["network_stream"]
        assert isinstance(conn, http1.Connection) and conn.wire.transport is not None
        assert conn.wire.transport.get_extra_info("ssl_object").version().startswith("TLS")
        again = await client.get(f"https://localhost:{port}/")  # the same connection
        assert again.extensions["network_stream"] is conn


def test_https_under_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    """``chorus run`` runs on uvloop, whose transports and ``start_tls`` are its own."""
    ca = trustme.CA()
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)

    async def main() -> list[str]:
        async with (
            _tls_site(ca) as port,
            httpx2.AsyncClient(transport=transport.transport(ssl_context=client_context)) as client,
        ):
            return [(await client.get(f"https://localhost:{port}/")).text for _ in range(3)]

    counted = Counted(monkeypatch)
    assert uvloop.run(main()) == ["over tls"] * 3
    assert counted.connects == 1


async def test_an_untrusted_certificate_is_a_connect_error(
    tls_server: tuple[int, trustme.CA],
) -> None:
    port, _ = tls_server  # the system's trust store knows nothing of this CA
    async with httpx2.AsyncClient(transport=transport.transport()) as client:
        with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await client.get(f"https://localhost:{port}/")


async def test_httpx2s_trust_store_is_loaded_once_at_the_first_https_connection(
    tls_server: tuple[int, trustme.CA], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default context is httpx2's own (here ``SSL_CERT_FILE``, which it honours), made
    when an https connection first needs it and shared by every later one."""
    port, ca = tls_server
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    loads = trust_store_loads(monkeypatch)
    pool = transport.transport()
    assert loads == []
    async with httpx2.AsyncClient(transport=pool) as client:
        url = f"https://localhost:{port}/"
        both = await asyncio.gather(client.get(url), client.get(url))  # two connections
        later = await client.get(url)
    assert [r.text for r in (*both, later)] == ["over tls"] * 3
    assert both[0].extensions["network_stream"] is not both[1].extensions["network_stream"]
    assert len(loads) == 1


async def test_a_ca_bundle_that_cannot_be_loaded_is_named_once_and_not_retried(
    tls_server: tuple[int, trustme.CA], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the user meets: the model's first https call fails once, naming the variable and
    the path, not a bare "No such file or directory" retried until the provider gives up."""
    port, _ = tls_server
    missing = tmp_path / "no-such-ca.pem"
    monkeypatch.setenv("SSL_CERT_FILE", str(missing))
    for name in ("SSL_CERT_DIR", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    settings = LLMSettings(
        openai_api_key="k",  # type: ignore[arg-type]
        openai_base_url=f"https://localhost:{port}/v1",
    )
    provider = OpenAIProvider.from_settings(settings, retry=RetryPolicy(max_retries=3))
    try:
        with pytest.raises(ProviderRequestError) as raised:
            await provider.complete(
                LLMRequest(
                    model="m", messages=(Message(role="user", parts=(TextPart(text="hi"),)),)
                )
            )
    finally:
        await provider.aclose()
    message = str(raised.value)
    assert f"SSL_CERT_FILE={missing}" in message and "could not be loaded" in message
    assert isinstance(raised.value.__cause__, ConfigError)


# -- racing the resolved addresses (RFC 8305) ------------------------------------------------
_REQUEST = httpx2.Request("GET", "https://example.test/")


async def _connect(host: str, port: int, timeout: float | None = None) -> netio.Wire:  # noqa: ASYNC109
    """A plain connection, as the transport opens one for an ``http`` URL."""
    return await netio.connect(host, port, timeout, netio.KEEPALIVE, None, host, _REQUEST)


def _peer_port(wire: netio.Wire) -> int:
    assert wire.transport is not None
    return int(wire.transport.get_extra_info("peername")[1])


def _infos(*ports: int) -> list[Any]:
    return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", p)) for p in ports]


async def _listening() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock, sock.getsockname()[1]


async def test_a_refused_address_hands_over_to_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    listener, good = await _listening()
    with socket.socket() as closed, listener:
        closed.bind(("127.0.0.1", 0))
        refused = closed.getsockname()[1]

        async def resolve(loop: Any, host: str, port: int) -> list[Any]:
            return _infos(refused, good)

        monkeypatch.setattr(netio, "_resolve", resolve)
        wire = await _connect("example.test", 443)
        assert _peer_port(wire) == good
        wire.close()


async def test_a_hanging_address_gets_a_head_start_then_loses_the_race(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    listener, good = await _listening()
    hanging = good + 1 if good < 65535 else good - 1  # never really dialled: see below
    started: list[int] = []
    cancelled: list[int] = []
    real_attempt = netio._attempt

    async def attempt(loop: Any, family: int, kind: int, proto: int, address: Any) -> socket.socket:
        started.append(address[1])
        if address[1] == hanging:  # a black-holed address: the SYN is never answered
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.append(address[1])
                raise
        return await real_attempt(loop, family, kind, proto, address)

    async def resolve(loop: Any, host: str, port: int) -> list[Any]:
        return _infos(hanging, good)

    monkeypatch.setattr(netio, "_attempt", attempt)
    monkeypatch.setattr(netio, "_resolve", resolve)
    with listener:
        wire = await _connect("example.test", 443, timeout=10)
        assert _peer_port(wire) == good
        await asyncio.sleep(0)  # the loser's cancellation runs
        wire.close()
    assert started == [hanging, good]
    assert cancelled == [hanging]


async def test_every_address_failing_names_them_all(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as a, socket.socket() as b:
        a.bind(("127.0.0.1", 0))
        b.bind(("127.0.0.1", 0))
        ports = (a.getsockname()[1], b.getsockname()[1])

        async def resolve(loop: Any, host: str, port: int) -> list[Any]:
            return _infos(*ports)

        monkeypatch.setattr(netio, "_resolve", resolve)
        with pytest.raises(
            httpx2.ConnectError, match="could not connect to example.test:443"
        ) as err:
            await _connect("example.test", 443)
    assert all(f"'127.0.0.1', {port})" in str(err.value) for port in ports)
    assert str(err.value).count(f"Errno {errno.ECONNREFUSED}") == 2
