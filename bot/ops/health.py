"""Liveness, readiness and Prometheus metrics over a small aiohttp server.

Why three endpoints, the Kubernetes way:

- ``/healthz`` is liveness: 200 whenever the event loop answers. It checks nothing else, so an
  outage of Redis or of a vendor never gets a healthy process restarted (a restart cannot fix
  either, and restarting every replica at once makes an outage worse).
- ``/readyz`` is readiness: 200 only when every check passes, else 503 with a JSON body naming
  the failing ones. The checks: the state store answers a PING (``bot.state.connect.ping``), the LLM
  provider is configured and, when it is a fallback chain, not every model of it is in its
  circuit breaker's cool-down (no network call to a vendor: that would spend money and rate
  limit on every probe; the breaker state is the cached "recent calls succeeded, or none was
  made" status), and each adapter that has an ``async ready() -> bool`` says it is connected.
- ``/metrics`` is the Prometheus text format (OpenMetrics when the scraper asks for it).

``CHORUS_HEALTH_PORT`` (default 9464, the port commonly used for Prometheus exporters) and
``CHORUS_HEALTH_HOST`` (default ``0.0.0.0``, so a scraper or kubelet outside the container can
reach it) configure it; port ``0`` turns the server off. The server answers nothing that needs
authentication and exposes no secret, but bind it to ``127.0.0.1`` when the host is shared.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import Protocol, runtime_checkable

from aiohttp import web

from bot.ops.metrics import Metrics, NullMetrics
from bot.settings import ConfigError, HealthSettings
from bot.settings.ops import DEFAULT_HEALTH_PORT
from bot.state import connect
from bot.state.client import Redis

log = logging.getLogger("chorus.health")

Check = Callable[[], Awaitable[bool]]

DEFAULT_PORT = DEFAULT_HEALTH_PORT


@runtime_checkable
class Readiness(Protocol):
    """Anything (an adapter, a provider) that can say whether it is ready to work."""

    async def ready(self) -> bool: ...


# -- checks ---------------------------------------------------------------------------------------
def redis_check(client: Redis) -> Check:
    """Ready while the state store answers a PING within a couple of seconds."""

    async def check() -> bool:
        return await connect.ping(client)

    return check


def provider_check(provider: object) -> Check:
    """Ready when a provider is configured (it exists) and, if it can tell (``ready()``, e.g.
    the fallback chain's breakers), says so. Never calls the vendor."""

    async def check() -> bool:
        return await provider.ready() if isinstance(provider, Readiness) else True

    return check


def adapter_checks(adapters: Iterable[object]) -> dict[str, Check]:
    """``adapter:<platform>`` checks for the adapters that have ``async ready()``, and
    ``adapter:<platform>:<part>`` for each part a supervised slot names (Discord's shards)."""
    checks: dict[str, Check] = {}
    for adapter in adapters:
        if isinstance(adapter, Readiness):
            platform = getattr(adapter, "platform", type(adapter).__name__)
            checks[f"adapter:{platform}"] = adapter.ready
        part_names = getattr(adapter, "part_names", None)
        part_ready = getattr(adapter, "part_ready", None)
        if part_names is not None and part_ready is not None:
            for part in part_names():  # each of a sharded adapter's shards on its own
                checks[f"adapter:{platform}:{part}"] = _part_check(part_ready, part)
    return checks


def _part_check(part_ready: Callable[[str], Awaitable[bool]], part: str) -> Check:
    async def check() -> bool:
        return await part_ready(part)

    return check


# -- the server -----------------------------------------------------------------------------------
class HealthServer:
    """``async with HealthServer(metrics, checks, host, port):`` serves until the block ends.

    Port 0 binds a free port (see ``port`` after ``start``); ``from_settings`` returns None when
    ``CHORUS_HEALTH_PORT=0`` turns the server off.
    """

    def __init__(
        self,
        metrics: Metrics | NullMetrics,
        checks: Mapping[str, Check] | None = None,
        host: str = "0.0.0.0",
        port: int = DEFAULT_PORT,
        *,
        check_timeout: float = 5.0,
    ) -> None:
        self.metrics = metrics
        self.checks: dict[str, Check] = dict(checks or {})
        self.host = host
        self.check_timeout = check_timeout
        self._port = port
        self._runner: web.AppRunner | None = None

    @classmethod
    def from_settings(
        cls,
        settings: HealthSettings,
        metrics: Metrics | NullMetrics,
        checks: Mapping[str, Check] | None = None,
    ) -> HealthServer | None:
        if not settings.enabled:
            return None
        return cls(metrics, checks, settings.host, settings.port)

    def add_check(self, name: str, check: Check) -> None:
        """Add (or replace) a readiness check, also while serving (adapters come later)."""
        self.checks[name] = check

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{host}:{self._port}"

    async def start(self) -> None:
        if self._runner is not None:
            return
        app = web.Application()
        app.add_routes(
            [
                web.get("/healthz", self._healthz),
                web.get("/readyz", self._readyz),
                web.get("/metrics", self._metrics),
            ]
        )
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self._port)
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise ConfigError(
                f"the health server cannot listen on {self.host}:{self._port} ({exc.strerror}); "
                "set CHORUS_HEALTH_PORT to a free port, or 0 to turn it off"
            ) from None
        self._runner = runner
        self._port = int(runner.addresses[0][1])
        log.info("health server listening", extra={"url": self.url})

    async def aclose(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> HealthServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def readiness(self) -> dict[str, bool]:
        """Every check's verdict, run concurrently; a raising or slow check is failing."""
        names = list(self.checks)
        verdicts = await asyncio.gather(*(self._run(n, self.checks[n]) for n in names))
        return dict(zip(names, verdicts, strict=True))

    async def _run(self, name: str, check: Check) -> bool:
        try:
            async with asyncio.timeout(self.check_timeout):
                return bool(await check())
        except TimeoutError:
            log.warning("readiness check timed out", extra={"check": name})
        except Exception:
            log.warning("readiness check raised", extra={"check": name}, exc_info=True)
        return False

    # -- handlers -------------------------------------------------------------------------------
    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _readyz(self, request: web.Request) -> web.Response:
        verdicts = await self.readiness()
        failing = sorted(name for name, ok in verdicts.items() if not ok)
        body = {
            "ready": not failing,
            "checks": {name: "ok" if ok else "failing" for name, ok in sorted(verdicts.items())},
            "failing": failing,
        }
        return web.json_response(body, status=503 if failing else 200)

    async def _metrics(self, request: web.Request) -> web.Response:
        if not isinstance(self.metrics, Metrics):
            return web.Response(status=404, text="metrics are off\n")
        body, content_type = await self.metrics.render(request.headers.get("Accept", ""))
        return web.Response(body=body, headers={"Content-Type": content_type})
