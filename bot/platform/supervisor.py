"""Supervised adapters: one platform that fails, or finishes, never takes the others down.

Why: were ``chorus run`` to end when its first adapter did, a YouTube chat that ended (a
clean return) would stop Twitch too, and one adapter's crash would end every platform. So each
adapter runs in its own ``Slot`` under ``Supervisor.run``:

- an adapter that **raises** is closed, then rebuilt (a fresh instance from its factory: an SDK
  client is not reusable after close) and started again after a backoff from the shared
  ``RetryPolicy`` (``bot.resilience``), which grows while it keeps failing and starts over once
  it has run ``healthy_after`` seconds;
- an adapter that **returns** (a live chat that ended) is restarted the same way, so it looks
  for the next broadcast by itself;
- an adapter that raises ``ConfigError`` (a revoked token, a refused intent) is **failed**: it
  is not restarted, the others go on, and the error is logged once with the variable to fix.

The process ends on a signal, or when every adapter has failed: then ``run`` raises one
``ConfigError`` naming each, so a deployment with a single misconfigured platform still stops
with its clear message. Each slot is a readiness check (``adapter:<platform>`` on ``/readyz``):
ready while its adapter runs and is connected, as its ``ready()`` reads from its SDK (every
platform adapter has one; the console has none and is ready while it runs).

Parts: an adapter made of independent connections (Discord's shards) lists them in
``parts()`` (name -> connected), with ``restart_part(name)``. While it runs, the supervisor
looks at the parts every ``part_every`` seconds, and a part that stayed down ``part_grace``
seconds is restarted alone: the adapter and its other parts are not touched. The SDK's own
reconnect comes first (a part is only restarted once that has not brought it back), so this is
the net under it, not a second reconnect loop. ``expected_parts()`` names the parts known before
connecting; each becomes its own readiness check (``adapter:<platform>:<part>``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from bot.platform.protocol import PlatformAdapter
from bot.resilience import RetryPolicy
from bot.settings import ConfigError

log = logging.getLogger("chorus.supervisor")

AdapterFactory = Callable[[], PlatformAdapter]
Sleep = Callable[[float], Awaitable[None]]

RESTART_POLICY = RetryPolicy(base_delay=1.0, max_delay=120.0)
HEALTHY_AFTER = 60.0  # seconds of running after which a restart counts as a first failure
PART_GRACE = 60.0  # seconds a part (a shard) may stay down before it is restarted alone
PART_EVERY = 5.0  # seconds between two looks at the parts


class State(StrEnum):
    RUNNING = "running"
    RESTARTING = "restarting"
    FAILED = "failed"


@dataclass
class Slot:
    """One platform: its current adapter, how to build the next one, and how it has fared."""

    adapter: PlatformAdapter
    build: AdapterFactory
    state: State = State.RUNNING
    restarts: int = 0
    part_restarts: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    _closed: bool = field(default=False, repr=False)

    @property
    def platform(self) -> str:
        return self.adapter.platform

    async def ready(self) -> bool:
        """Running, and connected where the adapter knows (an adapter with ``ready()``)."""
        if self.state is not State.RUNNING:
            return False
        check = getattr(self.adapter, "ready", None)
        return bool(await check()) if check is not None else True

    def part_names(self) -> list[str]:
        """The parts the adapter names before connecting (Discord: its configured shards)."""
        expected = getattr(self.adapter, "expected_parts", None)
        return list(expected()) if expected is not None else []

    async def part_ready(self, name: str) -> bool:
        """Running, and that part of the current adapter connected."""
        check = getattr(self.adapter, "part_ready", None)
        return self.state is State.RUNNING and check is not None and bool(await check(name))

    async def close(self) -> None:
        """Close the current adapter, once however often it is asked."""
        if self._closed:
            return
        self._closed = True
        try:
            await self.adapter.aclose()
        except Exception:
            log.exception("closing an adapter failed", extra={"platform": self.platform})

    def renew(self) -> None:
        """Replace the closed adapter with a fresh one (``ConfigError`` if it cannot be built)."""
        self.adapter = self.build()
        self._closed = False
        self.restarts += 1
        self.state = State.RUNNING

    def fail(self, error: str) -> None:
        self.state, self.error = State.FAILED, error


class Supervisor:
    def __init__(
        self,
        slots: Sequence[Slot],
        *,
        policy: RetryPolicy = RESTART_POLICY,
        healthy_after: float = HEALTHY_AFTER,
        sleep: Sleep = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        part_grace: float = PART_GRACE,
        part_every: float = PART_EVERY,
    ) -> None:
        self.slots = list(slots)
        self.policy = policy
        self.healthy_after = healthy_after
        self.part_grace = part_grace
        self.part_every = part_every
        self._sleep = sleep
        self._clock = clock
        self._stopping = False

    async def run(self) -> None:
        """Keep every adapter running; return only when each has failed (``ConfigError``)."""
        if not self.slots:
            await asyncio.Event().wait()  # a worker or nothing configured: wait for the signal
        tasks = [
            asyncio.create_task(self._keep(s), name=f"adapter:{s.platform}") for s in self.slots
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._stopping:
            return
        problems = [f"{slot.platform}: {slot.error}" for slot in self.slots]
        raise ConfigError("every platform adapter failed:\n  " + "\n  ".join(problems))

    async def aclose(self) -> None:
        """Close each current adapter (once); an adapter that returns now is not restarted."""
        self._stopping = True
        for slot in self.slots:
            await slot.close()

    async def _keep(self, slot: Slot) -> None:
        failures = 0
        while True:
            started = self._clock()
            watch = self._watch_parts(slot)
            try:
                await slot.adapter.run()
                reason = "finished"
            except ConfigError as exc:
                slot.fail(str(exc))
                log.error(
                    "adapter misconfigured; not restarted (the other platforms go on)",
                    extra={"platform": slot.platform, "error": str(exc)},
                )
                await slot.close()
                return
            except Exception as exc:
                if self._stopping:
                    return
                reason = f"{type(exc).__name__}: {exc}"
                log.exception("adapter crashed", extra={"platform": slot.platform})
            finally:
                if watch is not None:
                    watch.cancel()
            if self._stopping:
                return
            slot.state = State.RESTARTING
            await slot.close()
            failures = 1 if self._clock() - started >= self.healthy_after else failures + 1
            delay = self.policy.delay(failures)
            log.warning(
                "adapter stopped; restarting",
                extra={
                    "platform": slot.platform,
                    "reason": reason,
                    "attempt": failures,
                    "delay_s": round(delay, 3),
                },
            )
            await self._sleep(delay)
            if self._stopping:  # closed while waiting: a new adapter now would never be closed
                return
            try:
                slot.renew()
            except ConfigError as exc:  # the settings cannot have changed; but never loop on it
                slot.fail(str(exc))
                log.error("adapter cannot be rebuilt", extra={"platform": slot.platform})
                return

    def _watch_parts(self, slot: Slot) -> asyncio.Task[None] | None:
        """While the adapter runs: restart alone each part down for ``part_grace`` seconds."""
        if getattr(slot.adapter, "parts", None) is None:
            return None
        return asyncio.create_task(self._parts_loop(slot), name=f"parts:{slot.platform}")

    async def _parts_loop(self, slot: Slot) -> None:
        adapter: Any = slot.adapter
        down_since: dict[str, float] = {}
        while True:
            await self._sleep(self.part_every)
            now = self._clock()
            for name, up in dict(adapter.parts()).items():
                if up:
                    down_since.pop(name, None)
                    continue
                since = down_since.setdefault(name, now)
                if now - since < self.part_grace:
                    continue
                down_since.pop(name, None)
                slot.part_restarts[name] = slot.part_restarts.get(name, 0) + 1
                log.warning(
                    "adapter part down; restarting it alone",
                    extra={"platform": slot.platform, "part": name, "down_s": round(now - since)},
                )
                try:
                    await adapter.restart_part(name)
                except Exception:
                    log.exception(
                        "restarting an adapter part failed",
                        extra={"platform": slot.platform, "part": name},
                    )
