"""Plugin timers: ``@every("10m")`` and ``@cron("0 9 * * 1-5")``, once per firing everywhere.

Every worker runs every timer's schedule, and the firings are the same instants everywhere: an
``every`` period counts from the epoch (``every("10m")`` fires at :00, :10, :20...), a ``cron``
expression (``croniter``, in UTC) names its instants. At each one the workers race to claim that
firing in the store (``bot.state.plugin_store.TimerClaims``: ``SET NX`` with a TTL past the next
firing) and only the winner runs the handler, so a timer fires once per period across all
workers, and a worker that died simply stops claiming: the next firing is another's, within one
period. A firing whose handler is still running from the last time is left to the others.

A handler is ``async def f(ctx: TimerContext) -> None``, run like an event handler (a time
limit, whatever it raises contained, logged and counted: ``chorus_plugin_timers_total{plugin,
timer,outcome}``). Timers run where the router does (``chorus run``, ``--role worker``/``all``,
``chorus chat``), never in a gateway.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol, TypeVar

from croniter import croniter
from pydantic import BaseModel

from bot.events import ConversationKey
from bot.plugins.context import PluginServices
from bot.plugins.events import contained
from bot.plugins.store import PluginStore

log = logging.getLogger("chorus.plugins")

M = TypeVar("M", bound=BaseModel)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
MIN_PERIOD = 1.0


def parse_period(text: str | float) -> float:
    """``"10m"``, ``"1h30m"``, ``"2s"`` or a number of seconds -> seconds (at least 1)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        seconds = float(text)
    else:
        spec = str(text).replace(" ", "").lower()
        parts = _DURATION.findall(spec)
        if not parts or "".join(n + u for n, u in parts) != spec:
            raise ValueError(f"every({text!r}): write a duration like 30s, 10m, 1h30m or 1d")
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not math.isfinite(seconds) or seconds < MIN_PERIOD:
        raise ValueError(f"every({text!r}): the period must be at least {MIN_PERIOD:g} second")
    return seconds


@dataclass(frozen=True)
class TimerContext:
    """What a timer handler gets: when this firing is, and the plugin's store and settings."""

    timer: str
    at: datetime  # the firing's instant (UTC), the same in every worker
    services: PluginServices | None = None

    @property
    def store(self) -> PluginStore:
        """The plugin's storage (``shared``, ``for_channel(...)``: a timer has no message)."""
        return self._services().store(None)

    def settings(self, model: type[M]) -> M:
        """The plugin's ``@settings`` model with the deployment's values."""
        return self._services().settings(model)

    def settings_for(
        self, model: type[M], platform: str, channel: str, server: str | None = None
    ) -> M:
        """The ``@settings`` model with its values for one place (its scopes'
        ``[scope.plugins.NAME]`` over ``[plugins.NAME]``), as a message there would get them."""
        return self._services().settings_at(model, platform, server, channel)

    async def send(self, conversation: ConversationKey, text: str) -> None:
        """Send ``text`` to ``conversation``, through the outbound check and the platform's
        sending chokepoint."""
        await self._services().send(conversation, text)

    async def ask(
        self, prompt: str, *, system: str | None = None, max_tokens: int | None = None
    ) -> str:
        """The configured model's answer to ``prompt`` (against the daily cost cap)."""
        return await self._services().ask(prompt, system=system, max_tokens=max_tokens)

    def _services(self) -> PluginServices:
        if self.services is None:
            raise RuntimeError("this context has no plugin services (the bot is not running)")
        return self.services


TimerFunction = Callable[[TimerContext], Awaitable[object]]


@dataclass(frozen=True)
class Timer:
    """A schedule (``period`` seconds, or a ``cron`` expression) and its handler."""

    func: TimerFunction
    period: float | None = None
    cron: str | None = None
    timeout: float | None = None
    name: str = field(default="")

    def __post_init__(self) -> None:
        if not inspect.iscoroutinefunction(self.func):
            raise TypeError("a timer handler must be an `async def` function")
        if not self.name:
            object.__setattr__(self, "name", getattr(self.func, "__name__", "timer"))
        if (self.period is None) == (self.cron is None):
            raise ValueError(f"timer {self.name}: give a period or a cron expression")
        if self.cron is not None and not croniter.is_valid(self.cron):
            raise ValueError(f"timer {self.name}: {self.cron!r} is not a cron expression")
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError(f"timer {self.name}: timeout must be positive")

    def next_firing(self, now: float) -> tuple[float, float]:
        """The first firing after ``now`` (epoch seconds) and the gap to the one after it."""
        if self.period is not None:
            return (math.floor(now / self.period) + 1) * self.period, self.period
        schedule = croniter(str(self.cron), datetime.fromtimestamp(now, UTC))
        first = float(schedule.get_next(float))
        return first, float(schedule.get_next(float)) - first

    @property
    def schedule(self) -> str:
        return f"every {self.period:g}s" if self.period is not None else f"cron {self.cron}"


def every(
    period: str | float, *, timeout: float | None = None, name: str | None = None
) -> Callable[[TimerFunction], Timer]:
    """``@every("10m")`` on ``async def f(ctx: TimerContext)``: fires every period (counted
    from the epoch, so at the same instants in every worker), once across all workers."""
    seconds = parse_period(period)
    return lambda f: Timer(f, period=seconds, timeout=timeout, name=name or "")


def cron(
    expression: str, *, timeout: float | None = None, name: str | None = None
) -> Callable[[TimerFunction], Timer]:
    """``@cron("0 9 * * 1-5")``: fires at the expression's instants (UTC), once across all
    workers."""
    return lambda f: Timer(f, cron=expression, timeout=timeout, name=name or "")


class Claims(Protocol):
    async def take(self, plugin: str, timer: str, slot: int, worker: str, ttl_ms: int) -> bool: ...


@dataclass(frozen=True)
class Scheduled:
    plugin: str
    timer: Timer
    services: PluginServices | None = None


class PluginTimers:
    """Every plugin timer of one process; ``start`` runs them, ``aclose`` stops them."""

    def __init__(
        self,
        timers: Sequence[Scheduled],
        claims: Claims,
        *,
        worker: str,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._timers = list(timers)
        self._claims = claims
        self._worker = worker
        self._timeout = timeout
        self._clock = clock
        self._loops: dict[tuple[str, str], asyncio.Task[None]] = {}  # (plugin, timer)
        self._started = False
        self._runs: dict[tuple[str, str], asyncio.Task[None]] = {}
        self.counts: Counter[tuple[str, str, str]] = Counter()  # (plugin, timer, outcome)

    def __bool__(self) -> bool:
        return bool(self._timers)

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        for entry in self._timers:
            self._begin(entry)

    def _begin(self, entry: Scheduled) -> None:
        name = f"timer:{entry.plugin}:{entry.timer.name}"
        task = asyncio.create_task(self._schedule(entry), name=name)
        self._loops[entry.plugin, entry.timer.name] = task

    async def replace(self, plugins: set[str], timers: Sequence[Scheduled]) -> None:
        """The timers of ``plugins`` become those of ``timers`` (a reload): the old schedules
        stop (a firing running finishes), the new ones start when the timers run."""
        for key in [k for k in self._loops if k[0] in plugins]:
            task = self._loops.pop(key)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._timers = [e for e in self._timers if e.plugin not in plugins]
        for entry in timers:
            if entry.plugin in plugins:
                self._timers.append(entry)
                if self._started:
                    self._begin(entry)

    async def _schedule(self, entry: Scheduled) -> None:
        timer, where = entry.timer, {"plugin": entry.plugin, "timer": entry.timer.name}
        while True:
            at, gap = timer.next_firing(self._clock())
            await asyncio.sleep(max(0.0, at - self._clock()))
            running = self._runs.get((entry.plugin, timer.name))
            if running is not None and not running.done():
                continue  # still busy with the last firing: another worker may take this one
            slot = round(at * 1000)
            try:
                won = await self._claims.take(
                    entry.plugin, timer.name, slot, self._worker, round(gap * 1500)
                )
            except Exception:
                log.warning("plugin timer: could not claim a firing", extra=where, exc_info=True)
                continue
            if won:
                context = TimerContext(timer.name, datetime.fromtimestamp(at, UTC), entry.services)
                task = asyncio.create_task(self._run(entry, context), name="plugin-timer")
                self._runs[entry.plugin, timer.name] = task

    async def _run(self, entry: Scheduled, context: TimerContext) -> None:
        timer = entry.timer
        timeout = timer.timeout if timer.timeout is not None else self._timeout
        where = {"plugin": entry.plugin, "timer": timer.name}
        outcome = "cancelled"  # unless the call ends by itself
        try:
            outcome = await contained(lambda: timer.func(context), timeout, "plugin timer", where)
        finally:
            self.counts[entry.plugin, timer.name, outcome] += 1

    def series(self) -> dict[tuple[str, ...], float]:
        return {key: float(n) for key, n in self.counts.items()}

    async def aclose(self) -> None:
        """Stop scheduling; the firings running get their time limit, then are cancelled."""
        loops = list(self._loops.values())
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        self._loops.clear()
        runs = [task for task in self._runs.values() if not task.done()]
        if runs:
            _, pending = await asyncio.wait(runs, timeout=self._timeout)
            for task in pending:
                task.cancel()
            await asyncio.gather(*runs, return_exceptions=True)
