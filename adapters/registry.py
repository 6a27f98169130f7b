"""Which platform adapters a deployment runs: each one whose token is configured.

Imported only by the composition root (``bot/cli.py``). Each platform's module, and so its SDK,
is imported only when that platform is configured, so an unused SDK need not be installed; a
configured platform whose SDK is missing gets the exact install command.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any

from dotenv import dotenv_values
from redis.asyncio import Redis

from bot.bus.base import EventBus
from bot.config import ConfigError
from bot.ops.logs import add_secrets
from bot.platform.protocol import PlatformAdapter


@dataclass(frozen=True)
class Platform:
    name: str
    module: str
    cls: str
    trigger: str  # the variable whose presence turns the platform on
    extra: str
    needs_redis: bool


PLATFORMS = (
    Platform(
        "discord", "adapters.discord.adapter", "DiscordAdapter", "DISCORD_TOKEN", "discord", False
    ),
    Platform("slack", "adapters.slack.adapter", "SlackAdapter", "SLACK_BOT_TOKEN", "slack", False),
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


def _configured(variable: str) -> bool:
    value = os.environ.get(variable)
    if value is None:
        value = dotenv_values(".env").get(variable) if os.path.exists(".env") else None
    return bool(value and value.strip())


def configured_platforms() -> list[str]:
    return [p.name for p in PLATFORMS if _configured(p.trigger)]


def build_adapters(bus: EventBus, redis: Redis) -> list[PlatformAdapter]:
    """An adapter for every configured platform (``ConfigError`` names what is missing)."""
    adapters: list[PlatformAdapter] = []
    for platform in PLATFORMS:
        if not _configured(platform.trigger):
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
        factory = getattr(module, platform.cls).from_env
        adapter = factory(bus, redis) if platform.needs_redis else factory(bus)
        if adapter is None:
            continue
        settings = getattr(adapter, "settings", None)
        if settings is not None and hasattr(settings, "secret_values"):
            add_secrets(settings.secret_values())
        adapters.append(adapter)
    return adapters
