"""The quota day of Google's APIs: it resets at midnight Pacific time (America/Los_Angeles).

The US daylight-saving rule (since 2007) is computed here instead of read from the tz database,
so a slim container without ``tzdata`` still gets it right; the tests check it against zoneinfo.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

# A quota reset is waited for a little longer than the clock says, for clock skew.
RESET_SLACK = timedelta(seconds=60)
_PST = timedelta(hours=-8)
_PDT = timedelta(hours=-7)


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
