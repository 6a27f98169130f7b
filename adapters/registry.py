"""Which platform adapters a deployment runs: each one whose token is configured.

Imported only by the composition root (``bot/cli.py``). Each platform's module, and so its SDK,
is imported only when that platform is configured, so an unused SDK need not be installed; a
configured platform whose SDK is missing gets the exact install command. Whether a platform is
configured is read from its section of the settings root, the same place its adapter is then
built from, so the environment and ``.env`` count alike.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from bot.bus.base import EventBus
from bot.ops.logs import add_secrets
from bot.platform.commands import NativeCommand
from bot.platform.protocol import PlatformAdapter
from bot.platform.supervisor import Slot
from bot.settings import ConfigError, Settings
from bot.state.connect import Client
from bot.state.draft_messages import LiveMessages


@dataclass(frozen=True)
class Platform:
    name: str  # also the name of its section of the settings root
    module: str
    cls: str
    trigger: str  # the variable whose presence turns the platform on
    extra: str
    needs_redis: bool
    native_commands: bool = False  # from_section takes the plugins' commands
    streams: bool = False  # edits streamed answers: from_section takes ``live_store``


PLATFORMS = (
    Platform(
        "discord",
        "adapters.discord.adapter",
        "DiscordAdapter",
        "DISCORD_TOKEN",
        "discord",
        False,
        native_commands=True,
        streams=True,
    ),
    Platform(
        "slack",
        "adapters.slack.adapter",
        "SlackAdapter",
        "SLACK_BOT_TOKEN",
        "slack",
        True,
        streams=True,
    ),
    Platform(
        "twitch", "adapters.twitch.adapter", "TwitchAdapter", "TWITCH_CLIENT_ID", "twitch", True
    ),
    Platform(
        "youtube",
        "adapters.youtube.adapter",
        "YouTubeAdapter",
        "YOUTUBE_REFRESH_TOKEN",
        "youtube",
        True,
    ),
)


def _section(settings: Settings, platform: Platform) -> Any:
    return getattr(settings, platform.name)


def configured_platforms(settings: Settings) -> list[str]:
    return [p.name for p in PLATFORMS if _section(settings, p).configured]


def build_adapters(
    settings: Settings, bus: EventBus, redis: Client, commands: Sequence[NativeCommand] = ()
) -> list[PlatformAdapter]:
    """An adapter for every configured platform (``ConfigError`` names what is missing)."""
    return [slot.adapter for slot in build_slots(settings, bus, redis, commands)]


def build_slots(
    settings: Settings, bus: EventBus, redis: Client, commands: Sequence[NativeCommand] = ()
) -> list[Slot]:
    """A supervised slot for every configured platform: its first adapter, built now so a
    missing setting stops the start, and the factory that builds the next one on a restart.
    ``commands``: the plugins' commands, for the platforms that register native ones."""
    slots: list[Slot] = []
    for platform in PLATFORMS:
        section = _section(settings, platform)
        if not section.configured:
            continue
        try:
            module: Any = importlib.import_module(platform.module)
        except ModuleNotFoundError as exc:
            if exc.name and not exc.name.startswith("adapters"):
                raise ConfigError(
                    f"{platform.trigger} is set but the {platform.name} SDK is not installed; "
                    f"run: pip install 'chorus-bot[{platform.extra}]'"
                ) from None
            raise
        from_section = getattr(module, platform.cls).from_section
        args: tuple[Any, ...] = (section, bus, redis) if platform.needs_redis else (section, bus)
        if platform.native_commands:
            args = (*args, tuple(commands))
        options: dict[str, Any] = {}
        if platform.streams:  # where a streamed answer's live message is, for a restart
            namespace = settings.state.bus_namespace
            options["live_store"] = LiveMessages(redis, platform.name, namespace=namespace)
        if platform.name == "discord":  # identify buckets shared by the gateway processes
            options["identify_store"] = redis

        def build(
            make: Any = from_section, args: tuple[Any, ...] = args, options: Any = options
        ) -> PlatformAdapter:
            adapter: PlatformAdapter = make(*args, **options)
            return adapter

        add_secrets(section.secret_values())
        slots.append(Slot(adapter=build(), build=build))
    return slots


def adapter_gauges(
    slot: Any,
) -> list[tuple[str, str, tuple[str, ...], Any, Literal["gauge", "counter"]]]:
    """The counters an adapter keeps itself (Twitch sends and drops, Slack's unhandled events,
    YouTube quota), as ``(name, help, labels, read, kind)`` for the metrics' scrape-time
    callbacks."""
    if slot.platform == "twitch":
        return [
            (
                "chorus_twitch_sent",
                "Messages Twitch accepted",
                (),
                lambda: slot.adapter.sent,
                "counter",
            ),
            (
                "chorus_twitch_dropped",
                "Messages Twitch dropped (is_sent false)",
                ("reason",),
                lambda: {(k,): v for k, v in slot.adapter.dropped.items()},
                "counter",
            ),
            (
                "chorus_twitch_eventsub_duplicates",
                "EventSub notifications Twitch delivered again, dropped unpublished",
                (),
                lambda: slot.adapter.client.recent_events.duplicates,
                "counter",
            ),
        ]
    if slot.platform == "slack":
        return [
            (
                "chorus_slack_events_ignored",
                "Slack events acknowledged without handling, by event type",
                ("type",),
                lambda: {(k,): v for k, v in slot.adapter.unhandled.ignored.items()},
                "counter",
            ),
            (
                "chorus_slack_app_rate_limited",
                "app_rate_limited callbacks: minutes Slack dropped this app's events",
                (),
                lambda: slot.adapter.unhandled.rate_limited,
                "counter",
            ),
        ]
    if slot.platform == "discord":
        return [
            (
                "chorus_discord_shard_latency_seconds",
                "Seconds between a Discord shard's heartbeat and its ACK",
                ("shard",),
                lambda: {
                    (str(shard),): latency
                    for shard, latency in slot.adapter.client.latencies
                    if latency == latency and latency != float("inf")  # (nan before the first)
                },
                "gauge",
            ),
            (
                "chorus_discord_shard_sessions",
                "Discord gateway sessions per shard: identified (READY), resumed, dropped",
                ("shard", "event"),
                lambda: _shard_sessions(slot.adapter.shards),
                "counter",
            ),
        ]
    if slot.platform == "youtube":
        return [
            (
                "chorus_youtube_quota_remaining",
                "YouTube API quota units left today",
                (),
                lambda: slot.adapter.quota_status.units_remaining,
                "gauge",
            )
        ]
    return []


def _shard_sessions(states: Any) -> dict[tuple[str, str], float]:
    counts: dict[tuple[str, str], float] = {}
    for event, table in (
        ("identified", states.connects),
        ("resumed", states.resumes),
        ("dropped", states.drops),
    ):
        counts.update({(str(shard), event): float(n) for shard, n in table.items()})
    return counts
