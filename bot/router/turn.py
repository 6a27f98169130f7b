"""What the router holds per turn, and its limits.

Apart from ``core`` so the message path stays one readable module: these are plain data, the
limits the composition root sets, and (re-exported from ``bot.router.items``, where the live
chat's turns become router items) the item a conversation's queue holds with its progress.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.agent.reasoning import Level
from bot.router.items import Item, Progress

__all__ = ["Item", "Progress", "RouterLimits"]


@dataclass(frozen=True)
class RouterLimits:
    max_message_chars: int = 8000
    reasoning: str = "auto"
    reasoning_max: Level = "medium"
    concurrency: int = 32
    max_in_flight: int = 128  # messages held at once, running or queued (taken before a pull)
    claim_lease_ms: int = 10_000
    max_deliveries: int = 3  # a message delivered more often goes to dead letters
    done_seconds: int = 3 * 24 * 3600
