"""Prometheus metrics: one small typed facade the core calls at its chokepoints.

Why a facade: call sites stay one-liners (``metrics.message_in(platform)``), metric names,
labels and buckets are decided here once, and ``NullMetrics`` (same methods, no-ops) lets code
paths without metrics stay simple, with no ``if metrics:`` anywhere.

Why a registry per ``Metrics`` and not prometheus_client's global one: tests build many apps in
one process, and a global registry refuses a second metric of the same name.

Gauges that describe state owned elsewhere (bus lag, an adapter's send counters, a YouTube quota)
are read at scrape time: ``register_gauge_callback`` takes a function (sync or async) that
returns the current values, and ``render`` (what ``/metrics`` serves) refreshes every callback
first, concurrently and each under a timeout. A failing callback is logged with its traceback
and its series are left out of that scrape rather than shown stale.

Histogram buckets fit what they measure: framework overhead in the millisecond range (the
budget is p50 <= 1 ms, p99 <= 5 ms in-process; <= 3 / 15 ms with Redis), model calls and
ingest-to-reply in seconds up to the turn budget.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import choose_encoder
from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from bot.llm.pricing import PriceTable, load_prices
from bot.llm.types import Usage
from bot.settings import MetricsSettings

if TYPE_CHECKING:
    pass

log = logging.getLogger("chorus.metrics")

Labels = tuple[str, ...]
GaugeReading = float | Mapping[Labels, float]
GaugeCallback = Callable[[], GaugeReading | Awaitable[GaugeReading]]
Kind = Literal["gauge", "counter"]

OVERHEAD_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25,
)  # fmt: skip
LLM_BUCKETS = (0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0)
REPLY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 20.0, 30.0, 60.0, 120.0, 300.0)
WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
TOKEN_KINDS = ("input", "output", "cache_read", "cache_write")


class MetricsSink(Protocol):
    """What the core calls; ``Metrics`` records, ``NullMetrics`` does nothing."""

    def message_in(self, platform: str) -> None: ...
    def message_out(self, platform: str) -> None: ...
    def dead_letter(self, platform: str) -> None: ...
    def engagement(self, platform: str, decision: str) -> None: ...
    def observe_ingest_to_reply(self, platform: str, seconds: float) -> None: ...
    def observe_llm(self, model: str, seconds: float) -> None: ...
    def observe_overhead(self, seconds: float) -> None: ...
    def tokens(self, model: str, usage: Usage) -> None: ...
    def llm_error(self, model: str, error: str) -> None: ...
    def tool_call(self, tool: str, outcome: str) -> None: ...
    def insights_job(self, outcome: str) -> None: ...
    def recall(self, outcome: str) -> None: ...
    def ratelimit_wait(self, platform: str, seconds: float) -> None: ...
    def llm_fallback(self, from_model: str, to_model: str) -> None: ...


@dataclass(frozen=True)
class _Spec:
    name: str
    help: str
    labels: Labels
    kind: Kind


Reader = Callable[[], Awaitable[dict[str, dict[Labels, float]]]]


@dataclass(eq=False)
class _Source:
    """One callback feeding one or more series families, and what it returned last."""

    specs: tuple[_Spec, ...]
    read: Reader
    values: dict[str, dict[Labels, float]] = field(default_factory=dict)


class _CallbackCollector:
    """Yields the values the last ``refresh`` read; prometheus_client calls ``collect`` sync."""

    def __init__(self) -> None:
        self.sources: list[_Source] = []

    def describe(self) -> list[Metric]:
        return []  # names are checked by Metrics; describing would call collect too early

    def collect(self) -> Iterator[Metric]:
        for source in self.sources:
            for spec in source.specs:
                values = source.values.get(spec.name)
                if values is None:
                    continue
                family: GaugeMetricFamily | CounterMetricFamily
                if spec.kind == "counter":
                    family = CounterMetricFamily(spec.name, spec.help, labels=spec.labels)
                else:
                    family = GaugeMetricFamily(spec.name, spec.help, labels=spec.labels)
                for labels, value in sorted(values.items()):
                    family.add_metric(list(labels), value)
                yield family


class Metrics:
    """Every metric of one app, in its own ``CollectorRegistry``."""

    def __init__(
        self,
        *,
        prices: PriceTable | None = None,
        registry: CollectorRegistry | None = None,
        process_metrics: bool = True,
        callback_timeout: float = 2.0,
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self.prices = prices or PriceTable.default()
        self.callback_timeout = callback_timeout
        self._unpriced: set[str] = set()
        r = self.registry
        self._in = Counter("chorus_messages_in", "Messages received", ("platform",), registry=r)
        self._out = Counter("chorus_messages_out", "Replies sent", ("platform",), registry=r)
        self._dead = Counter(
            "chorus_dead_letters",
            "Messages delivered too often without an answer, moved to dead letters",
            ("platform",),
            registry=r,
        )
        self._engagement = Counter(
            "chorus_engagement_decisions",
            "Engagement policy decisions",
            ("platform", "decision"),
            registry=r,
        )
        self._reply = Histogram(
            "chorus_ingest_to_reply_seconds",
            "From a message's arrival to its reply being published",
            ("platform",),
            buckets=REPLY_BUCKETS,
            registry=r,
        )
        self._llm = Histogram(
            "chorus_llm_call_seconds",
            "One model call, retries included",
            ("model",),
            buckets=LLM_BUCKETS,
            registry=r,
        )
        self._overhead = Histogram(
            "chorus_overhead_seconds",
            "Framework time of one turn: turn time minus model and tool time",
            buckets=OVERHEAD_BUCKETS,
            registry=r,
        )
        self._tokens = Counter(
            "chorus_llm_tokens", "Tokens by model and kind", ("model", "kind"), registry=r
        )
        self._cost = Counter(
            "chorus_llm_cost_usd",
            "ESTIMATED cost in USD from list prices (bot/llm/pricing.py; CHORUS_PRICES)",
            ("model",),
            registry=r,
        )
        self._llm_errors = Counter(
            "chorus_llm_errors",
            "Model calls that failed after retries and fallbacks",
            ("model", "error"),
            registry=r,
        )
        self._tools = Counter(
            "chorus_tool_calls", "Tool calls by outcome", ("tool", "outcome"), registry=r
        )
        self._insights = Counter(
            "chorus_insights_jobs", "Insights jobs by outcome", ("outcome",), registry=r
        )
        self._recall = Counter(
            "chorus_recall_queries",
            "Relevance per turn: hybrid (query embedded in time), or lexical after a timeout/error",
            ("outcome",),
            registry=r,
        )
        self._wait = Histogram(
            "chorus_ratelimit_wait_seconds",
            "Time a send waited for its platform's rate limit",
            ("platform",),
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self._fallbacks = Counter(
            "chorus_llm_fallbacks",
            "Requests moved to the next model of the fallback chain",
            ("from_model", "to_model"),
            registry=r,
        )
        self._callbacks = _CallbackCollector()
        self._callback_names: set[str] = set()
        r.register(self._callbacks)
        if process_metrics:
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)
            GCCollector(registry=r)

    @classmethod
    def from_settings(cls, settings: MetricsSettings) -> Metrics:
        """Metrics with the price table of ``CHORUS_PRICES`` (``ConfigError`` if it is bad)."""
        return cls(prices=load_prices(settings.prices))

    # -- the chokepoints ------------------------------------------------------------------------
    def message_in(self, platform: str) -> None:
        self._in.labels(platform).inc()

    def message_out(self, platform: str) -> None:
        self._out.labels(platform).inc()

    def dead_letter(self, platform: str) -> None:
        self._dead.labels(platform).inc()

    def engagement(self, platform: str, decision: str) -> None:
        self._engagement.labels(platform, str(decision)).inc()

    def observe_ingest_to_reply(self, platform: str, seconds: float) -> None:
        self._reply.labels(platform).observe(max(0.0, seconds))

    def observe_llm(self, model: str, seconds: float) -> None:
        self._llm.labels(model).observe(max(0.0, seconds))

    def observe_overhead(self, seconds: float) -> None:
        self._overhead.observe(max(0.0, seconds))

    def tokens(self, model: str, usage: Usage) -> None:
        counts = (
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
        )
        for kind, count in zip(TOKEN_KINDS, counts, strict=True):
            if count:
                self._tokens.labels(model, kind).inc(count)
        cost = self.prices.cost(model, usage)
        if cost is not None:
            self._cost.labels(model).inc(cost)
        elif model not in self._unpriced:
            self._unpriced.add(model)
            log.info(
                "no price for this model; its cost is not counted (add it to CHORUS_PRICES)",
                extra={"model": model},
            )

    def llm_error(self, model: str, error: str) -> None:
        self._llm_errors.labels(model, error).inc()

    def tool_call(self, tool: str, outcome: str) -> None:
        self._tools.labels(tool, str(outcome)).inc()

    def recall(self, outcome: str) -> None:
        self._recall.labels(outcome).inc()

    def insights_job(self, outcome: str) -> None:
        self._insights.labels(str(outcome)).inc()

    def ratelimit_wait(self, platform: str, seconds: float) -> None:
        self._wait.labels(platform).observe(max(0.0, seconds))

    def llm_fallback(self, from_model: str, to_model: str) -> None:
        self._fallbacks.labels(from_model, to_model).inc()

    # -- scrape-time gauges ---------------------------------------------------------------------
    def register_gauge_callback(
        self,
        name: str,
        help: str,
        labels: Sequence[str],
        fn: GaugeCallback,
        *,
        kind: Kind = "gauge",
    ) -> None:
        """Serve ``name`` from ``fn()`` at every scrape.

        ``fn`` (sync or async) returns a float when ``labels`` is empty, else a mapping of
        label-value tuples to floats. ``kind="counter"`` for a running total the owner keeps
        (the series is exposed as ``<name>_total``).
        """
        spec = self._spec(name, help, labels, kind)
        label_count = len(spec.labels)

        async def read() -> dict[str, dict[Labels, float]]:
            reading = fn()
            if inspect.isawaitable(reading):
                reading = await reading
            return {spec.name: _as_series(spec.name, reading, label_count)}

        self._callbacks.sources.append(_Source((spec,), read))

    def watch_bus(self, read: Reader) -> None:
        """Bus gauges per topic and consumer group: ``chorus_bus_lag`` (entries not yet
        delivered to the group) and ``chorus_bus_pending`` (delivered, not acked).

        ``read`` comes from the bus package (``bot.bus.gauges.bus_gauges``), which knows how
        each bus counts; metrics only declares the two series, so operations never import the
        bus it observes.
        """
        specs = (
            self._spec("chorus_bus_lag", "Bus entries not yet delivered", ("topic", "group")),
            self._spec(
                "chorus_bus_pending", "Bus entries delivered, not acked", ("topic", "group")
            ),
        )
        self._callbacks.sources.append(_Source(specs, read))

    async def refresh(self) -> None:
        """Re-read every scrape-time callback (concurrently, each under ``callback_timeout``)."""
        await asyncio.gather(*(self._refresh(s) for s in self._callbacks.sources))

    async def render(self, accept: str = "") -> tuple[bytes, str]:
        """Refresh, then the exposition for an ``Accept`` header: (body, content type)."""
        await self.refresh()
        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type

    # -- internals ------------------------------------------------------------------------------
    def _spec(self, name: str, help: str, labels: Sequence[str], kind: Kind = "gauge") -> _Spec:
        if kind == "counter":
            name = name.removesuffix("_total")
        taken = _taken_names(self.registry)  # the built-in families' names, suffixes included
        if name in self._callback_names or name in taken:
            raise ValueError(f"a metric named {name!r} is already registered")
        self._callback_names.add(name)
        return _Spec(name, help, tuple(labels), kind)

    async def _refresh(self, source: _Source) -> None:
        try:
            async with asyncio.timeout(self.callback_timeout):
                source.values = await source.read()
        except Exception:
            source.values = {}  # absent beats stale
            log.warning(
                "a metrics callback failed; its series are left out of this scrape",
                extra={"metrics": ",".join(s.name for s in source.specs)},
                exc_info=True,
            )


class NullMetrics:
    """``Metrics``' twin that records nothing (every method is a no-op)."""

    def message_in(self, platform: str) -> None: ...

    def message_out(self, platform: str) -> None: ...

    def dead_letter(self, platform: str) -> None: ...

    def engagement(self, platform: str, decision: str) -> None: ...

    def observe_ingest_to_reply(self, platform: str, seconds: float) -> None: ...

    def observe_llm(self, model: str, seconds: float) -> None: ...

    def observe_overhead(self, seconds: float) -> None: ...

    def tokens(self, model: str, usage: Usage) -> None: ...

    def llm_error(self, model: str, error: str) -> None: ...

    def tool_call(self, tool: str, outcome: str) -> None: ...

    def insights_job(self, outcome: str) -> None: ...

    def recall(self, outcome: str) -> None: ...

    def ratelimit_wait(self, platform: str, seconds: float) -> None: ...

    def llm_fallback(self, from_model: str, to_model: str) -> None: ...

    def register_gauge_callback(
        self,
        name: str,
        help: str,
        labels: Sequence[str],
        fn: GaugeCallback,
        *,
        kind: Kind = "gauge",
    ) -> None: ...

    def watch_bus(self, read: Reader) -> None: ...


def _as_series(name: str, reading: GaugeReading, label_count: int) -> dict[Labels, float]:
    if isinstance(reading, Mapping):
        series = {tuple(str(v) for v in k): float(v) for k, v in reading.items()}
    else:
        series = {(): float(reading)}
    for labels in series:
        if len(labels) != label_count:
            raise ValueError(f"{name}: expected {label_count} label values, got {labels!r}")
    return series


# The sample names each family type exposes besides its own (the exposition format's suffixes).
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("_count", "_sum", "_created"),
}


def _taken_names(registry: CollectorRegistry) -> set[str]:
    """Every sample name the registry's families expose, read through its public ``collect``."""
    taken: set[str] = set()
    for family in registry.collect():
        taken.add(family.name)
        taken.update(family.name + suffix for suffix in _SUFFIXES.get(family.type, ()))
    return taken
