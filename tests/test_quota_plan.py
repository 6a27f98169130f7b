"""The reply budget (bot/quota/plan.py): the Pacific quota day, the split of the day between
reading and replying, the mention reserve, the pacing of unprompted turns, the reading cadence."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from bot.quota.day import RESET_SLACK, next_reset, quota_day
from bot.quota.plan import (
    EXHAUSTED_RECONNECT_S,
    NEVER_S,
    STREAM_FLOOR_S,
    Budget,
    QuotaConfig,
    Request,
    StreamView,
    Usage,
    grant,
    plan_budget,
    plan_poll,
    plan_stream,
)
from bot.settings import YouTubeSettings

PACIFIC = ZoneInfo("America/Los_Angeles")
CONFIG = QuotaConfig()  # 10,000 units, list 5, insert 50 x 2 pieces, 40 reserved sends, 4 hours
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


def _budget(
    usage: Usage | None = None,
    *,
    hours: float = 0.0,
    mode: str = "stream",
    mentions: int = 0,
    config: QuotaConfig = CONFIG,
) -> Budget:
    now = START + timedelta(hours=hours)
    stream = StreamView(START, "stream" if mode == "stream" else "poll", mentions, START)
    return plan_budget(config, usage or Usage(), stream, now)


def test_a_fresh_day_keeps_reading_then_mentions_and_paces_the_rest() -> None:
    """10:00 PDT, a 4-hour stream starts; the reset is 14 hours away."""
    streamed = _budget()
    assert (streamed.horizon, streamed.until_reset) == (14_400, 50_400)
    # a reconnect per 5 min for 4 h, one per 30 min and a broadcast lookup per 5 min after
    assert streamed.reading_now == 48 * 5
    assert streamed.reading == 48 * 5 + 20 * 5 + 120 * 1
    assert streamed.mentions == 40 * 100  # YOUTUBE_RESERVED_SENDS replies, two pieces each
    assert streamed.reply_limit == 10_000 - 100 - 460  # a mention may use all of that
    assert streamed.free == streamed.room == 10_000 - 100 - 460 - 4_000
    assert streamed.room_gap == pytest.approx(100 * 14_400 / 5_440)  # ~4.4 min apart
    polled = _budget(mode="poll")
    # a poll every 30 s for 4 h (the floor), one per 5 min after it
    assert polled.reading_now == 480 * 5 and polled.reading == 2_400 + 120 * 5 + 120
    assert polled.reply_limit == 10_000 - 100 - 3_120
    assert polled.room == (10_000 - 100 - 3_120 - 4_000) // 2  # half for faster polls


def test_the_observed_mention_rate_holds_room_turns_back() -> None:
    """75 mentions in the first hour of a busy stream: 225 more expected, far beyond the day,
    so unprompted turns wait while every mention is still answered."""
    busy = _budget(Usage(units=3_000, held=100), hours=1, mentions=75)
    assert busy.expected_mentions == pytest.approx(225)
    assert busy.room == 0 and busy.room_gap == NEVER_S
    assert not busy.room_open(None, START.timestamp() + 3600)
    request = busy.request("mention")
    assert grant(request, Usage(units=3_000, held=100), None, 0.0) == 100
    # a quiet hour: the reserve's own rate (10 an hour) and room turns every few minutes
    quiet = _budget(Usage(units=1_000), hours=1, mentions=3)
    assert quiet.expected_mentions == pytest.approx(30)
    assert quiet.room > 0 and quiet.room_gap < 600


def test_mentions_use_everything_beyond_the_reading_reserve_then_are_refused() -> None:
    budget = _budget()
    mention = budget.request("mention")
    assert mention == Request(100, 50, budget.reply_limit)
    full = Usage(units=budget.reply_limit - 100)
    assert grant(mention, full, None, 0.0) == 100
    assert grant(mention, replace(full, held=50), None, 0.0) == 50  # one piece still fits
    assert grant(mention, replace(full, held=60), None, 0.0) == 0  # not even one: declined


def test_unprompted_turns_are_paced_project_wide() -> None:
    budget = _budget()
    room = budget.request("room")
    assert room.gap == budget.room_gap and room.limit == budget.room_limit
    assert grant(room, Usage(), unprompted_at=1_000.0, now=1_000.0 + room.gap - 1) == 0
    assert grant(room, Usage(), unprompted_at=1_000.0, now=1_000.0 + room.gap) == 100
    assert budget.room_open(None, 0.0) and not budget.room_open(1_000.0, 1_010.0)
    spent = Usage(units=budget.room_limit - 40)  # less than a piece left for room turns
    assert grant(room, spent, None, 0.0) == 0


def test_past_the_expected_length_the_plan_runs_an_hour_of_overtime_at_a_time() -> None:
    late = _budget(Usage(units=8_000), hours=5)
    assert late.horizon == 3_600
    assert late.expected_mentions == pytest.approx(10)


def test_a_reset_before_the_stream_ends_shortens_the_horizon() -> None:
    late = datetime(2025, 6, 3, 6, 0, tzinfo=UTC)  # 23:00 PDT, one hour before the reset
    budget = plan_budget(CONFIG, Usage(units=7_000), StreamView(late, "poll"), late)
    assert budget.horizon == budget.until_reset == 3_600
    assert budget.reading == 120 * 5  # the floor cadence for that hour, no tail


@pytest.mark.parametrize(
    ("usage", "server_s", "limited_by", "delay"),
    [
        # a fresh day: the floor (480 polls) and half the free units (1,390 -> 278 polls)
        (Usage(), 5.0, "budget", 14_400 / 758),
        # the server asks for more time than the budget needs: the server wins
        (Usage(), 25.0, "server", 25.0),
        # replies spent everything beyond the reading reserve: the floor cadence, exactly
        (Usage(units=6_780), 5.0, "budget", 30.0),
        (Usage(units=6_000, held=780), 5.0, "budget", 30.0),
    ],
)
def test_polling_keeps_its_floor_and_shares_the_free_units(
    usage: Usage, server_s: float, limited_by: str, delay: float
) -> None:
    plan = plan_poll(CONFIG, _budget(usage, mode="poll"), server_interval=server_s)
    assert plan.limited_by == limited_by
    assert plan.delay == pytest.approx(delay)


def test_polling_waits_for_the_reset_only_when_nothing_at_all_is_left() -> None:
    budget = _budget(Usage(units=9_996), mode="poll")
    plan = plan_poll(CONFIG, budget, server_interval=5.0)
    assert plan.limited_by == "exhausted"
    assert plan.delay == (next_reset(START) - START + RESET_SLACK).total_seconds()


def test_reading_never_stops_before_the_reset_while_replies_spend_all_they_may() -> None:
    """A whole quota day polled while mentions take every unit they are allowed, the stream
    running four hours past its expected length: the cadence stays at the floor while the
    stream is expected, then slows, and a poll is always planned until the reset."""
    now, units, polls = START, 0, 0
    reset = next_reset(START)
    while now < reset:
        stream = StreamView(START, "poll")
        budget = plan_budget(CONFIG, Usage(units=units), stream, now)
        units = max(units, budget.reply_limit)  # the mentions take everything they may
        budget = plan_budget(CONFIG, Usage(units=units), stream, now)
        plan = plan_poll(CONFIG, budget, server_interval=5.0)
        assert plan.limited_by != "exhausted", now
        if now < START + timedelta(hours=4):
            assert plan.delay <= CONFIG.poll_floor_seconds + 1e-6
        units += CONFIG.list_cost
        polls += 1
        now += timedelta(seconds=plan.delay)
    assert units <= CONFIG.daily_units
    assert polls >= 480  # the floor cadence for the expected 4 hours, and more after


def test_a_reserve_spent_elsewhere_slows_reading_instead_of_stopping_it() -> None:
    budget = _budget(Usage(units=9_800), mode="poll")  # another app spent the project's day
    assert not budget.intact
    plan = plan_poll(CONFIG, budget, server_interval=5.0)
    assert plan.limited_by == "budget"
    # what is left, spread evenly until the reset: 4 of the 14 hours
    assert plan.spare_units == int(200 * 14_400 / 50_400)


def test_stream_reconnects_are_paced_within_the_floor_and_never_stop() -> None:
    """A streamList connection costs ``stream_cost``: reconnects are spread over what reading
    and mentions could use (reading first), so a server closing the stream every few seconds
    cannot spend the day; they never wait longer than ``STREAM_FLOOR_S`` while the reserve is
    there, reconnect at once when connections cost nothing, and once nothing at all is left
    still try every five minutes."""
    fresh = plan_stream(CONFIG, _budget(), min_interval=1.0)
    assert fresh.limited_by == "budget" and fresh.delay == pytest.approx(14_400 / (9_680 / 5))
    spent = _budget(Usage(units=9_440))  # the mentions took everything beyond the reserve
    floor = plan_stream(CONFIG, spent, min_interval=1.0)
    assert floor.delay == pytest.approx(STREAM_FLOOR_S)
    free = replace(CONFIG, stream_cost=0)
    cheap = plan_stream(free, _budget(Usage(units=9_999), config=free), min_interval=1.0)
    assert (cheap.limited_by, cheap.delay) == ("server", 1.0)
    gone = plan_stream(CONFIG, _budget(Usage(units=9_998)), min_interval=1.0)
    assert (gone.limited_by, gone.delay) == ("exhausted", EXHAUSTED_RECONNECT_S)
    rushed = plan_stream(CONFIG, _budget(hours=3.999), min_interval=1.0)
    assert (rushed.limited_by, rushed.delay) == ("server", 1.0)


def test_the_config_comes_from_the_youtube_settings() -> None:
    settings = YouTubeSettings(
        daily_quota=20_000, max_pieces=1, poll_floor_seconds=20, broadcast_check_seconds=600
    )
    config = QuotaConfig.from_settings(settings)
    assert (config.daily_units, config.reply_units, config.safety_units) == (20_000, 50, 200)
    assert (config.poll_floor_seconds, config.lookup_seconds) == (20, 600)
