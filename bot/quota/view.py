"""What a read of the quota ledger shows, and the ledger's in-memory twin.

Apart from ``bot.quota.ledger`` (the Redis scripts) so that what needs no Redis -- the offline
replay (``chorus replay``), the live-chat gate's arithmetic -- imports no client: ``LedgerView``
is one read of the shared ledger, ``MemoryLedger`` the same rules as the scripts on dicts, for
one process (the contract suite, tests/test_quota_ledger.py, runs both).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from bot.quota.plan import Budget, QuotaConfig, Request, StreamView, Usage, grant, plan_budget

Spend = Literal["read", "reply", "lookup"]
KINDS: tuple[Spend, ...] = ("read", "reply", "lookup")
HOLD_SECONDS = 600.0  # a hold the sender never settles (the turn died) lapses after this


@dataclass(frozen=True)
class LedgerView:
    """One read of the ledger: the day's usage, the chat being read, by-kind spend."""

    usage: Usage
    stream: StreamView | None
    unprompted_at: float | None = None
    by_kind: Mapping[str, int] = field(default_factory=dict)

    def budget(self, config: QuotaConfig, now: datetime) -> Budget:
        """The plan now; before any chat is known, as if one started now and were polled."""
        return plan_budget(config, self.usage, self.stream or StreamView(started=now), now)


class Refused(Exception):
    """``charge_insert`` refused a piece: ``spent`` (the day) or beyond the reply budget."""

    def __init__(self, spent: bool) -> None:
        super().__init__("the day's quota is spent" if spent else "the reply budget is spent")
        self.spent = spent


def parse_view(
    day: Mapping[Any, Any], holds: Mapping[Any, Any], stream: Mapping[Any, Any], now: float
) -> LedgerView:
    """A ``LedgerView`` from the three hashes (lapsed holds not counted)."""
    day = _text(day)
    held = 0
    for value in _text(holds).values():
        units, _, expiry = value.partition(" ")
        if float(expiry or 0) > now:
            held += int(float(units))
    info = _text(stream)
    view: StreamView | None = None
    if "started" in info:
        since = info.get("since")
        view = StreamView(
            started=_at(float(info["started"])),
            reading="stream" if info.get("reading") == "stream" else "poll",
            mentions=int(info.get("mentions", 0)),
            counting_since=_at(float(since)) if since else None,
        )
    unprompted = info.get("unprompted")
    return LedgerView(
        usage=Usage(
            int(day.get("units", 0)), int(day.get("inserts", 0)), held, int(day.get("replies", 0))
        ),
        stream=view,
        unprompted_at=float(unprompted) if unprompted else None,
        by_kind={kind: int(day.get(kind, 0)) for kind in KINDS},
    )


def _text(raw: Mapping[Any, Any]) -> dict[str, str]:
    return {
        (k.decode() if isinstance(k, bytes) else str(k)): (
            v.decode() if isinstance(v, bytes) else str(v)
        )
        for k, v in raw.items()
    }


def _at(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


@dataclass
class MemoryLedger:
    """The same rules in memory, synchronous: the offline replay's ledger (one process)."""

    config: QuotaConfig
    units: int = 0
    inserts: int = 0
    replies: int = 0
    by_kind: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    holds: dict[str, tuple[int, float]] = field(default_factory=dict)
    stream: StreamView | None = None
    unprompted_at: float | None = None

    def view(self, now: datetime) -> LedgerView:
        self._lapse(now.timestamp())
        held = sum(u for u, _ in self.holds.values())
        usage = Usage(self.units, self.inserts, held, self.replies)
        return LedgerView(usage, self.stream, self.unprompted_at, dict(self.by_kind))

    def charge(self, units: int, kind: Spend = "read") -> None:
        self.units += units
        self.by_kind[kind] += units

    def reserve(self, hold: str, request: Request, now: datetime) -> int:
        stamp = now.timestamp()
        self.holds.pop(hold, None)
        got = grant(request, self.view(now).usage, self.unprompted_at, stamp)
        if got:
            self.holds[hold] = (got, stamp + HOLD_SECONDS)
            if request.gap >= 0:
                self.unprompted_at = stamp
        return got

    def charge_insert(self, hold: str | None, cost: int, now: datetime) -> None:
        """``Refused`` as the Redis script would."""
        view = self.view(now)
        own, expiry = self.holds.get(hold or "", (0, 0.0))
        others = view.usage.held - own
        if self.units + cost > self.config.daily_units:
            raise Refused(spent=True)
        limit = view.budget(self.config, now).reply_limit
        if own < cost and self.units + others + cost > limit:
            raise Refused(spent=False)
        if hold in self.holds:
            self.holds[hold] = (max(0, own - cost), expiry)
        self.units += cost
        self.inserts += 1
        self.by_kind["reply"] += cost

    def settle(self, hold: str | None, *, sent: bool) -> None:
        if hold:
            self.holds.pop(hold, None)
        self.replies += sent

    def _lapse(self, now: float) -> None:
        for hold in [h for h, (_, expiry) in self.holds.items() if expiry <= now]:
            del self.holds[hold]
