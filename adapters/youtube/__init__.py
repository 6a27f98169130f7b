"""YouTube live chat over the YouTube Data API v3 (aiohttp; quota-planned polling).

``YouTubeAdapter.from_section(settings.youtube, bus, redis)`` is the entry point; see adapter.py for the flow, api.py
for the one chokepoint (OAuth, quota, retries) and quota.py for the cadence plan.
"""

from __future__ import annotations

from adapters.youtube.adapter import QuotaStatus, YouTubeAdapter

__all__ = ["QuotaStatus", "YouTubeAdapter"]
