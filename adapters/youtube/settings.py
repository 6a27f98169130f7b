"""The YouTube adapter's reading of its settings section: the quota plan it implies.

The section itself (``bot.settings.youtube``) is data only, so the core may hold it; the quota
arithmetic is the adapter's, so the check that the quota leaves room to read the chat is here.
"""

from __future__ import annotations

import importlib.util

from adapters.youtube.quota import QuotaConfig
from bot.settings.base import ConfigError
from bot.settings.youtube import YouTubeSettings


def quota_config(settings: YouTubeSettings) -> QuotaConfig:
    return QuotaConfig(
        daily_units=settings.daily_quota,
        list_cost=settings.cost_list,
        insert_cost=settings.cost_insert,
        other_cost=settings.cost_other,
        stream_cost=settings.cost_stream,
        reserved_sends=settings.reserved_sends,
        stream_hours=settings.stream_hours,
    )


def check(settings: YouTubeSettings) -> None:
    """Raise ``ConfigError`` when an enabled configuration cannot work."""
    settings.check()
    if settings.read_mode == "stream" and importlib.util.find_spec("grpc") is None:
        raise ConfigError(
            "YOUTUBE_READ_MODE=stream reads the chat over gRPC, but grpcio is not installed: "
            "pip install 'chorus-bot[youtube]' (or use auto, which polls without it)"
        )
    quota = quota_config(settings)
    polls_left = quota.daily_units - quota.reserve(0)
    if polls_left < 100 * quota.list_cost:
        raise ConfigError(
            f"YOUTUBE_RESERVED_SENDS={settings.reserved_sends} x YOUTUBE_COST_INSERT="
            f"{settings.cost_insert} leaves {max(polls_left, 0)} of YOUTUBE_DAILY_QUOTA="
            f"{settings.daily_quota} units for reading the chat; lower the reserve or raise "
            "the quota (request more in the Google Cloud console)"
        )
