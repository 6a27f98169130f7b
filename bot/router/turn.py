"""The router's limits, as the composition root sets them.

Apart from ``core`` so the message path stays one readable module and the scope profiles
(``bot.router.scoping``) can read them without importing the router. The item a conversation's
queue holds is ``bot.router.items``.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.agent.reasoning import Level


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
