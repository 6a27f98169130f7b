"""The health server: liveness, readiness against a real Redis that goes down and comes back,
and the Prometheus scrape."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bot.llm.errors import ProviderUnavailable
from bot.llm.fallback import FallbackProvider
from bot.llm.scripted import ScriptedProvider
from bot.ops.health import (
    HealthServer,
    adapter_checks,
    provider_check,
    redis_check,
)
from bot.ops.metrics import Metrics, NullMetrics
from bot.settings import ConfigError, load_settings
from bot.state import connect
from tests.redis_server import free_port, start_redis, stop_redis


class RedisProcess:
    """A private redis-server on a fixed port, so it can be stopped and started again there."""

    def __init__(self, binary: str, workdir: Path) -> None:
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        try:
            self.proc = start_redis(self.binary, self.port, self.workdir)
        except RuntimeError as exc:
            pytest.fail(str(exc))

    def stop(self) -> None:
        if self.proc is not None:
            stop_redis(self.proc)
            self.proc = None


@pytest.fixture
def redis_process(tmp_path: Path) -> Iterator[RedisProcess]:
    binary = shutil.which("redis-server")
    if binary is None:
        reason = "redis-server is not installed; the readiness test needs one it can stop"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true: {reason}", pytrace=False)
        pytest.skip(reason)
    server = RedisProcess(binary, tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def get(http: aiohttp.ClientSession, url: str) -> tuple[int, Any, str]:
    async with http.get(url) as response:
        text = await response.text()
        body = await response.json() if response.content_type == "application/json" else text
        return response.status, body, response.headers.get("Content-Type", "")


class Adapter:
    def __init__(self, platform: str, ready: bool) -> None:
        self.platform = platform
        self.is_ready = ready

    async def ready(self) -> bool:
        return self.is_ready


@pytest.mark.e2e
async def test_readyz_follows_redis_down_and_back(
    redis_process: RedisProcess, http: aiohttp.ClientSession
) -> None:
    client = await connect.open_redis(redis_process.url)
    checks = {"redis": redis_check(client), "llm": provider_check(ScriptedProvider())}
    try:
        async with HealthServer(Metrics(), checks, "127.0.0.1", 0) as server:
            status, body, _ = await get(http, f"{server.url}/readyz")
            assert (status, body["failing"]) == (200, [])
            assert body["checks"] == {"llm": "ok", "redis": "ok"}

            redis_process.stop()
            status, body, _ = await get(http, f"{server.url}/readyz")
            assert status == 503
            assert body == {
                "ready": False,
                "checks": {"llm": "ok", "redis": "failing"},
                "failing": ["redis"],
            }
            status, _, _ = await get(http, f"{server.url}/healthz")
            assert status == 200  # liveness does not depend on Redis

            redis_process.start()  # same port: the client reconnects by itself
            status, body, _ = await get(http, f"{server.url}/readyz")
            assert (status, body["failing"]) == (200, [])
    finally:
        await client.aclose()


async def test_readyz_names_failing_adapters_and_an_exhausted_chain(
    http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    now = [0.0]
    chain = FallbackProvider(
        [
            (
                ScriptedProvider(
                    [ProviderUnavailable("down", provider="a", status=503, attempts=1)]
                ),
                "m",
            )
        ],
        failure_threshold=1,
        cooldown=30,
        clock=lambda: now[0],
    )

    async def raising() -> bool:
        raise RuntimeError("probe broke")

    checks = {
        "llm": provider_check(chain),
        "boom": raising,
        **adapter_checks([Adapter("twitch", False), Adapter("discord", True), object()]),
    }
    async with HealthServer(NullMetrics(), checks, "127.0.0.1", 0) as server:
        with caplog.at_level(logging.WARNING, logger="chorus.health"):
            status, body, _ = await get(http, f"{server.url}/readyz")
        assert status == 503
        assert body["failing"] == ["adapter:twitch", "boom"]
        assert body["checks"]["adapter:discord"] == "ok"
        assert any(r.exc_info for r in caplog.records if "raised" in r.getMessage())

        with pytest.raises(ProviderUnavailable):
            await chain.complete(_request())
        status, body, _ = await get(http, f"{server.url}/readyz")
        assert "llm" in body["failing"]  # every model of the chain is cooling down
        now[0] = 30.0
        status, body, _ = await get(http, f"{server.url}/readyz")
        assert "llm" not in body["failing"]  # the cool-down is over: the next call probes

        server.add_check("boom", _true)
        server.add_check("adapter:twitch", _true)
        status, body, _ = await get(http, f"{server.url}/readyz")
        assert status == 200


async def test_metrics_scrape_shows_counters_moving(http: aiohttp.ClientSession) -> None:
    metrics = Metrics()
    async with HealthServer(metrics, {}, "127.0.0.1", 0) as server:
        status, text, content_type = await get(http, f"{server.url}/metrics")
        assert status == 200 and content_type.startswith("text/plain")
        before = _value(text, "chorus_messages_in_total", platform="slack")
        metrics.message_in("slack")
        metrics.message_in("slack")
        _, text, _ = await get(http, f"{server.url}/metrics")
        assert _value(text, "chorus_messages_in_total", platform="slack") == before + 2
        assert "process_cpu_seconds_total" in text or "python_info" in text

        headers = {"Accept": "application/openmetrics-text; version=1.0.0"}
        async with http.get(f"{server.url}/metrics", headers=headers) as response:
            assert response.headers["Content-Type"].startswith("application/openmetrics-text")
            assert (await response.text()).rstrip().endswith("# EOF")


async def test_healthz_and_metrics_off(http: aiohttp.ClientSession) -> None:
    async with HealthServer(NullMetrics(), {}, "127.0.0.1", 0) as server:
        status, body, _ = await get(http, f"{server.url}/healthz")
        assert (status, body) == (200, {"status": "ok"})
        status, _, _ = await get(http, f"{server.url}/metrics")
        assert status == 404
        status, body, _ = await get(http, f"{server.url}/readyz")
        assert (status, body["ready"]) == (200, True)  # no checks: nothing can fail


async def test_stop_frees_the_port_and_is_idempotent(http: aiohttp.ClientSession) -> None:
    server = HealthServer(NullMetrics(), {}, "127.0.0.1", 0)
    await server.start()
    await server.start()  # a second start is a no-op
    url = f"{server.url}/healthz"
    assert (await get(http, url))[0] == 200
    await server.aclose()
    await server.aclose()
    with pytest.raises(aiohttp.ClientConnectionError):
        await get(http, url)


async def test_a_busy_port_is_a_config_error() -> None:
    async with HealthServer(NullMetrics(), {}, "127.0.0.1", 0) as first:
        second = HealthServer(NullMetrics(), {}, "127.0.0.1", first.port)
        with pytest.raises(ConfigError, match="CHORUS_HEALTH_PORT"):
            await second.start()


def test_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings().health
    assert (settings.host, settings.port, settings.enabled) == ("0.0.0.0", 9464, True)
    monkeypatch.setenv("CHORUS_HEALTH_PORT", "0")
    settings = load_settings().health
    assert HealthServer.from_settings(settings, NullMetrics()) is None
    monkeypatch.setenv("CHORUS_HEALTH_PORT", "70000")
    with pytest.raises(ConfigError, match="CHORUS_HEALTH_PORT"):
        load_settings()
    monkeypatch.setenv("CHORUS_HEALTH_PORT", "9999")
    monkeypatch.setenv("CHORUS_HEALTH_HOST", "127.0.0.1")
    server = HealthServer.from_settings(load_settings().health, NullMetrics())
    assert server is not None and (server.host, server.port) == ("127.0.0.1", 9999)


async def _true() -> bool:
    return True


def _request() -> Any:
    from bot.llm.types import LLMRequest, Message

    return LLMRequest(model="m", messages=(Message.user("hi"),))


def _value(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return 0.0
