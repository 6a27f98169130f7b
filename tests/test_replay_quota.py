"""``chorus replay`` and YouTube's quota (bot/quota/replay.py): the four-hour busy stream of
the issue's "Done when" at default settings, a polled chat seen only at its polls, and the CLI's
verdict."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.traces.make_trace import generate_youtube_busy
from bot import cli
from bot.engagement.replay import ReplayReport, format_report, replay_lines
from bot.engagement.turns import platform_overrides, policy_config
from bot.quota.plan import QuotaConfig
from bot.settings import EngagementSettings

ROWS = [json.dumps(row) for row in generate_youtube_busy()]


def _busy(reading: str) -> ReplayReport:
    engagement = EngagementSettings()
    return replay_lines(
        ROWS,
        name="youtube_busy.jsonl",
        config=policy_config(engagement),
        overrides=platform_overrides(engagement),
        youtube_reading="poll" if reading == "poll" else "stream",
    )


@pytest.fixture(scope="module", params=["stream", "poll"])
def busy(request: pytest.FixtureRequest) -> Iterator[ReplayReport]:
    yield _busy(request.param)


def test_the_generated_stream_is_four_busy_hours() -> None:
    rows = [json.loads(r) for r in ROWS]
    minutes = rows[-1]["t"] / 60
    assert 239 < minutes <= 240
    assert 72 <= len(rows) / minutes <= 76  # ~74 messages a minute
    assert 280 <= sum(1 for r in rows if r.get("mentions_bot")) <= 330
    assert generate_youtube_busy() == [json.loads(r) for r in ROWS]  # the seed decides


def test_four_busy_hours_keep_reading_account_for_every_mention_and_end_with_reserve(
    busy: ReplayReport,
) -> None:
    quota = busy.quota
    assert quota is not None
    assert not quota.reading_stopped and quota.spent <= quota.daily_units
    # every mention answered (alone or with others while the replies are paced), or declined
    # with a reason: the day's replies ran out, or it waited past stale_after_seconds
    assert busy.mentions_lost == 0 and busy.double_answers == 0
    assert set(busy.mentions_declined) <= {"quota", "stale"}
    assert busy.mentions_answered + sum(busy.mentions_declined.values()) == busy.mentions_total
    assert busy.mentions_answered >= 0.8 * busy.mentions_total
    # the day ends with what reading needs until the reset, and the safety margin
    assert quota.left >= quota.reading_reserve_end + QuotaConfig().safety_units // 2
    # mentions first: unprompted turns wait while the mention rate needs every unit
    assert quota.room_turns <= 2
    worst = busy.latency(1.0)  # a waiting mention is answered or goes stale (180 s)
    if quota.reading == "stream":
        assert quota.read_units == 7
        assert worst is not None and worst <= 180.0 + 1.5 + 1.0
    else:  # the floor: never more than 30 s between two polls while the stream runs
        assert quota.slowest_poll <= 30.0 + 1e-6 and quota.polls >= 480
        assert worst is not None and worst <= 180.0 + 30.0 + 1.5 + 1.0
    text = format_report(busy)
    assert "p90" in text and "| YouTube quota (10,000 units a day) | value |" in text
    assert "| reading never stopped; within the day | yes |" in text


def _yt(t: float, user: str, text: str = "hello", **extra: Any) -> str:
    row = {"t": t, "platform": "youtube", "channel": "c", "user_id": user, "user_name": user}
    return json.dumps(row | {"text": text} | extra)


def test_a_polled_chat_is_seen_at_its_polls() -> None:
    trace = [_yt(0.5, "a"), _yt(7.0, "b", "@bot hi", mentions_bot=True)]
    streamed = replay_lines(trace, model_latency_seconds=1.0)
    polled = replay_lines(trace, model_latency_seconds=1.0, youtube_reading="poll")
    assert streamed.latency(1.0) == pytest.approx(1.0)
    assert polled.quota is not None and polled.quota.polls >= 2
    # the mention waited for the next poll (~19 s apart on a fresh day), then the model
    latency = polled.latency(1.0)
    assert latency is not None and 10.0 < latency <= 30.0 + 1.0


def test_a_mention_the_day_cannot_pay_for_is_declined_quota() -> None:
    tiny = QuotaConfig(daily_units=600, reserved_sends=0, stream_hours=1.0)
    trace = [_yt(i * 600.0, f"u{i}", "@bot hi", mentions_bot=True) for i in range(8)]
    report = replay_lines(trace, youtube_quota=tiny)
    assert report.quota is not None
    # 600 - 6 (safety) - 346 (reading until the reset, 14 hours away) - 7 (the lookups and
    # the connection) leave 241 units: four one-piece replies (a fifth once the stream is over
    # and reading needs less), then nothing for the rest: declined, never held to go stale
    answered = report.mentions_answered
    assert answered in (4, 5) and report.mentions_declined == {"quota": 8 - answered}
    assert report.mentions_lost == 0 and report.within_quota
    assert report.quota.left == 600 - 7 - answered * 50


def test_no_youtube_no_quota_section() -> None:
    row = {"t": 0, "platform": "twitch", "channel": "c", "user_id": "u", "user_name": "u"}
    report = replay_lines([json.dumps(row | {"text": "@bot hi", "mentions_bot": True})])
    assert report.quota is None and report.within_quota
    assert "YouTube quota" not in format_report(report)


def test_chorus_replay_judges_youtube_by_its_quota(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "yt.jsonl"
    trace.write_text("\n".join(ROWS[:3000]) + "\n")
    assert cli.main(["replay", str(trace), "--youtube-read", "poll"]) == 0
    out = capsys.readouterr().out
    assert "| reading (poll) | poll:" in out and "6 / 30 s" not in out
