"""The provider contract, part two: failures, retries, the guard and settings, for every vendor.

One ``RetryPolicy`` governs all three vendors (the SDKs' own retries are off), so the server's
request count proves how often we tried and the injected ``sleep`` records every backoff:
nothing here waits on the clock except the timeout test, whose limit is a setting under test.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest
from aiohttp import web

from bot.llm import guard
from bot.llm.base import SDKProvider
from bot.llm.errors import (
    ProviderAuthError,
    ProviderRequestError,
    ProviderUnavailable,
    RealVendorCallBlocked,
)
from bot.llm.types import TextDelta
from bot.settings import ConfigError, LLMSettings
from tests.loopback.base import LoopbackServer
from tests.provider_rig import (
    RETRY,
    RecordingSleep,
    ask,
    collect,
)
from tests.provider_vendors import ANTHROPIC, OPENAI, Vendor, VendorServer

ATTEMPTS = RETRY.max_retries + 1


# -- HTTP errors -----------------------------------------------------------------------------
async def test_429_honours_retry_after_and_repeats_the_same_request(
    vendor: Vendor, provider: SDKProvider, server: VendorServer, sleep: RecordingSleep
) -> None:
    server.fail(429, "slow down", headers={"Retry-After": "7"})
    response = await provider.complete(ask(vendor))
    assert response.text == "ok"
    assert sleep.delays == [7.0]
    assert len(server.requests) == 2
    assert server.bodies[0] == server.bodies[1]


async def test_retry_after_ms_is_preferred_over_retry_after(
    vendor: Vendor, provider: SDKProvider, server: VendorServer, sleep: RecordingSleep
) -> None:
    server.fail(429, "slow down", headers={"retry-after-ms": "2500", "retry-after": "9"})
    await provider.complete(ask(vendor))
    assert sleep.delays == [2.5]


@pytest.mark.parametrize("status", [401, 403])
async def test_auth_failures_name_the_key_variable_and_are_not_retried(
    vendor: Vendor,
    provider: SDKProvider,
    server: VendorServer,
    sleep: RecordingSleep,
    status: int,
) -> None:
    server.fail(status, "invalid key")
    with pytest.raises(ProviderAuthError) as info:
        await provider.complete(ask(vendor))
    assert vendor.key_env in str(info.value)
    assert info.value.key_env == vendor.key_env
    assert info.value.status == status
    assert len(server.requests) == 1
    assert sleep.delays == []


@pytest.mark.parametrize("status", [500, 503, 529])
async def test_server_errors_are_retried_max_retries_times_then_unavailable(
    vendor: Vendor,
    provider: SDKProvider,
    server: VendorServer,
    sleep: RecordingSleep,
    status: int,
) -> None:
    for _ in range(ATTEMPTS):
        server.fail(status, "overloaded")
    with pytest.raises(ProviderUnavailable) as info:
        await provider.complete(ask(vendor))
    assert info.value.status == status
    assert info.value.attempts == ATTEMPTS
    assert len(server.requests) == ATTEMPTS  # exactly our attempts: the SDK did not add any
    assert len(sleep.delays) == RETRY.max_retries
    assert all(0 < d <= RETRY.max_delay for d in sleep.delays)


async def test_one_server_error_then_success_answers(
    vendor: Vendor, provider: SDKProvider, server: VendorServer, sleep: RecordingSleep
) -> None:
    server.fail(529, "Overloaded")
    assert (await provider.complete(ask(vendor))).text == "ok"
    assert len(server.requests) == 2 and len(sleep.delays) == 1


async def test_400_is_a_request_error_with_the_servers_reason_and_not_retried(
    vendor: Vendor, provider: SDKProvider, server: VendorServer, sleep: RecordingSleep
) -> None:
    server.fail(400, "max_tokens: must be positive")
    with pytest.raises(ProviderRequestError) as info:
        await provider.complete(ask(vendor))
    assert not isinstance(info.value, ProviderAuthError)
    assert "max_tokens: must be positive" in str(info.value)
    assert info.value.status == 400
    assert len(server.requests) == 1
    assert sleep.delays == []


@pytest.mark.parametrize("sdk_vendor", [ANTHROPIC, OPENAI], ids=str)
async def test_x_should_retry_false_stops_retries(sdk_vendor: Vendor) -> None:
    """Anthropic and OpenAI say explicitly when a retry cannot help (Gemini has no such header)."""
    srv = sdk_vendor.new_server()
    await srv.start()
    built, close = sdk_vendor.new_provider(srv.base_url, "k", RETRY, RecordingSleep())
    srv.fail(500, "do not retry", headers={"x-should-retry": "false"})
    try:
        with pytest.raises(ProviderRequestError):
            await built.complete(ask(sdk_vendor))
    finally:
        await close()
        await srv.close()
    assert len(srv.requests) == 1


# -- the connection --------------------------------------------------------------------------
async def test_connection_refused_is_retried_then_unavailable(
    vendor: Vendor, sleep: RecordingSleep
) -> None:
    srv = vendor.new_server()
    await srv.start()
    url = srv.base_url
    await srv.close()  # nothing listens there any more
    built, close = vendor.new_provider(url, "k", RETRY, sleep)
    try:
        with pytest.raises(ProviderUnavailable) as info:
            await built.complete(ask(vendor))
    finally:
        await close()
    assert info.value.status is None
    assert info.value.attempts == ATTEMPTS
    assert len(sleep.delays) == RETRY.max_retries


async def test_dropped_connections_are_retried_by_us_only(
    vendor: Vendor, sleep: RecordingSleep
) -> None:
    connections = 0

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        writer.close()

    tcp = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = tcp.sockets[0].getsockname()[1]
    built, close = vendor.new_provider(
        vendor.url_for(f"http://127.0.0.1:{port}"), "k", RETRY, sleep
    )
    try:
        with pytest.raises(ProviderUnavailable) as info:
            await built.complete(ask(vendor))
    finally:
        await close()
        tcp.close()
        await tcp.wait_closed()
    assert info.value.attempts == ATTEMPTS
    assert connections == ATTEMPTS  # an SDK that reconnected by itself would show here
    assert len(sleep.delays) == RETRY.max_retries


class StalledServer(LoopbackServer):
    """Records every request and answers none until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    def routes(self) -> list[web.RouteDef]:
        return [web.route("*", "/{tail:.*}", self._stall)]

    async def _stall(self, request: web.Request) -> web.StreamResponse:
        await self.record(request)
        await self.release.wait()
        return web.json_response({})


@pytest.fixture
async def stalled() -> AsyncIterator[StalledServer]:
    srv = StalledServer()
    await srv.start()
    yield srv
    srv.release.set()
    await srv.close()


async def test_the_timeout_from_settings_ends_a_stalled_call_and_is_retried(
    vendor: Vendor, stalled: StalledServer
) -> None:
    settings = LLMSettings.model_validate(
        {
            vendor.key_env: "k",
            vendor.url_env: vendor.url_for(stalled.url),
            "CHORUS_LLM_TIMEOUT": 0.5,  # long enough for a loaded machine to deliver each request
            "CHORUS_LLM_MAX_RETRIES": 1,
        }
    )
    built = vendor.from_settings(settings, None)
    try:
        with pytest.raises(ProviderUnavailable) as info:
            await built.complete(ask(vendor))
    finally:
        stalled.release.set()
        await built.aclose()
    assert info.value.attempts == 2
    assert len(stalled.requests) == 2


# -- streams ---------------------------------------------------------------------------------
async def test_a_stream_is_retried_after_a_503_before_the_first_byte(
    vendor: Vendor, provider: SDKProvider, server: VendorServer, sleep: RecordingSleep
) -> None:
    server.fail(503, "unavailable", headers={"Retry-After": "2"})
    server.replies.append("recovered fine")
    deltas, final = await collect(provider, ask(vendor))
    assert "".join(deltas) == final.text == "recovered fine"
    assert sleep.delays == [2.0]
    assert [r.path for r in server.requests] == [vendor.path(vendor.model, True)] * 2


async def test_an_error_event_after_text_raises_instead_of_repeating_it(
    vendor: Vendor, provider: SDKProvider, server: VendorServer, sleep: RecordingSleep
) -> None:
    server.replies.append(vendor.stream_error("half an"))
    seen: list[str] = []
    with pytest.raises(ProviderUnavailable, match=vendor.stream_error_match):
        async for event in provider.stream(ask(vendor)):
            if isinstance(event, TextDelta):
                seen.append(event.text)
    assert "".join(seen) == "half an"
    assert len(server.requests) == 1  # text already reached the caller: no silent retry
    assert sleep.delays == []


@pytest.mark.parametrize("sse_vendor", [ANTHROPIC, OPENAI], ids=str)
@pytest.mark.parametrize("cut", ["error", "cut"])
async def test_a_stream_broken_before_any_text_is_retried(sse_vendor: Vendor, cut: str) -> None:
    """A retryable error event, or a stream that just ends, before any text: try again."""
    srv = sse_vendor.new_server()
    await srv.start()
    built, close = sse_vendor.new_provider(srv.base_url, "k", RETRY, RecordingSleep())
    srv.replies.append(sse_vendor.stream_error("") if cut == "error" else {"stream_cut": True})
    srv.replies.append("second try")
    try:
        _, final = await collect(built, ask(sse_vendor))
    finally:
        await close()
        await srv.close()
    assert final.text == "second try"
    assert len(srv.requests) == 2


@pytest.mark.parametrize("sse_vendor", [ANTHROPIC, OPENAI], ids=str)
async def test_a_stream_cut_after_text_raises_instead_of_a_truncated_answer(
    sse_vendor: Vendor,
) -> None:
    srv = sse_vendor.new_server()
    await srv.start()
    built, close = sse_vendor.new_provider(srv.base_url, "k", RETRY, RecordingSleep())
    srv.replies.append({"text": "half an answer", "stream_cut": True})
    try:
        with pytest.raises(ProviderUnavailable, match="ended"):
            await collect(built, ask(sse_vendor))
    finally:
        await close()
        await srv.close()
    assert len(srv.requests) == 1


# -- guard -----------------------------------------------------------------------------------
@pytest.fixture
def blocked() -> Iterator[None]:
    was_blocked = guard.real_calls_blocked()
    guard.block_real_calls()
    yield None
    if not was_blocked:
        guard.allow_real_calls()


async def test_the_guard_blocks_the_real_api_before_any_request(
    blocked: None, vendor: Vendor, server: VendorServer
) -> None:
    built, sent, close = vendor.real_host_provider(server)
    try:
        with pytest.raises(RealVendorCallBlocked):
            await built.complete(ask(vendor))
        with pytest.raises(RealVendorCallBlocked):
            await collect(built, ask(vendor))
    finally:
        await close()
    assert sent() == 0


async def test_the_guard_lets_loopback_calls_through(
    blocked: None, vendor: Vendor, provider: SDKProvider
) -> None:
    assert (await provider.complete(ask(vendor))).text == "ok"


# -- settings and lifecycle ------------------------------------------------------------------
async def test_from_settings_uses_the_settings_not_the_environment(
    vendor: Vendor, server: VendorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(vendor.key_env, "env-key")
    monkeypatch.setenv(vendor.url_env, vendor.url_for("http://127.0.0.1:9"))
    for name, value in vendor.hostile_env.items():
        monkeypatch.setenv(name, value)
    settings = LLMSettings.model_validate(
        {
            vendor.key_env: "settings-key",
            vendor.url_env: server.base_url,
            "CHORUS_LLM_MAX_RETRIES": 3,
        }
    )
    built = vendor.from_settings(settings, None)
    try:
        response = await built.complete(ask(vendor))
    finally:
        await built.aclose()
    assert response.text == "ok"
    assert built.retry.max_retries == 3
    (rec,) = server.requests
    assert vendor.key_sent(rec) == "settings-key"
    assert vendor.client_closed(built)  # the provider made the client, so it closes it


async def test_aclose_leaves_an_injected_client_open(vendor: Vendor, provider: SDKProvider) -> None:
    await provider.aclose()
    assert not vendor.client_closed(provider)
    assert (await provider.complete(ask(vendor))).text == "ok"


def test_from_settings_without_a_key_names_the_variable(
    vendor: Vendor, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in (vendor.key_env, vendor.url_env, *vendor.hostile_env):
        monkeypatch.delenv(name, raising=False)
    settings = LLMSettings()  # sections never read the environment themselves
    with pytest.raises(ConfigError, match=vendor.key_env):
        vendor.from_settings(settings, None)
