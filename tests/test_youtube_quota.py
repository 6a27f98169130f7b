"""The quota plan: the Pacific quota day, the reserve for sends, and the adaptive poll cadence."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from adapters.youtube.quota import (
    EXHAUSTED_RECONNECT_S,
    RESET_SLACK,
    QuotaConfig,
    Usage,
    may_spend,
    next_reset,
    plan_poll,
    plan_stream,
    quota_day,
)

PACIFIC = ZoneInfo("America/Los_Angeles")
CONFIG = QuotaConfig()  # 10,000 units, list 5, insert 50, 40 reserved sends, 4-hour streams
START = datetime(2025, 6, 2, 17, 0, tzinfo=UTC)  # 10:00 PDT


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("now", "day", "reset"),
    [
        # summer (PDT, UTC-7): midnight Pacific is 07:00 UTC
        ("2025-06-02T17:00", "20250602", "2025-06-03T07:00"),
        ("2025-06-03T06:59", "20250602", "2025-06-03T07:00"),
        ("2025-06-03T07:00", "20250603", "2025-06-04T07:00"),
        # winter (PST, UTC-8): midnight Pacific is 08:00 UTC
        ("2025-01-15T07:59", "20250114", "2025-01-15T08:00"),
        ("2025-01-15T08:00", "20250115", "2025-01-16T08:00"),
        # the day daylight saving starts (2025-03-09) and the day it ends (2025-11-02)
        ("2025-03-09T09:00", "20250309", "2025-03-10T07:00"),
        ("2025-03-08T12:00", "20250308", "2025-03-09T08:00"),
        ("2025-11-02T06:30", "20251101", "2025-11-02T07:00"),
        ("2025-11-02T12:00", "20251102", "2025-11-03T08:00"),
        # New Year's Eve in Pacific time is already the new year in UTC
        ("2026-01-01T03:00", "20251231", "2026-01-01T08:00"),
    ],
)
def test_quota_day_and_reset_follow_pacific_midnight(now: str, day: str, reset: str) -> None:
    assert quota_day(_utc(now)) == day
    assert next_reset(_utc(now)) == _utc(reset)


def test_pacific_rule_matches_the_tz_database_every_hour_for_two_years() -> None:
    instant = datetime(2024, 1, 1, tzinfo=UTC)
    while instant < datetime(2026, 1, 1, tzinfo=UTC):
        local = instant.astimezone(PACIFIC)
        assert quota_day(instant) == local.strftime("%Y%m%d"), instant
        midnight = datetime.combine(local.date() + timedelta(days=1), datetime.min.time(), PACIFIC)
        assert next_reset(instant) == midnight.astimezone(UTC), instant
        instant += timedelta(minutes=59)


def test_reserve_counts_down_with_the_sends_made() -> None:
    assert CONFIG.safety_units == 100
    assert CONFIG.reserve(0) == 40 * 50 + 100
    assert CONFIG.reserve(25) == 15 * 50 + 100
    assert CONFIG.reserve(60) == 100  # more sends than expected: nothing left to keep back


@pytest.mark.parametrize(
    ("usage", "elapsed_h", "server_s", "limited_by", "delay"),
    [
        # a fresh day at the start of a 4-hour stream: (10,000 - 2,100) / 5 = 1,580 polls
        # spread over 14,400 s -> one every 9.11 s, slower than the server's 5 s
        (Usage(0, 0), 0, 5.0, "budget", 14_400 / 1_580),
        # the server asks for more time than the budget needs: the server wins
        (Usage(0, 0), 0, 12.0, "server", 12.0),
        # halfway through with half the polling budget left: same cadence
        (Usage(3_950, 0), 2, 5.0, "budget", 7_200 / 790),
        # halfway through, spent too fast (the bot restarted twice): slower
        (Usage(6_000, 0), 2, 5.0, "budget", 7_200 / 380),
        # sends are paid from the reserve, not from polling
        (Usage(3_950 + 20 * 50, 20), 2, 5.0, "budget", 7_200 / 790),
        # lots of budget, little time left: never faster than the server allows
        (Usage(0, 0), 3.99, 5.0, "server", 5.0),
        # past the expected length: plan an hour of overtime at a time
        (Usage(9_000, 40), 5, 5.0, "budget", 3_600 / 180),
    ],
)
def test_plan_spreads_the_spare_budget_over_the_stream(
    usage: Usage, elapsed_h: float, server_s: float, limited_by: str, delay: float
) -> None:
    now = START + timedelta(hours=elapsed_h)
    plan = plan_poll(CONFIG, usage, now=now, stream_started=START, server_interval=server_s)
    assert plan.limited_by == limited_by
    assert plan.delay == pytest.approx(delay)


def test_plan_waits_for_the_reset_when_only_the_reserve_is_left() -> None:
    usage = Usage(units=7_896, inserts=0)  # 4 units spare: less than one poll
    plan = plan_poll(CONFIG, usage, now=START, stream_started=START, server_interval=5.0)
    assert plan.limited_by == "exhausted"
    assert plan.delay == (next_reset(START) - START + RESET_SLACK).total_seconds()


def test_a_reset_before_the_stream_ends_lets_polling_run_faster() -> None:
    late = datetime(2025, 6, 3, 6, 0, tzinfo=UTC)  # 23:00 PDT, one hour before the reset
    usage = Usage(units=7_000, inserts=10)
    plan = plan_poll(CONFIG, usage, now=late, stream_started=late, server_interval=1.0)
    spare = 10_000 - 7_000 - (30 * 50 + 100)
    assert plan.horizon == 3_600
    assert plan.delay == pytest.approx(3_600 / (spare // 5))


def test_may_spend_never_goes_past_the_daily_budget() -> None:
    assert may_spend(CONFIG, Usage(9_950, 0), 50)
    assert not may_spend(CONFIG, Usage(9_951, 0), 50)


def test_following_the_plan_for_a_whole_stream_stays_within_budget() -> None:
    """Simulate the plan alone: 4 hours of polls and 40 sends end with quota to spare."""
    now, usage, polls = START, Usage(), 0
    while now < START + timedelta(hours=4):
        plan = plan_poll(CONFIG, usage, now=now, stream_started=START, server_interval=5.0)
        assert plan.limited_by != "exhausted"
        usage = Usage(usage.units + CONFIG.list_cost, usage.inserts)
        polls += 1
        if polls % 40 == 0:
            usage = Usage(usage.units + CONFIG.insert_cost, usage.inserts + 1)
        now += timedelta(seconds=plan.delay)
    assert 10_000 - usage.units >= CONFIG.safety_units
    assert polls >= 1_575  # as many polls as the budget allows (1,580 planned)


def test_stream_reconnects_are_paced_like_polls_and_never_stop() -> None:
    """A streamList connection costs ``stream_cost``: reconnecting is spaced as polling would
    be (so a server closing the stream every few seconds cannot spend more than polling), it
    is free to reconnect at once when connections cost nothing, and once only the send reserve
    is left a stream still reconnects every five minutes."""
    fresh = plan_stream(CONFIG, Usage(), now=START, stream_started=START, min_interval=1.0)
    assert fresh.limited_by == "budget" and fresh.delay == pytest.approx(14_400 / 1_580)
    free = replace(CONFIG, stream_cost=0)
    cheap = plan_stream(free, Usage(9_999, 0), now=START, stream_started=START, min_interval=1.0)
    assert (cheap.limited_by, cheap.delay) == ("server", 1.0)
    spent = plan_stream(CONFIG, Usage(7_896, 0), now=START, stream_started=START, min_interval=1.0)
    assert (spent.limited_by, spent.delay) == ("exhausted", EXHAUSTED_RECONNECT_S)
    late = START + timedelta(hours=3, minutes=59)
    rushed = plan_stream(CONFIG, Usage(), now=late, stream_started=START, min_interval=1.0)
    assert (rushed.limited_by, rushed.delay) == ("server", 1.0)
