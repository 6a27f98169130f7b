"""The vendor SDKs on their own aiohttp transports, as ``from_settings`` builds them
(``bot.llm.clients``): connections kept alive, proxies from the environment, TLS with the CA
bundle the environment names, and HTTP framing that must be refused.

Real sockets throughout: the real SDKs against the loopback APIs, behind a relay that counts the
connections made and can end TLS (a throwaway CA, ``trustme``), a plain-http forward proxy, and a
raw server for answers the loopback APIs never send.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import trustme
import uvloop

from bot.llm.base import SDKProvider
from bot.llm.errors import ProviderRequestError, ProviderUnavailable
from bot.llm.registry import build_provider
from bot.llm.types import LLMRequest, Message
from bot.settings import ConfigError, LLMSettings, ModelSpec, load_settings
from tests.provider_rig import collect
from tests.provider_vendors import VENDORS, Vendor, VendorServer
from tests.raw_server import Script, proxy, relay, serve

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.fixture(params=VENDORS, ids=str)
def vendor(request: pytest.FixtureRequest) -> Vendor:
    chosen: Vendor = request.param
    return chosen


@pytest.fixture(autouse=True)
def no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*PROXY_VARIABLES, "SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
async def server(vendor: Vendor) -> AsyncIterator[VendorServer]:
    srv = vendor.new_server()
    await srv.start()
    yield srv
    await srv.close()


def _settings(vendor: Vendor, url: str, retries: int = 0) -> LLMSettings:
    """``url``: the server's bare ``http(s)://host:port``."""
    return LLMSettings.model_validate(
        {
            vendor.key_env: "k",
            vendor.url_env: vendor.url_for(url),
            "CHORUS_LLM_MAX_RETRIES": retries,
        }
    )


def _port(server: VendorServer) -> int:
    port = urlsplit(server.base_url).port
    assert port is not None
    return port


def _bare(server: VendorServer) -> str:
    return f"http://127.0.0.1:{_port(server)}"


def _ask(vendor: Vendor) -> LLMRequest:
    return LLMRequest(model=vendor.model, messages=(Message.user("hi"),))


async def _three_calls_and_a_stream(vendor: Vendor, settings: LLMSettings) -> None:
    provider = vendor.from_settings(settings, None)
    try:
        for _ in range(3):
            assert (await provider.complete(_ask(vendor))).text == "ok"
        _, final = await collect(provider, _ask(vendor))
        assert final.text == "ok"
    finally:
        await provider.aclose()
    assert vendor.client_closed(provider)


# -- connections ------------------------------------------------------------------------------
async def test_calls_and_a_stream_share_one_kept_alive_connection(
    vendor: Vendor, server: VendorServer
) -> None:
    site = await relay(_port(server))
    async with site.server:
        await _three_calls_and_a_stream(vendor, _settings(vendor, site.url.rstrip("/")))
    assert len(server.requests) == 4
    assert len(site.accepted) == 1


def test_the_same_under_uvloop(vendor: Vendor) -> None:
    """``chorus run`` runs on uvloop where it is installed."""

    async def main() -> tuple[int, int]:
        srv = vendor.new_server()
        await srv.start()
        site = await relay(_port(srv))
        try:
            async with site.server:
                await _three_calls_and_a_stream(vendor, _settings(vendor, site.url.rstrip("/")))
        finally:
            await srv.close()
        return len(srv.requests), len(site.accepted)

    assert uvloop.run(main()) == (4, 1)


# -- proxies ----------------------------------------------------------------------------------
@pytest.mark.parametrize("variable", ["HTTP_PROXY", "ALL_PROXY"])
async def test_a_proxy_in_the_environment_carries_every_call(
    vendor: Vendor, server: VendorServer, variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with proxy() as forward:
        monkeypatch.setenv(variable, forward.url)
        await _three_calls_and_a_stream(vendor, _settings(vendor, _bare(server)))
    assert len(server.requests) == 4
    assert len(forward.seen) == 4 and len(forward.accepted) == 1
    assert all(line.split()[1].startswith(_bare(server).encode()) for line in forward.seen)


async def test_a_host_in_no_proxy_is_called_directly(
    vendor: Vendor, server: VendorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with proxy() as forward:
        monkeypatch.setenv("HTTP_PROXY", forward.url)
        monkeypatch.setenv("ALL_PROXY", forward.url)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        await _three_calls_and_a_stream(vendor, _settings(vendor, _bare(server)))
    assert len(server.requests) == 4 and forward.seen == []


async def test_a_proxy_written_in_dotenv_is_not_used(
    vendor: Vendor, server: VendorServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """docs/configuration.md: the proxy variables come from the process's environment, not ``.env`` (the SDKs
    read them; Chorus's settings do not export ``.env``). The call goes straight to the API."""
    async with proxy() as forward:
        for name in (vendor.key_env, vendor.url_env, "CHORUS_MODEL", *vendor.hostile_env):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.chdir(tmp_path)
        (tmp_path / ".env").write_text(
            f"HTTP_PROXY={forward.url}\nALL_PROXY={forward.url}\n"
            f"{vendor.key_env}=k\n{vendor.url_env}={vendor.url_for(_bare(server))}\n",
            encoding="utf-8",
        )
        provider = vendor.from_settings(load_settings().llm, None)
        try:
            assert (await provider.complete(_ask(vendor))).text == "ok"
        finally:
            await provider.aclose()
    assert len(server.requests) == 1 and forward.seen == []


# -- TLS --------------------------------------------------------------------------------------
@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


def _tls(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(context)
    return context


async def test_https_trusts_the_ca_bundle_named_by_ssl_cert_file(
    vendor: Vendor,
    server: VendorServer,
    ca: trustme.CA,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    site = await relay(_port(server), tls=_tls(ca))
    async with site.server:
        await _three_calls_and_a_stream(vendor, _settings(vendor, f"https://localhost:{site.port}"))
    assert len(server.requests) == 4 and len(site.accepted) == 1


async def test_a_certificate_the_trust_store_does_not_know_is_refused(
    vendor: Vendor, server: VendorServer, ca: trustme.CA
) -> None:
    site = await relay(_port(server), tls=_tls(ca))
    async with site.server:
        provider = vendor.from_settings(_settings(vendor, f"https://localhost:{site.port}"), None)
        try:
            with pytest.raises(ProviderUnavailable, match="(?i)certificate"):
                await provider.complete(_ask(vendor))
        finally:
            await provider.aclose()
    assert server.requests == []


async def test_a_ca_bundle_that_cannot_be_loaded_is_named_once_and_not_retried(
    vendor: Vendor, server: VendorServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the user meets: the model's first call fails once, naming the variable and the
    path, not a bare "No such file or directory" retried until the provider gives up."""
    missing = tmp_path / "no-such-ca.pem"
    monkeypatch.setenv("SSL_CERT_FILE", str(missing))
    settings = _settings(vendor, _bare(server), retries=3)
    with pytest.raises(ConfigError) as raised:
        vendor.from_settings(settings, None)
    message = str(raised.value)
    assert f"SSL_CERT_FILE={missing}" in message and "could not be loaded" in message
    lazy = build_provider(ModelSpec(vendor.name, vendor.model), settings)  # as Chorus runs it
    try:
        with pytest.raises(ConfigError, match="SSL_CERT_FILE="):
            await lazy.complete(_ask(vendor))
    finally:
        await lazy.aclose()
    assert server.requests == []


# -- framing ----------------------------------------------------------------------------------
async def test_an_answer_framed_by_both_chunks_and_a_length_is_refused_not_retried(
    vendor: Vendor,
) -> None:
    """A response with ``Transfer-Encoding`` and ``Content-Length`` is how a request smuggled
    past a proxy shows (RFC 9112 section 6.1); aiohttp's parser refuses it."""
    body = b'{"answer": "smuggled"}'
    answer = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
        b"Content-Length: %d\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), len(body), body)
    )
    script = Script([[answer]] * 3)
    site = await serve(script)
    async with site.server:
        provider: SDKProvider = vendor.from_settings(
            _settings(vendor, site.url.rstrip("/"), retries=2), None
        )
        try:
            with pytest.raises(ProviderRequestError, match="Content-Length can't be present"):
                await provider.complete(_ask(vendor))
        finally:
            await provider.aclose()
    assert len(script.requests) == 1
