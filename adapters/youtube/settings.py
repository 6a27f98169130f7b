"""The YouTube adapter's check of its settings section: the quota must leave room to read.

The section itself (``bot.settings.youtube``) is data only, so the core may hold it; the quota
arithmetic is ``bot.quota.plan``'s (shared with the workers' reply budget).
"""

from __future__ import annotations

import importlib.util
import math

from bot.quota.plan import QuotaConfig
from bot.settings.base import ConfigError
from bot.settings.youtube import YouTubeSettings


def check(settings: YouTubeSettings) -> None:
    """Raise ``ConfigError`` when an enabled configuration cannot work."""
    settings.check()
    if settings.read_mode == "stream" and importlib.util.find_spec("grpc") is None:
        raise ConfigError(
            "YOUTUBE_READ_MODE=stream reads the chat over gRPC, but grpcio is not installed: "
            "pip install 'chorus-bot[youtube]' (or use auto, which polls without it)"
        )
    quota = QuotaConfig.from_settings(settings)
    polls = math.ceil(quota.stream_hours * 3600 / quota.poll_floor_seconds) * quota.list_cost
    mentions = quota.reserved_sends * quota.reply_units
    if polls + mentions + quota.safety_units > quota.daily_units:
        raise ConfigError(
            f"YOUTUBE_DAILY_QUOTA={settings.daily_quota} units cannot pay for polling the chat "
            f"every YOUTUBE_POLL_FLOOR_SECONDS={settings.poll_floor_seconds:g} for "
            f"YOUTUBE_STREAM_HOURS={settings.stream_hours:g} ({polls} units) and keep "
            f"YOUTUBE_RESERVED_SENDS={settings.reserved_sends} replies of YOUTUBE_MAX_PIECES="
            f"{settings.max_pieces} x YOUTUBE_COST_INSERT={settings.cost_insert} ({mentions} "
            "units): lower the reserve, poll less often, or raise the quota (request more in "
            "the Google Cloud console)"
        )
