"""The YouTube Data API quota budget and the poll cadence it allows (pure: no I/O, no clock).

A Google Cloud project gets 10,000 quota units a day by default, and every API call spends some:
``liveChatMessages.list`` 5, ``liveChatMessages.insert`` 50 (configurable; Google's table has
changed over time), the rest 1 -- even a call that fails. Polling at the server's suggested
``pollingIntervalMillis`` (a few seconds) would spend the whole day's budget in about an hour,
and once it is gone the bot can neither read nor answer until the reset. So the cadence is
planned instead of fixed:

- keep back enough units for the sends we expect (``reserved_sends`` inserts, minus the ones
  already made today) plus a small safety margin;
- spread what is left over the time the stream is still expected to run (``stream_hours`` from
  its start), or until the quota resets if that comes sooner;
- never poll faster than the server's ``pollingIntervalMillis``.

The plan is recomputed before every poll from the day's actual spend, so it corrects itself:
slow polls leave budget that later polls may use, extra sends slow polling down. Past the
expected length a stream is given ``overtime`` more at a time, so polling slows instead of
stopping.

Reading with ``liveChatMessages.streamList`` (stream.py) spends no polling quota: the server
pushes messages on one open connection. Google's newer reference page gives streamList a cost
of 5 units a call and does not say whether a call is a connection or a pushed response; we read
it as one charge per connection (``stream_cost``, charged before connecting like every call).
``plan_stream`` spaces reconnections the way ``plan_poll`` spaces polls, so even a server that
closed the stream every few seconds could not spend more than polling would; a stream that
stays open costs ``stream_cost`` once.

The quota day resets at midnight Pacific time (America/Los_Angeles, per Google's quota docs).
The US daylight-saving rule (since 2007) is computed here instead of read from the tz database,
so a slim container without ``tzdata`` still gets it right; the tests check it against zoneinfo.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta
from typing import Literal

# A quota reset is waited for a little longer than the clock says, for clock skew.
RESET_SLACK = timedelta(seconds=60)
_PST = timedelta(hours=-8)
_PDT = timedelta(hours=-7)


@dataclass(frozen=True)
class QuotaConfig:
    daily_units: int = 10_000
    list_cost: int = 5
    insert_cost: int = 50
    other_cost: int = 1
    stream_cost: int = 5  # per streamList connection
    reserved_sends: int = 40
    stream_hours: float = 4.0
    # How much longer to plan for once a stream runs past its expected length.
    overtime: timedelta = timedelta(hours=1)

    @property
    def safety_units(self) -> int:
        """Kept back for the odd lookup (broadcast search, token-less retries): 1% of the day."""
        return self.daily_units // 100

    def reserve(self, inserts_made: int) -> int:
        """Units held back for the sends still expected today."""
        return max(0, self.reserved_sends - inserts_made) * self.insert_cost + self.safety_units


@dataclass(frozen=True)
class Usage:
    """What today's quota day has spent so far (units) and how many sends it made."""

    units: int = 0
    inserts: int = 0


Limit = Literal["server", "budget", "exhausted"]


@dataclass(frozen=True)
class PollPlan:
    """When to poll next and why that soon (``limited_by``), for the logs and metrics."""

    delay: float
    limited_by: Limit
    spare_units: int  # units polling may still spend today
    horizon: float  # seconds the spare units must last


def may_spend(config: QuotaConfig, usage: Usage, cost: int) -> bool:
    """Whether a call of ``cost`` units still fits in today's budget."""
    return usage.units + cost <= config.daily_units


def plan_poll(
    config: QuotaConfig,
    usage: Usage,
    *,
    now: datetime,
    stream_started: datetime,
    server_interval: float,
) -> PollPlan:
    """The delay before the next ``liveChatMessages.list`` call."""
    until_reset = (next_reset(now) - now).total_seconds()
    spare = config.daily_units - usage.units - config.reserve(usage.inserts)
    polls = spare // config.list_cost
    if polls < 1:
        wait = until_reset + RESET_SLACK.total_seconds()
        return PollPlan(delay=wait, limited_by="exhausted", spare_units=max(spare, 0), horizon=0.0)
    expected_end = stream_started + timedelta(hours=config.stream_hours)
    stream_left = (expected_end - now).total_seconds()
    if stream_left <= 0:
        stream_left = config.overtime.total_seconds()
    horizon = min(stream_left, until_reset)
    budget_delay = horizon / polls
    if budget_delay > server_interval:
        return PollPlan(budget_delay, "budget", spare, horizon)
    return PollPlan(server_interval, "server", spare, horizon)


# Once the spare units are gone, a stream may still reconnect this rarely (from the send reserve):
# reading must not stop, and a connection costs a tenth of a reply.
EXHAUSTED_RECONNECT_S = 300.0


def plan_stream(
    config: QuotaConfig,
    usage: Usage,
    *,
    now: datetime,
    stream_started: datetime,
    min_interval: float,
) -> PollPlan:
    """The least time between the starts of two ``streamList`` connections."""
    if config.stream_cost <= 0:
        return PollPlan(min_interval, "server", max(0, config.daily_units - usage.units), 0.0)
    paced = replace(config, list_cost=config.stream_cost)
    plan = plan_poll(
        paced, usage, now=now, stream_started=stream_started, server_interval=min_interval
    )
    if plan.limited_by == "exhausted":
        return replace(plan, delay=EXHAUSTED_RECONNECT_S)
    return plan


# -- the quota day (midnight Pacific) -------------------------------------------------------------
def quota_day(now: datetime) -> str:
    """``YYYYMMDD`` of the Pacific-time date ``now`` falls on: the quota day it is charged to."""
    return (now.astimezone(UTC) + _pacific_offset(now)).strftime("%Y%m%d")


def next_reset(now: datetime) -> datetime:
    """The next midnight Pacific time after ``now``, as an aware UTC datetime."""
    local = now.astimezone(UTC) + _pacific_offset(now)
    midnight = datetime.combine(local.date() + timedelta(days=1), time(), tzinfo=UTC)
    # Daylight saving changes at 02:00 local, so a midnight is never ambiguous: its offset is
    # the offset of the instant eight hours after it reads as UTC (midnight PST in UTC).
    return midnight - _pacific_offset(midnight - _PST)


def _pacific_offset(instant: datetime) -> timedelta:
    """UTC offset of US Pacific time at ``instant`` (US rule since 2007)."""
    utc = instant.astimezone(UTC)
    # Starts the second Sunday of March at 02:00 PST (10:00 UTC), ends the first Sunday of
    # November at 02:00 PDT (09:00 UTC).
    start = datetime.combine(_sunday(utc.year, 3, 2), time(10), tzinfo=UTC)
    end = datetime.combine(_sunday(utc.year, 11, 1), time(9), tzinfo=UTC)
    return _PDT if start <= utc < end else _PST


def _sunday(year: int, month: int, nth: int) -> date:
    first = date(year, month, 1)
    return first + timedelta(days=(6 - first.weekday()) % 7 + 7 * (nth - 1))
