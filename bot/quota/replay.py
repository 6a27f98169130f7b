"""YouTube's quota in the offline replay: the reply budget the workers and the gateway run, over
a trace, in simulated time.

``chorus replay`` judged YouTube by a made-up per-30 s send limit; what really limits a YouTube
bot is the day's quota (bot/quota/plan.py). So the replay runs the same pieces the deployment
runs -- ``plan_budget``/``plan_poll`` (the plan), ``ReplyGate`` (which turns may go), the ledger's
rules (``MemoryLedger``: holds, the pacing of unprompted turns, inserts paid from their hold) --
on the trace's clock, and reports what reading cost in the chosen mode (one stream connection,
or the planned polls, which also delay every message to the next poll), what the replies cost
by pieces, the plan at the start, the room batches held back for the budget, the mentions
declined ``quota``, and what is left of the day at the end of the trace. The trace's t = 0 is
``START`` (10:00 Pacific, fourteen hours before the quota resets) unless told otherwise, and the
stream is taken to start then.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from bot.events import ConversationKey
from bot.quota.day import next_reset
from bot.quota.gate import ReplyGate
from bot.quota.plan import (
    Budget,
    Kind,
    QuotaConfig,
    Reading,
    StreamView,
    plan_poll,
    tail_reading,
)
from bot.quota.view import MemoryLedger, Refused

START = datetime(2025, 6, 2, 17, 0, tzinfo=UTC)
PLATFORM = "youtube"
PIECE_CHARS = 200  # a YouTube chat message
SERVER_POLL_S = 5.0  # pollingIntervalMillis as YouTube usually answers it


@dataclass(frozen=True)
class HourQuota:
    """One hour of the trace: reads made in it (polls, or stream connections), and at its end
    the units left (unspent, not held) and what reading needs of them until the reset."""

    reads: int
    left: int
    reading_needs: int


@dataclass(frozen=True)
class QuotaReport:
    reading: Reading
    daily_units: int
    lookups: int  # units: the channel and broadcast lookups
    connections: int
    polls: int
    read_units: int  # lookups, connections and polls
    replies_by_pieces: dict[int, int]
    reply_units: int
    spent: int
    left: int  # at the end of the trace
    reading_reserve_end: int  # what reading needs from the end until the reset
    replies_ran_out_at: float | None  # when a mention was first declined for quota (seconds)
    start: Budget  # the plan when the trace started
    room_turns: int  # unprompted turns the budget paid for
    held_episodes: int  # times a channel's room batch waited for the budget
    held_seconds: float
    held_at_reservation: int  # decided, then lost the reservation (another turn took the room)
    cut_short: int  # replies whose next piece the budget refused
    slowest_poll: float  # the longest wait between two polls while the stream ran (poll mode)
    reading_stopped: bool  # a read the day could not pay for
    hours: tuple[HourQuota, ...] = ()

    @property
    def inserts(self) -> int:
        return sum(pieces * n for pieces, n in self.replies_by_pieces.items())

    @property
    def ok(self) -> bool:
        return self.spent <= self.daily_units and not self.reading_stopped


class QuotaSim:
    """One YouTube project's quota over a replay."""

    def __init__(
        self, config: QuotaConfig, *, reading: Reading = "stream", start: datetime = START
    ) -> None:
        self.config = config
        self.reading = reading
        self.start = start
        self.ledger = MemoryLedger(config)
        self.ledger.stream = StreamView(start, reading, 0, start)
        self.t = 0.0
        self.gate = ReplyGate(config, clock=lambda: self.epoch(self.t), platform=PLATFORM)
        self.next_poll: float | None = None
        self.connections = self.polls = self.room_turns = self.cut_short = 0
        self.held_at_reservation = 0
        self.by_pieces: Counter[int] = Counter()
        self.held: dict[ConversationKey, float] = {}  # channel -> since when
        self.held_episodes = 0
        self.held_seconds = 0.0
        self.slowest_poll = 0.0
        self.reading_stopped = False
        self.plan_at_start: Budget | None = None
        self.ran_out_at: float | None = None
        self.hours: list[HourQuota] = []  # the ledger at the end of each hour of the trace

    @property
    def reserve_as(self) -> Reading:
        """How the reading reserve is sized: for polling wherever the reader may fall back."""
        return "poll" if self.config.poll_reserve else self.reading

    def covers(self, platform: str) -> bool:
        return platform == PLATFORM

    def at(self, t: float) -> datetime:
        return self.start + timedelta(seconds=t)

    def epoch(self, t: float) -> float:
        return self.start.timestamp() + t

    # -- the gateway: reading ---------------------------------------------------------------------
    def begin(self) -> None:
        """t = 0: the channel and broadcast lookups, then a stream connection or the first poll."""
        self.ledger.charge(2 * self.config.other_cost, "lookup")
        if self.reading == "stream":
            self._read(self.config.stream_cost)
            self.connections += 1
        else:
            self.next_poll = 0.0
        self.plan_at_start = self.refresh(0.0)

    def poll(self, t: float) -> None:
        """A poll at ``t`` (poll mode): charged, and the next one planned."""
        self.t = t
        self._read(self.config.list_cost)
        self.polls += 1
        budget = self.ledger.view(self.at(t)).budget(self.config, self.at(t))
        plan = plan_poll(self.config, budget, server_interval=SERVER_POLL_S)
        if plan.limited_by == "exhausted":
            self.reading_stopped = True
        end = self.config.stream_hours * 3600
        if t < end:  # the part of the wait while the stream runs
            self.slowest_poll = max(self.slowest_poll, min(plan.delay, end - t))
        self.next_poll = t + plan.delay

    def _read(self, cost: int) -> None:
        if self.ledger.units + cost > self.config.daily_units:
            self.reading_stopped = True
            return
        self.ledger.charge(cost, "read")

    # -- the workers: the gate --------------------------------------------------------------------
    def refresh(self, t: float) -> Budget:
        """The workers' once-a-second read of the ledger (with the mentions seen since)."""
        self.t = t
        stream = self.ledger.stream
        assert stream is not None
        self.ledger.stream = replace(stream, mentions=stream.mentions + self.gate.take_mentions())
        budget = self.gate.update(self.ledger.view(self.at(t)), self.epoch(t))
        if t >= 3600 * (len(self.hours) + 1):
            reads = self.polls if self.reading == "poll" else self.connections
            before = sum(h.reads for h in self.hours)
            needs = budget.reading
            if t >= self.config.stream_hours * 3600:  # past its expected end: the tail's reads
                needs = tail_reading(self.config, self.reserve_as, budget.until_reset)
            self.hours.append(HourQuota(reads - before, budget.remaining, needs))
        return budget

    def mentions_open(self) -> bool:
        """Whether a mention may be answered on its own now (else it waits to go with others)."""
        return self.gate.mentions_open(PLATFORM)

    def room_open(self, t: float) -> bool:
        return self.gate.room_open(PLATFORM, self.epoch(t))

    def held_back(self, conv: ConversationKey, t: float, *, room: bool, ready: bool) -> None:
        """Track a channel's room batch waiting for the budget (as ``LiveChat.tick`` logs it)."""
        if room:
            since = self.held.pop(conv, None)
            if since is not None:
                self.held_seconds += t - since
        elif ready and conv not in self.held:
            self.held[conv] = t
            self.held_episodes += 1

    def decided(self, kind: Kind, t: float) -> None:
        if kind == "room":
            self.gate.took_room(self.epoch(t))

    def reserve(self, hold: str, kind: Kind, t: float) -> bool:
        """The router's reservation before the model runs (False: declined or held back)."""
        self.t = t
        got = self.ledger.reserve(hold, self.gate.request(kind), self.at(t))
        if got and kind == "room":
            self.room_turns += 1
            self.gate.took_room(self.epoch(t))
        elif not got and kind == "room":
            self.held_at_reservation += 1
        elif not got and self.ran_out_at is None:
            self.ran_out_at = t
        return got > 0

    # -- the gateway: sending ---------------------------------------------------------------------
    def send(self, hold: str | None, text: str, t: float) -> int:
        """Insert the reply's pieces, paid from its hold; the pieces sent."""
        pieces = min(self.config.max_pieces, max(1, math.ceil(len(text) / PIECE_CHARS)))
        sent = 0
        for _ in range(pieces):
            try:
                self.ledger.charge_insert(hold, self.config.insert_cost, self.at(t))
            except Refused:
                self.cut_short += 1
                break
            sent += 1
        self.ledger.settle(hold, sent=sent > 0)
        if sent:
            self.by_pieces[sent] += 1
        return sent

    def report(self, end: float) -> QuotaReport:
        for conv in list(self.held):
            self.held_back(conv, end, room=True, ready=False)
        view = self.ledger.view(self.at(end))
        by_kind = view.by_kind
        to_reset = (next_reset(self.at(end)) - self.at(end)).total_seconds()
        reading_end = tail_reading(self.config, self.reserve_as, to_reset)
        assert self.plan_at_start is not None
        return QuotaReport(
            reading=self.reading,
            daily_units=self.config.daily_units,
            lookups=by_kind["lookup"],
            connections=self.connections,
            polls=self.polls,
            read_units=by_kind["lookup"] + by_kind["read"],
            replies_by_pieces=dict(sorted(self.by_pieces.items())),
            reply_units=by_kind["reply"],
            spent=self.ledger.units,
            left=self.config.daily_units - self.ledger.units,
            reading_reserve_end=reading_end,
            replies_ran_out_at=self.ran_out_at,
            start=self.plan_at_start,
            room_turns=self.room_turns,
            held_episodes=self.held_episodes,
            held_seconds=self.held_seconds,
            held_at_reservation=self.held_at_reservation,
            cut_short=self.cut_short,
            slowest_poll=self.slowest_poll,
            reading_stopped=self.reading_stopped,
            hours=tuple(self.hours),
        )


def format_quota(q: QuotaReport) -> list[str]:
    """YouTube's quota as a Markdown table."""
    s = q.start
    pieces = ", ".join(
        f"{n} of {p} piece{'s' if p > 1 else ''}" for p, n in q.replies_by_pieces.items()
    )
    if q.reading == "stream":
        reading = f"stream: {q.connections} connection(s) + lookups = {q.read_units:,} units"
    else:
        reading = (
            f"poll: {q.polls:,} polls + lookups = {q.read_units:,} units "
            f"(slowest gap {q.slowest_poll:.0f} s)"
        )
    return [
        f"| YouTube quota ({q.daily_units:,} units a day) | value |",
        "|---|---|",
        f"| reading ({q.reading}) | {reading} |",
        f"| replies | {q.inserts:,} inserts = {q.reply_units:,} units ({pieces or 'none'}); "
        f"{q.cut_short} cut short |",
        f"| plan at the start | reading reserve {s.reading:,}, mention reserve {s.mentions:,} "
        f"({s.expected_mentions:.0f} expected), room for unprompted turns {s.room:,} "
        + (f"(one per {s.room_gap:.0f} s) |" if s.room >= s.piece_units else "(none) |"),
        f"| unprompted turns paid | {q.room_turns} |",
        "| mentions first declined for quota | "
        + (
            f"{_clock(q.replies_ran_out_at)} into the trace |"
            if q.replies_ran_out_at
            else "never |"
        ),
        f"| room batches held back for the budget | {q.held_episodes} times, "
        f"{q.held_seconds / 60:.0f} minutes in all; {q.held_at_reservation} lost the race |",
        f"| spent / left at the end | {q.spent:,} / {q.left:,} units (reading until the reset "
        f"needs {q.reading_reserve_end:,}, then the day starts over) |",
        f"| reading never stopped; within the day | {'yes' if q.ok else 'NO'} |",
    ]


def _clock(seconds: float) -> str:
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"
