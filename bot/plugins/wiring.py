"""What the composition root builds from the loaded plugins: their event dispatcher and their
timers, each counted in ``/metrics``, and their store bound to the deployment's connection."""

from __future__ import annotations

from bot.ops.metrics import Metrics, NullMetrics
from bot.plugins.events import PluginEvents
from bot.plugins.loader import LoadedPlugins
from bot.plugins.reach import Reach
from bot.plugins.timers import PluginTimers
from bot.settings import Settings
from bot.state.connect import Client
from bot.state.plugin_store import RedisPluginStore, TimerClaims


def plugin_events(
    plugins: LoadedPlugins, settings: Settings, metrics: Metrics | NullMetrics
) -> PluginEvents:
    """The plugins' event handlers, counted in ``chorus_plugin_events_total``."""
    events = PluginEvents(
        plugins.subscribers(),
        timeout=settings.plugins.hook_timeout,
        concurrency=settings.plugins.event_concurrency,
    )
    if events:
        metrics.register_gauge_callback(
            "chorus_plugin_events",
            "Plugin event handlers by outcome (ok, error, timeout, cancelled, dropped)",
            ("plugin", "kind", "outcome"),
            events.series,
            kind="counter",
        )
    return events


def plugin_timers(
    plugins: LoadedPlugins,
    settings: Settings,
    redis: Client,
    metrics: Metrics | NullMetrics,
    *,
    worker: str,
    reach: Reach | None = None,
) -> PluginTimers:
    """The plugins' timers, claimed in the store per firing, counted in
    ``chorus_plugin_timers_total``; ``ctx.store`` bound to ``redis`` and ``ctx.send``/``ask``
    to ``reach`` on the way."""
    plugins.bind(RedisPluginStore(redis), reach)
    claims = TimerClaims(redis, namespace=settings.state.bus_namespace)
    timers = PluginTimers(
        plugins.scheduled(), claims, worker=worker, timeout=settings.plugins.hook_timeout
    )
    if timers:
        metrics.register_gauge_callback(
            "chorus_plugin_timers",
            "Plugin timer firings run here, by outcome (ok, error, timeout, cancelled)",
            ("plugin", "timer", "outcome"),
            timers.series,
            kind="counter",
        )
    return timers
