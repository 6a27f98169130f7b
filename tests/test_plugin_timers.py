"""Plugin timers' schedules (``bot.plugins.timers``): periods and cron expressions parsed with
clear errors, firings at the same instants in every worker, and three schedulers sharing one
store running each firing once (the claim); a failing firing is contained and counted."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from redis.asyncio import Redis

from bot.plugins.timers import (
    PluginTimers,
    Scheduled,
    Timer,
    TimerContext,
    cron,
    every,
    parse_period,
)
from bot.state.plugin_store import TimerClaims


async def nothing(ctx: TimerContext) -> None: ...


@pytest.mark.parametrize(
    ("text", "seconds"), [("2s", 2), ("10m", 600), ("1h30m", 5400), ("1d", 86400), (1.5, 1.5)]
)
def test_periods(text: str | float, seconds: float) -> None:
    assert parse_period(text) == seconds


@pytest.mark.parametrize("text", ["", "10", "ten minutes", "5x", "0.5s", 0, -3, "1m1"])
def test_bad_periods_are_refused(text: str | float) -> None:
    with pytest.raises(ValueError, match="every"):
        parse_period(text)


def test_firings_are_the_same_instants_everywhere() -> None:
    ten = every("10m")(nothing)
    noon = datetime(2026, 3, 4, 12, 3, 7, tzinfo=UTC).timestamp()
    at, gap = ten.next_firing(noon)
    assert datetime.fromtimestamp(at, UTC) == datetime(2026, 3, 4, 12, 10, tzinfo=UTC)
    assert gap == 600
    weekdays = cron("0 9 * * 1-5")(nothing)
    friday = datetime(2026, 3, 6, 10, 0, tzinfo=UTC).timestamp()
    at, gap = weekdays.next_firing(friday)
    assert datetime.fromtimestamp(at, UTC) == datetime(2026, 3, 9, 9, 0, tzinfo=UTC)  # Monday
    assert gap == 86400
    with pytest.raises(ValueError, match="not a cron expression"):
        cron("61 * * * *")(nothing)
    with pytest.raises(TypeError, match="async def"):
        Timer(lambda ctx: None, period=5)  # type: ignore[arg-type, return-value]


@pytest.mark.redis
async def test_three_schedulers_on_one_store_run_each_firing_once(
    redis_client: Redis, key_tag: str
) -> None:
    fired: list[tuple[str, datetime]] = []
    four = asyncio.Event()

    def ticker(worker: str) -> Timer:
        async def tick(ctx: TimerContext) -> None:
            fired.append((worker, ctx.at))
            if len({at for _, at in fired}) >= 4:
                four.set()
            if len(fired) == 2:
                raise RuntimeError("a failing firing")

        return Timer(tick, period=1, name="tick")

    claims = TimerClaims(redis_client, namespace=key_tag)
    schedulers = [
        PluginTimers([Scheduled(f"p-{key_tag}", ticker(w))], claims, worker=w, timeout=5)
        for w in ("a", "b", "c")
    ]
    for scheduler in schedulers:
        scheduler.start()
    try:
        await asyncio.wait_for(four.wait(), 60)
        await asyncio.sleep(0.3)  # a doubled firing would land now
    finally:
        for scheduler in schedulers:
            await scheduler.aclose()
    instants = [at for _, at in fired]
    assert len(instants) == len(set(instants))
    outcomes = sum((s.counts for s in schedulers), start=type(schedulers[0].counts)())
    assert outcomes[f"p-{key_tag}", "tick", "error"] == 1
    assert outcomes[f"p-{key_tag}", "tick", "ok"] == len(instants) - 1
