"""What the router holds per turn, and its limits.

Apart from ``core`` so the message path stays one readable module: these are plain data, the
item a conversation's queue holds (with the progress its commit reports) and the limits the
composition root sets.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from bot.agent.reasoning import Level
from bot.bus.base import Delivery
from bot.events import ChatMessage


@dataclass
class Progress:
    committed: bool = False  # the reply and its record are in Redis: never release, ack
    elsewhere: bool = False  # our lapsed claim is another worker's now: it answers and acks


@dataclass(frozen=True)
class Item:
    """One turn to run: an inbound message (with its delivery, acked after), or a live-chat
    turn the policy made (a batch or an idle line: no delivery)."""

    message: ChatMessage
    delivery: Delivery[ChatMessage] | None
    addressed: tuple[str, ...]
    reply_to_id: str | None
    context: str = ""
    forced: str | None = None  # a fixed answer (live-chat pause/resume acknowledgements)
    received: float = field(default_factory=time.perf_counter)  # for the overhead metric
    progress: Progress = field(default_factory=Progress)


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
