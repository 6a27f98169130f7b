"""The reply budget: how a day's YouTube quota is split between reading the chat and replying.

A Google Cloud project gets 10,000 quota units a day by default and every call spends some,
failed ones too: ``liveChatMessages.list`` 5, ``liveChatMessages.insert`` 50 (one per piece of a
reply, up to ``YOUTUBE_MAX_PIECES``), a ``streamList`` connection 5 (our reading of Google's
pages), the rest 1. A busy stream has far more mentions than the day can answer, and once the
units are gone the bot can neither read nor answer until the reset. So the day is planned, from
the day's actual spend (and the replies in flight, "held"), the time to the reset and the
stream's expected remaining length, in this order of priority:

1. **Reading** keeps enough to read until the reset (``reading``): over the stream's expected
   remaining length (the *horizon*) a stream reconnect every ``STREAM_FLOOR_S`` or a poll every
   ``YOUTUBE_POLL_FLOOR_SECONDS`` (the floor cadence the reading plan is guaranteed), after it a
   reconnect every ``STREAM_TAIL_S`` or a poll every ``POLL_TAIL_S``, and the broadcast lookups
   between streams. Replies never touch it, so reading never stops before the reset. Where the
   reader may fall back to polling (``YOUTUBE_READ_MODE=auto``, ``poll_reserve``), the reserve is
   sized for polling even while the stream is read: a fallback late in the stream still finds
   what polls at the floor need for the rest of it.
2. **Mentions** come before anything unprompted: ``mentions`` keeps units for the mentions
   expected over the horizon (the observed mention rate, at least ``YOUTUBE_RESERVED_SENDS``
   replies per ``YOUTUBE_STREAM_HOURS``), each at the day's average reply cost (the worst
   case, ``YOUTUBE_MAX_PIECES`` inserts, until a few replies were sent; a turn always
   *reserves* the worst case). A mention is still answered while anything beyond the reading
   reserve is left (``reply_limit``); only then is it declined (``quota``). Mention replies
   are **paced** over the stream: by the time a fraction *f* of the stream (elapsed over elapsed
   plus horizon) has gone by, replies may have spent *f* of their pool (what they spent plus
   what is left beyond the reading reserve) and ``PACE_BURST`` replies more (``pace_left``).
   While the pace is closed (``mentions_open`` False) mentions wait in the engagement ledger and
   go out together, several mentioners in one message, when it opens again: the last hour of
   the stream still has replies, and a busy stream addresses many mentions per insert.
3. What is left (``free``) pays for unprompted turns -- room batches, idle lines, thanks -- spread
   evenly over the horizon (``room_gap`` between two of them, each at the expected reply
   cost); while polling, half of it lets
   polls run faster than the floor instead ("reading and replying split the day").

Everything is recomputed from the ledger every time it is used, so the plan corrects itself: a
quiet hour leaves units for later, a burst of mentions holds room batches back, and a stream that
runs past its expected length gets ``overtime`` more at a time, so the cadence slows instead of
stopping. Pure: no I/O, no clock; ``grant`` is the reservation rule the Redis ledger's script
applies atomically (bot/quota/ledger.py) and the offline replay applies in memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from bot.quota.day import RESET_SLACK, next_reset
from bot.settings import YouTubeSettings

Reading = Literal["stream", "poll"]
Kind = Literal["mention", "room"]
Limit = Literal["server", "budget", "exhausted"]

STREAM_FLOOR_S = 300.0  # a stream may always reconnect this often over the horizon
STREAM_TAIL_S = 1800.0  # ... and this often after it, until the reset
POLL_TAIL_S = 300.0  # a poll this often after the horizon, until the reset
RATE_WINDOW_S = 900.0  # the observed mention rate is taken over at least this long
POLL_SHARE = 0.5  # of the free units, what polling faster than the floor may use
PACE_BURST = 3  # replies mentions may run ahead of the even pace (a quiet start, a burst)
MIN_REPLIES_SEEN = 3  # replies sent before their average cost replaces the worst case
# Once nothing at all is left, a stream still tries to reconnect this rarely (the charge is
# refused until the reset, which the reader then waits for).
EXHAUSTED_RECONNECT_S = 300.0
NEVER_S = 1e12  # "no unprompted turn now", as a number a Redis script can compare


@dataclass(frozen=True)
class QuotaConfig:
    daily_units: int = 10_000
    list_cost: int = 5
    insert_cost: int = 50
    other_cost: int = 1
    moderation_cost: int = 50  # a message deleted, a ban added or lifted
    stream_cost: int = 5  # per streamList connection
    max_pieces: int = 2  # messages one reply may take (each an insert)
    reserved_sends: int = 40  # replies a whole stream keeps for mentions, at least
    stream_hours: float = 4.0
    poll_floor_seconds: float = 30.0
    lookup_seconds: float = 300.0  # between broadcast lookups while no chat is live
    poll_reserve: bool = False  # the reading reserve is sized for polling in any read mode
    # How much longer to plan for once a stream runs past its expected length.
    overtime: timedelta = timedelta(hours=1)

    @classmethod
    def from_settings(cls, settings: YouTubeSettings) -> QuotaConfig:
        return cls(
            daily_units=settings.daily_quota,
            list_cost=settings.cost_list,
            insert_cost=settings.cost_insert,
            other_cost=settings.cost_other,
            moderation_cost=settings.cost_moderation,
            stream_cost=settings.cost_stream,
            max_pieces=settings.max_pieces,
            reserved_sends=settings.reserved_sends,
            stream_hours=settings.stream_hours,
            poll_floor_seconds=settings.poll_floor_seconds,
            lookup_seconds=settings.broadcast_check_seconds,
            poll_reserve=settings.read_mode != "stream",
        )

    @property
    def safety_units(self) -> int:
        """Kept back for the odd lookup (broadcast search, token-less retries): 1% of the day."""
        return self.daily_units // 100

    @property
    def reply_units(self) -> int:
        """What one reply may cost at most: every piece an insert."""
        return self.max_pieces * self.insert_cost


@dataclass(frozen=True)
class Usage:
    """The day's spend (units, inserts), the units held for replies decided, not yet sent, and
    the replies sent (their average cost is what the plan expects of the next ones)."""

    units: int = 0
    inserts: int = 0
    held: int = 0
    replies: int = 0


@dataclass(frozen=True)
class StreamView:
    """The chat being read: when its stream started, how it is read, mentions seen so far."""

    started: datetime
    reading: Reading = "poll"
    mentions: int = 0
    counting_since: datetime | None = None  # when the mentions started being counted


@dataclass(frozen=True)
class Request:
    """A reservation: ``want`` units (at least ``minimum``) while spent + held + them stays
    within ``limit``; ``gap`` (>= 0) paces unprompted turns project-wide."""

    want: int
    minimum: int
    limit: int
    gap: float = -1.0


@dataclass(frozen=True)
class Budget:
    """The day's plan at ``now`` (units; seconds)."""

    now: datetime
    until_reset: float
    horizon: float  # the stream's expected remaining length (or overtime), before the reset
    unspent: int  # daily - spent
    remaining: int  # daily - spent - held
    reading: int  # kept for reading until the reset
    reading_now: int  # of which for the horizon (the floor cadence)
    mentions: int  # kept for the mentions expected over the horizon
    expected_mentions: float
    free: int  # beyond safety, reading and mentions (negative: mentions eat into it)
    room: int  # of the free units, what unprompted turns may use
    room_gap: float  # least seconds between two unprompted turns (NEVER_S: none now)
    reply_limit: int  # spent + held may reach this for a mention
    room_limit: int  # ... for an unprompted turn
    piece_units: int
    reply_units: int  # what a reply may cost at most: what a turn reserves
    reply_cost: int  # what a reply is expected to cost (the day's average so far)
    reading_mode: Reading
    daily: int
    safety: int
    pace_left: int = 0  # units mention replies may use now by the pace over the stream

    @property
    def mentions_open(self) -> bool:
        """Whether a mention may go to its reservation now: the pace leaves an expected reply
        (else it waits, to be answered with others), or nothing is left for replies at all
        (then waiting cannot help: the reservation declines it ``quota``)."""
        return self.replies_left < self.piece_units or self.pace_left >= self.reply_cost

    @property
    def intact(self) -> bool:
        """The reading reserve is all there (something else may have spent the project's
        units: another app, a restart that lost count)."""
        return self.remaining >= self.reading

    @property
    def replies_left(self) -> int:
        """Units a mention may still use (everything beyond the reading reserve)."""
        return max(0, self.reply_limit - (self.daily - self.remaining))

    def request(self, kind: Kind) -> Request:
        if kind == "mention":
            return Request(self.reply_units, self.piece_units, self.reply_limit)
        return Request(self.reply_units, self.piece_units, self.room_limit, self.room_gap)

    def room_open(self, unprompted_at: float | None, now: float) -> bool:
        """Whether an unprompted turn may go now (``now``/``unprompted_at``: epoch seconds)."""
        if self.room < self.piece_units:
            return False
        return unprompted_at is None or now - unprompted_at >= self.room_gap


def plan_budget(config: QuotaConfig, usage: Usage, stream: StreamView, now: datetime) -> Budget:
    until_reset = (next_reset(now) - now).total_seconds()
    left = (stream.started + timedelta(hours=config.stream_hours) - now).total_seconds()
    if left <= 0:
        left = config.overtime.total_seconds()
    horizon = max(1.0, min(left, until_reset))
    tail = max(0.0, until_reset - horizon)
    reserve_as: Reading = "poll" if config.poll_reserve else stream.reading
    if reserve_as == "poll":
        reading_now = _calls(horizon, config.poll_floor_seconds) * config.list_cost
    else:
        reading_now = _calls(horizon, STREAM_FLOOR_S) * config.stream_cost
    reading = reading_now + tail_reading(config, reserve_as, tail)
    expected = _mention_rate(config, stream, now) * horizon / 3600
    cost = _reply_cost(config, usage)
    mentions = math.ceil(expected - 1e-9) * cost
    unspent = config.daily_units - usage.units
    remaining = unspent - usage.held
    reply_limit = config.daily_units - config.safety_units - reading
    free = remaining - config.safety_units - reading - mentions
    room = max(0, free)
    if stream.reading == "poll":
        room = int(room * (1 - POLL_SHARE))
    gap = cost * horizon / room if room >= config.insert_cost else NEVER_S
    held = usage.held
    replied = usage.inserts * config.insert_cost
    pool = replied + max(0, reply_limit - usage.units - held)
    elapsed = max(0.0, (now - stream.started).total_seconds())
    paced = pool * elapsed / (elapsed + horizon) + PACE_BURST * cost
    return Budget(
        now=now,
        until_reset=until_reset,
        horizon=horizon,
        unspent=unspent,
        remaining=remaining,
        reading=reading,
        reading_now=reading_now,
        mentions=mentions,
        expected_mentions=expected,
        free=free,
        room=room,
        room_gap=gap,
        reply_limit=reply_limit,
        room_limit=config.daily_units - remaining + room,
        piece_units=config.insert_cost,
        reply_units=config.reply_units,
        reply_cost=cost,
        reading_mode=stream.reading,
        daily=config.daily_units,
        safety=config.safety_units,
        pace_left=int(paced) - replied - held,
    )


def tail_reading(config: QuotaConfig, reading: Reading, seconds: float) -> int:
    """What reading needs for ``seconds`` after the stream's expected end: a reconnect or a
    poll now and then in case it runs on, and the broadcast lookups between streams."""
    if reading == "poll":
        reads = _calls(seconds, POLL_TAIL_S) * config.list_cost
    else:
        reads = _calls(seconds, STREAM_TAIL_S) * config.stream_cost
    return reads + _calls(seconds, config.lookup_seconds) * config.other_cost


def grant(request: Request, usage: Usage, unprompted_at: float | None, now: float) -> int:
    """Units a reservation gets (0: refused). The Redis ledger's script applies the same rule."""
    if request.gap >= 0 and unprompted_at is not None and now - unprompted_at < request.gap:
        return 0
    got = min(request.want, request.limit - usage.units - usage.held)
    return got if got >= request.minimum else 0


# -- the reading cadence --------------------------------------------------------------------------
@dataclass(frozen=True)
class PollPlan:
    """When to read next and why that soon (``limited_by``), for the logs and metrics."""

    delay: float
    limited_by: Limit
    spare_units: int  # units reading may spend over the horizon
    horizon: float  # seconds they must last


def plan_poll(config: QuotaConfig, budget: Budget, *, server_interval: float) -> PollPlan:
    """The delay before the next ``liveChatMessages.list`` call: the floor cadence over the
    horizon plus half of the free units, never faster than the server's interval."""
    if budget.unspent < config.list_cost:
        wait = budget.until_reset + RESET_SLACK.total_seconds()
        return PollPlan(wait, "exhausted", max(budget.unspent, 0), 0.0)
    units = _reading_units(budget, int(max(0, budget.free) * POLL_SHARE))
    return _paced(units, config.list_cost, budget.horizon, server_interval)


def plan_stream(config: QuotaConfig, budget: Budget, *, min_interval: float) -> PollPlan:
    """The least time between the starts of two ``streamList`` connections: at most
    ``STREAM_FLOOR_S`` while the reserve is there, sooner from what mentions could use
    (reading comes first, and a connection costs a tenth of a reply)."""
    if config.stream_cost <= 0:
        return PollPlan(min_interval, "server", max(0, budget.unspent), 0.0)
    if budget.unspent < config.stream_cost:
        return PollPlan(EXHAUSTED_RECONNECT_S, "exhausted", max(budget.unspent, 0), 0.0)
    beyond = budget.remaining - budget.safety - budget.reading
    units = _reading_units(budget, max(0, beyond))
    return _paced(units, config.stream_cost, budget.horizon, min_interval)


def _reading_units(budget: Budget, extra: int) -> int:
    """Units reading may spend over the horizon: its floor plus ``extra``. When the reserve is
    not all there (something else spent it, or the stream runs on past its overtime), what is
    left is spread evenly until the reset: reading slows down, it never runs dry early."""
    if budget.intact:
        return budget.reading_now + extra
    return int(max(0, budget.remaining) * budget.horizon / budget.until_reset)


def _paced(units: int, cost: int, horizon: float, fastest: float) -> PollPlan:
    calls = units / cost
    budget_delay = horizon / calls if calls >= 1 else horizon
    if budget_delay > fastest:
        return PollPlan(budget_delay, "budget", units, horizon)
    return PollPlan(fastest, "server", units, horizon)


def _reply_cost(config: QuotaConfig, usage: Usage) -> int:
    """What the next replies are expected to cost: the day's average once a few were sent (most
    answers fit in one message), the worst case before."""
    if usage.replies < MIN_REPLIES_SEEN:
        return config.reply_units
    average = math.ceil(usage.inserts * config.insert_cost / usage.replies)
    return min(config.reply_units, max(config.insert_cost, average))


def _calls(seconds: float, every: float) -> int:
    return math.ceil(seconds / every - 1e-9) if seconds > 0 else 0


def _mention_rate(config: QuotaConfig, stream: StreamView, now: datetime) -> float:
    """Mentions per hour to plan for: the observed rate, at least the reserve's."""
    floor = config.reserved_sends / config.stream_hours
    if stream.counting_since is None or stream.mentions <= 0:
        return floor
    elapsed = max((now - stream.counting_since).total_seconds(), RATE_WINDOW_S)
    return max(floor, stream.mentions * 3600 / elapsed)
