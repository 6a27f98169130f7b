"""Quotas and the daily cost cap, kept in Redis so every worker shares them.

Per user and per channel (a thread counts to its channel): messages and tokens per UTC hour and
per UTC day; per deployment: the estimated spend per UTC day (``bot/llm/pricing.py``'s list
prices). Why one Lua script (``bot.state.counters.ADMIT``): the check and the count must be one
atomic step, or three workers each reading "19 of 20" would all answer. ``admit`` runs it before
the model is called (one round trip, and only when some limit is set): every counter is read, and either all are counted
(+1 message) or the first limit reached is returned with whether this is its first refusal of
the period, so the user reads ONE notice, not one per message. Tokens are only known after the
answer: ``usage_counters`` adds them to the commit that records the reply (no extra round trip),
and a limit in tokens is reached once the counted tokens reach it.

The cost cap is a reservation (``bot.state.cost``): the same script admits a turn only while
the day's spend plus the reservations of the calls in flight is under the cap, and then holds
the turn's estimated cost (its prompt at list price plus its output budget), so turns admitted
at the same moment on different workers see each other's holds. The commit settles the hold
with the real cost (``bot.state.turn.CostSettle``); a turn that fails releases it, and a hold
nobody settles lapses.

Exempt users (moderators, unless ``CHORUS_QUOTA_EXEMPT_MODERATORS=false``, and allow-listed
users) skip the per-user and per-channel limits; the deployment's cost cap holds for everyone,
as it is the bill.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from bot.events import ChatMessage
from bot.settings import QuotaSettings
from bot.state import keys
from bot.state.connect import Client
from bot.state.cost import CostLedger, Reservation, cost_day, micro
from bot.state.counters import CounterStore
from bot.state.turn import CounterAdd

PERIOD_GRACE = 3600  # seconds a period's counters outlive it


@dataclass(frozen=True)
class QuotaLimits:
    """``None``: no limit. Tokens are all input (cached included) plus output tokens."""

    user_messages_hour: int | None = None
    user_messages_day: int | None = None
    user_tokens_hour: int | None = None
    user_tokens_day: int | None = None
    channel_messages_hour: int | None = None
    channel_messages_day: int | None = None
    channel_tokens_hour: int | None = None
    channel_tokens_day: int | None = None
    cost_usd_per_day: float | None = None
    exempt_moderators: bool = True

    @property
    def enabled(self) -> bool:
        return any(
            getattr(self, name) is not None
            for name in self.__dataclass_fields__
            if name != "exempt_moderators"
        )

    @classmethod
    def from_settings(cls, settings: QuotaSettings) -> QuotaLimits:
        return cls(**settings.model_dump())


@dataclass(frozen=True)
class Counter:
    """One counter of a message: whose (``user``/``chan``), which period, its limits."""

    scope: str  # "user" | "chan"
    period: str  # "hour" | "day"
    key: str
    notice: str
    messages: int | None
    tokens: int | None
    ttl: int


@dataclass(frozen=True)
class Refusal:
    """A limit reached: which (``user``/``chan``/``cost`` and ``messages``/``tokens``), its
    value, seconds until it resets, and whether the notice is due (first refusal)."""

    scope: str
    unit: str
    limit: float
    period: str
    resets_in: int
    notice: bool

    @property
    def rule(self) -> str:
        return f"quota:{self.scope}_{self.unit}_{self.period}"


def period_ids(now: datetime) -> dict[str, tuple[str, int]]:
    """``hour``/``day`` -> (the period id, seconds until it ends)."""
    now = now.astimezone(UTC)
    hour_end = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    day_end = now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    return {
        "hour": (f"h{now:%Y%m%d%H}", max(1, int((hour_end - now).total_seconds()))),
        "day": (f"d{now:%Y%m%d}", max(1, int((day_end - now).total_seconds()))),
    }


def counters(
    limits: QuotaLimits, message: ChatMessage, now: datetime, *, person: bool = True
) -> list[Counter]:
    """The four counters of ``message``: its author's and its channel's, per hour and day
    (only the channel's for a turn no person asked for: a live-chat batch or idle line)."""
    found = []
    periods = period_ids(now)
    owners = (("user", message.author.id), ("chan", message.conversation.channel))
    for scope, ident in owners if person else owners[1:]:
        long = "user" if scope == "user" else "channel"
        for period, (pid, left) in periods.items():
            found.append(
                Counter(
                    scope=scope,
                    period=period,
                    key=keys.usage(scope, message.platform, ident, pid),
                    notice=keys.usage_notice(scope, message.platform, ident, pid),
                    messages=getattr(limits, f"{long}_messages_{period}"),
                    tokens=getattr(limits, f"{long}_tokens_{period}"),
                    ttl=left + PERIOD_GRACE,
                )
            )
    return found


class Quotas:
    """The shared counters of one deployment (its bus namespace), and its daily spend."""

    def __init__(self, redis: Client, *, namespace: str = "main") -> None:
        self.redis = redis
        self.store = CounterStore(redis)
        self.namespace = namespace
        self.cost = CostLedger(redis, namespace)

    async def admit(
        self,
        limits: QuotaLimits,
        message: ChatMessage,
        now: datetime,
        *,
        exempt: bool,
        person: bool = True,
        reserve: Reservation | None = None,
    ) -> Refusal | None:
        """Count ``message`` and return None, or return the limit it reached (not counted).
        Under a cost cap an admitted turn holds ``reserve`` (its estimated cost) until its
        commit settles it."""
        if not limits.enabled:
            return None
        found = [] if exempt else counters(limits, message, now, person=person)
        cap = limits.cost_usd_per_day
        if not found and cap is None:
            return None
        day, left = cost_day(now)
        reserve = reserve or self.cost.reservation("", 0, now)
        cost_key, holds_key = self.cost.keys(reserve.day)
        notice_cost = keys.usage_notice(
            "cost", message.platform, message.conversation.channel, f"d{day}"
        )
        argv: list[int | str] = [len(found)]
        for c in found:
            argv += [_or_none(c.messages), _or_none(c.tokens), c.ttl]
        argv.append(-1 if cap is None else micro(cap))
        argv += [c.ttl - PERIOD_GRACE for c in found] + [left]
        argv += [reserve.hold, reserve.amount, f"{now.timestamp():.3f}"]
        argv += [f"{reserve.expiry:.3f}", reserve.ttl]
        script_keys = (
            [c.key for c in found]
            + [cost_key, holds_key]
            + [c.notice for c in found]
            + [notice_cost]
        )
        over, first, unit_code = await self.store.admit(script_keys, argv)
        if over == 0:
            return None
        if over == len(found) + 1:
            return Refusal("cost", "usd", cap or 0.0, "day", left, bool(first))
        counter = found[over - 1]
        unit = "messages" if unit_code == 1 else "tokens"
        limit = counter.messages if unit_code == 1 else counter.tokens
        return Refusal(
            counter.scope,
            unit,
            float(limit or 0),
            counter.period,
            counter.ttl - PERIOD_GRACE,
            bool(first),
        )

    def usage_counters(
        self,
        limits: QuotaLimits,
        message: ChatMessage,
        now: datetime,
        *,
        tokens: int,
        exempt: bool,
        person: bool = True,
    ) -> tuple[CounterAdd, ...]:
        """A turn's tokens, as changes of the commit that records its reply (its cost is the
        settlement of its reservation: ``CostLedger.settle_change``)."""
        if exempt or tokens <= 0:
            return ()
        return tuple(
            CounterAdd(c.key, "t", tokens, c.ttl)
            for c in counters(limits, message, now, person=person)
        )

    async def tokens_over(
        self, limits: QuotaLimits, message: ChatMessage, now: datetime, *, exempt: bool
    ) -> Refusal | None:
        """The first token limit of ``message``'s author or channel already reached (not a
        message count: a plugin's ``ctx.ask`` about a message is not another message), or None.
        One round trip, none when no token limit is set."""
        found = [] if exempt else [c for c in counters(limits, message, now) if c.tokens]
        if not found:
            return None
        rows = await self.store.read([c.key for c in found])
        for c, (_, tokens) in zip(found, rows, strict=True):
            if c.tokens is not None and tokens >= c.tokens:
                return Refusal(
                    c.scope, "tokens", float(c.tokens), c.period, c.ttl - PERIOD_GRACE, False
                )
        return None

    async def add_tokens(
        self,
        limits: QuotaLimits,
        message: ChatMessage,
        now: datetime,
        *,
        tokens: int,
        exempt: bool,
    ) -> None:
        """Count ``tokens`` spent outside a turn (a plugin's ``ctx.ask``) to ``message``'s
        author and channel, as a turn's tokens are counted (``usage_counters``)."""
        if exempt or tokens <= 0 or not limits.enabled:
            return
        found = counters(limits, message, now)
        await self.store.add_tokens([(c.key, c.ttl) for c in found], tokens)

    async def usage(self, message: ChatMessage, now: datetime) -> dict[str, tuple[int, int]]:
        """The author's (messages, tokens) this ``hour`` and ``day``: what ``/usage`` shows."""
        mine = [c for c in counters(QuotaLimits(), message, now) if c.scope == "user"]
        rows = await self.store.read([c.key for c in mine])
        return {c.period: row for c, row in zip(mine, rows, strict=True)}


def _or_none(value: int | None) -> int:
    return -1 if value is None else value
