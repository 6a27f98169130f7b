"""The reply budget as the live-chat turns meet it: which turns a costly platform may pay for.

On Twitch, Discord and Slack a reply costs nothing; on YouTube each piece of a reply costs
``YOUTUBE_COST_INSERT`` quota units from a small daily budget that reading the chat needs too
(``bot/quota/plan.py`` splits the day). The gate applies that plan to the policy's turns:

- **mentions first**: a turn that answers a mention (immediately, or a batch holding a deferred
  mention) reserves its worst-case cost before the model runs (``reserve``, atomic in the shared
  ledger); it gets everything beyond the reading reserve. Refused, the mention is declined with
  reason ``quota`` (logged and counted by ``LiveChat``);
- **unprompted turns are paced**: a room batch, an idle line or any other turn nobody asked for
  (stream-event thanks too) goes only while ``room_open`` -- what the mention reserve leaves,
  spread over the rest of the stream, one turn per ``room_gap`` project-wide -- and reserves
  too (it may still lose a race with another worker: then it is held back);
- **mentions are paced**: while the replies are ahead of their even pace over the stream
  (``mentions_open`` False), a mention waits in the engagement ledger and is answered with the
  others waiting when the pace opens, several mentioners in one message;
- the observed mention rate feeds the mention reserve: ``count_mention`` per mention seen, sent
  with the next ``refresh``.

``tick()`` is synchronous and runs once a second, so the gate works from a snapshot that
``refresh`` (awaited by ``LiveChat.maintain``, also once a second) reads from the shared ledger;
the reservation is what makes a decision binding. The replay (``bot/engagement/replay.py``) drives the
same gate from the in-memory ledger, so its figures come from the same arithmetic. No I/O here:
the ledger is passed in.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol

from bot.ops.metrics import Metrics, NullMetrics
from bot.quota.ledger import QuotaLedger
from bot.quota.plan import Budget, Kind, QuotaConfig, Request
from bot.quota.view import LedgerView
from bot.settings import Settings
from bot.state.connect import Client

log = logging.getLogger("chorus.live")


class SharedLedger(Protocol):
    """What the gate needs of the shared ledger (``bot.quota.ledger.QuotaLedger``)."""

    async def view(self, *, add_mentions: int = 0) -> LedgerView: ...

    async def reserve(self, hold: str, request: Request) -> int: ...


class ReplyGate:
    """The reply budget of the one platform whose replies cost (``platform``), or of none."""

    def __init__(
        self,
        config: QuotaConfig | None = None,
        *,
        clock: Callable[[], float],
        ledger: SharedLedger | None = None,
        platform: str = "youtube",
    ) -> None:
        self.config = config
        self.platform = platform
        self.clock = clock
        self.ledger = ledger
        self.budget: Budget | None = None
        self.view: LedgerView | None = None
        self.unprompted_at: float | None = None  # project-wide, as last seen (or decided here)
        self._mentions = 0  # seen since the last refresh

    def covers(self, platform: str) -> bool:
        """Whether replies on ``platform`` are paid from this budget."""
        return self.config is not None and platform == self.platform

    # -- the snapshot ---------------------------------------------------------------------------
    def update(self, view: LedgerView, now: float) -> Budget:
        """Plan from a read of the ledger (``now``: epoch seconds)."""
        assert self.config is not None
        self.view = view
        self.budget = view.budget(self.config, datetime.fromtimestamp(now, UTC))
        if view.unprompted_at is not None:
            self.unprompted_at = max(self.unprompted_at or 0.0, view.unprompted_at)
        return self.budget

    async def refresh(self) -> Budget | None:
        """Read the shared ledger (sending the mentions counted since the last read)."""
        if self.config is None or self.ledger is None:
            return None
        mentions, self._mentions = self._mentions, 0
        try:
            view = await self.ledger.view(add_mentions=mentions)
        except BaseException:
            self._mentions += mentions  # counted again with the next read
            raise
        return self.update(view, self.clock())

    def count_mention(self, platform: str) -> None:
        if self.covers(platform):
            self._mentions += 1

    def take_mentions(self) -> int:
        mentions, self._mentions = self._mentions, 0
        return mentions

    # -- the gates ------------------------------------------------------------------------------
    def room_open(self, platform: str, now: float) -> bool:
        """Whether an unprompted turn may be decided now (always, where replies are free)."""
        if not self.covers(platform):
            return True
        return self.budget is not None and self.budget.room_open(self.unprompted_at, now)

    def mentions_open(self, platform: str) -> bool:
        """Whether a mention may be answered now on its own (always, where replies are free);
        while not, mentions wait and go out together when the pace opens (``Budget.pace_left``).
        Before the first read of the ledger, open: the reservation still guards the budget."""
        if not self.covers(platform) or self.budget is None:
            return True
        return self.budget.mentions_open

    def took_room(self, now: float) -> None:
        """An unprompted turn was decided here: the next waits its gap (until the ledger says
        otherwise)."""
        self.unprompted_at = now

    def request(self, kind: Kind) -> Request:
        assert self.budget is not None
        return self.budget.request(kind)

    async def reserve(self, hold: str, kind: Kind) -> int:
        """Reserve a decided turn's worst-case cost in the shared ledger (0: refused)."""
        assert self.ledger is not None
        if self.budget is None:
            await self.refresh()
        granted = await self.ledger.reserve(hold, self.request(kind))
        if granted and kind == "room":
            self.took_room(self.clock())
        return granted


def live_reply_gate(settings: Settings, redis: Client, metrics: Metrics | NullMetrics) -> ReplyGate:
    """The reply budget of the live-chat turns: YouTube's, shared in Redis with the gateway
    (same ``YOUTUBE_*`` settings in every process), when YouTube is configured; and its gauges:
    the day's units by kind and what the budget has left, read from Redis at scrape time."""
    youtube = settings.youtube
    if not (youtube.enabled and youtube.client_id and youtube.client_id.strip()):
        return ReplyGate(clock=time.time)
    config = QuotaConfig.from_settings(youtube)
    ledger = QuotaLedger(
        redis, config, project=youtube.client_id.strip(), clock=lambda: datetime.now(UTC)
    )

    async def units() -> dict[tuple[str, ...], float]:
        view = await ledger.view()
        return {(kind,): float(n) for kind, n in view.by_kind.items()}

    async def budget() -> dict[tuple[str, ...], float]:
        plan = (await ledger.view()).budget(config, datetime.now(UTC))
        parts = {
            "replies_left": plan.replies_left,
            "room": plan.room,
            "mention_reserve": plan.mentions,
            "reading_reserve": plan.reading,
            "held": plan.unspent - plan.remaining,
        }
        return {(part,): float(n) for part, n in parts.items()}

    metrics.register_gauge_callback(
        "chorus_youtube_quota_units",
        "YouTube API quota units spent today (Pacific quota day) by kind: read (polls and "
        "stream connections), reply (inserts), lookup (channel, broadcast, video)",
        ("kind",),
        units,
    )
    metrics.register_gauge_callback(
        "chorus_youtube_reply_budget_units",
        "The YouTube reply budget now: replies_left (what a mention may still use), room (what "
        "unprompted turns may use), mention_reserve, reading_reserve, held (replies in flight)",
        ("part",),
        budget,
    )
    return ReplyGate(config, clock=time.time, ledger=ledger)
