"""The offline replay (``bot/engagement/replay.py``) on the shipped busy trace and on hand-made traces.

Everything runs in simulated time: no sleeping, no wall-clock assertions.
"""

from __future__ import annotations

import importlib.util
import json
from collections import defaultdict
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.engagement.policy import PolicyConfig, SendLimit
from bot.engagement.replay import ReplayReport, SentReply, format_report, replay, replay_lines

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "bench" / "traces"
TRACE = TRACES / "busy_chat.jsonl"


def _make_trace_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_trace", TRACES / "make_trace.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def busy() -> ReplayReport:
    return replay(TRACE)


def line(t: float, user: str = "u1", text: str = "hello", **extra: Any) -> str:
    row = {"t": t, "platform": "twitch", "channel": "c", "user_id": user, "user_name": user}
    row.update(text=text, **extra)
    return json.dumps(row)


def peak(times: list[float], seconds: float) -> int:
    return max((sum(1 for u in times if u <= t < u + seconds) for t in times), default=0)


def budget_peaks(replies: tuple[SentReply, ...], limits: dict[str, SendLimit]) -> dict[Any, int]:
    """Peak sends per budget window, recomputed from the raw sends (independent of the report)."""
    times: dict[Any, list[float]] = defaultdict(list)
    for r in replies:
        limit = limits[r.conversation.platform]
        scope = r.conversation.channel if limit.per_channel else "*"
        times[r.conversation.platform, scope].append(r.t)
    return {key: peak(sorted(ts), limits[key[0]].seconds) for key, ts in times.items()}


# --- the shipped trace --------------------------------------------------------------------


def test_the_shipped_trace_is_what_the_generator_writes() -> None:
    make_trace = _make_trace_module()
    rows = make_trace.generate(make_trace.SEED)
    assert rows == make_trace.generate(make_trace.SEED)  # deterministic
    shipped = [json.loads(text) for text in TRACE.read_text(encoding="utf-8").splitlines()]
    assert shipped == rows


def test_the_shipped_trace_is_busy_and_varied() -> None:
    report = busy()
    assert report.messages >= 3000 and report.chatters >= 36 and report.channels == 2
    assert report.malformed == ()
    for reason in ("flood", "repeat", "wall_of_text", "paused", "bot_author"):
        assert report.ignored.get(reason, 0) > 0, reason
    assert report.ignored["command_not_permitted"] == 1  # a viewer tried to pause the bot
    assert report.commands == {"pause": 1, "resume": 1}
    assert report.mentions_while_paused > 0


def test_every_mention_in_the_shipped_trace_is_answered_within_seconds() -> None:
    report = busy()
    assert report.mentions_total >= 50
    assert report.mentions_answered == report.mentions_total
    worst = report.latency(1.0)
    assert worst is not None and worst <= 20.0  # model latency plus at most one user cooldown


def test_busy_regulars_flooding_between_mentions_lose_no_mention() -> None:
    """``busy_regulars.jsonl``: regulars mention the bot twice within their cooldown, then flood.
    Before flood control spared mentions, 109 of its 326 mentions were never answered."""
    make_trace = _make_trace_module()
    rows = make_trace.generate_regulars(make_trace.SEED)
    shipped = (TRACES / "busy_regulars.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(text) for text in shipped] == rows
    report = replay(TRACES / "busy_regulars.jsonl")
    assert report.ignored["flood"] >= 100 and report.dropped["flood"] >= 100  # they do flood
    regulars = {r["id"] for r in rows if r["user_id"].startswith("r") and r.get("mentions_bot")}
    assert len(regulars) >= 100 and report.mentions_total >= len(regulars)
    answered = {i for r in report.replies for i in r.message_ids}
    assert regulars <= answered  # every regular's mention, the waiting ones too
    assert report.mentions_answered == report.mentions_total and report.mentions_lost == 0
    assert report.double_answers == 0 and report.within_send_limits
    assert "| mentions lost (neither answered nor declined) | 0 |" in format_report(report)


def test_a_declined_mention_is_counted_with_its_reason_not_lost() -> None:
    trace = [line(0.0, "reg", "hi", mentions_bot=True)]
    trace += [line(1.0 + i, "reg", f"again {i}?", mentions_bot=True) for i in range(4)]
    report = replay_lines(trace, config=PolicyConfig(max_pending_per_chatter=3, mention_burst=1))
    assert report.mentions_total == 5 and report.mentions_answered == 4
    assert report.mentions_declined == {"superseded": 1} and report.mentions_lost == 0
    assert "| mentions declined with a reason | 1 superseded |" in format_report(report)


def test_the_shipped_trace_stays_within_every_send_limit_and_youtubes_quota() -> None:
    report = busy()
    assert report.sends and report.within_send_limits and report.within_quota
    limits = {s.platform: s.limit for s in report.sends if s.limit is not None}
    assert set(limits) == {"twitch"}  # YouTube is judged by its quota, not a made-up rate
    for sends in report.sends:
        if sends.limit is not None:
            assert sends.peak_in_window <= sends.limit.messages
            assert sends.peak_per_30s <= sends.limit.per_30s
    twitch = tuple(r for r in report.replies if r.conversation.platform == "twitch")
    assert all(n <= limits[key[0]].messages for key, n in budget_peaks(twitch, limits).items())


def test_the_shipped_trace_answers_nobody_twice_and_speaks_rarely() -> None:
    report = busy()
    assert report.double_answers == 0
    ids = [i for r in report.replies for i in r.message_ids]
    assert len(ids) == len(set(ids))
    assert report.replies_sent < 0.10 * report.messages
    assert report.questions_answered > 0 and report.chatters_addressed >= 24
    batches = [r for r in report.replies if r.kind == "batch"]
    assert batches and all(1 <= len(r.user_ids) <= 2 for r in batches)


def test_the_scripted_reply_names_the_chatters_it_addresses() -> None:
    trace = [line(float(i), f"user{i}", f"chat line {i}") for i in range(10)]
    report = replay_lines(trace, config=PolicyConfig(min_pending=8, min_gap_seconds=0))
    batch = next(r for r in report.replies if r.kind == "batch")
    assert batch.text.startswith("@user0 @user1 ")
    assert batch.user_ids == ("user0", "user1")


# --- limits, malformed lines, report ------------------------------------------------------


def test_the_simulated_limiter_delays_sends_over_budget() -> None:
    trace = [line(i * 0.1, f"u{i}", "hey bot", mentions_bot=True) for i in range(10)]
    tight = {"twitch": SendLimit(3, 30.0, per_channel=False)}
    report = replay_lines(trace, send_limits=tight, model_latency_seconds=1.0)
    assert report.mentions_answered == 10  # nobody dropped, only delayed
    times = sorted(r.t for r in report.replies)
    assert times[:3] == pytest.approx([1.0, 1.1, 1.2])
    assert times[3] == pytest.approx(31.0) and times[-1] == pytest.approx(91.0)
    assert report.sends[0].peak_in_window == 3 and report.within_send_limits
    assert report.latency(1.0) == pytest.approx(90.1)


def test_per_channel_budgets_are_separate() -> None:
    rows = [
        json.dumps(
            {"t": i * 0.01, "platform": "discord", "channel": f"ch{i % 2}", "user_id": f"u{i}",
             "user_name": f"u{i}", "text": "hi", "mentions_bot": True}
        )
        for i in range(20)
    ]  # fmt: skip
    report = replay_lines(rows, model_latency_seconds=0.0)
    [discord] = report.sends
    assert discord.limit is not None and discord.limit.per_channel
    assert discord.peak_in_window == 5
    assert sorted(r.t for r in report.replies)[:10] == pytest.approx(
        sorted([i * 0.01 for i in range(10)])
    )


def test_malformed_lines_are_reported_with_their_number_and_skipped() -> None:
    trace = [
        line(0.0),
        "not json",
        "",
        "[1, 2]",
        line(-1.0),
        json.dumps({"t": 1, "platform": "twitch", "channel": "c", "user_id": "u"}),
        json.dumps({"t": 1, "platform": "Twitch!", "channel": "c", "user_id": "u", "text": "x"}),
        line(2.0, roles=["emperor"]),
        line(3.0, "u2", "hey", mentions_bot=True),
    ]
    report = replay_lines(trace)
    assert report.messages == 2
    assert [m.line for m in report.malformed] == [2, 4, 5, 6, 7, 8]
    assert "KeyError" in report.malformed[3].error
    assert report.mentions_answered == 1
    assert "line 2: " in format_report(report)


def test_out_of_order_lines_are_replayed_in_time_order() -> None:
    trace = [line(5.0, "b", "later", mentions_bot=True), line(1.0, "a", "first", mentions_bot=True)]
    report = replay_lines(trace, model_latency_seconds=0.5)
    assert [r.user_ids for r in report.replies] == [("a",), ("b",)]


def test_idle_lines_follow_the_config() -> None:
    trace = [line(0.0), line(1000.0, "u2", "back")]
    assert not any(r.kind == "idle" for r in replay_lines(trace).replies)
    report = replay_lines(trace, config=PolicyConfig(idle_prompt_after_seconds=300))
    idle = [r for r in report.replies if r.kind == "idle"]
    assert [r.t for r in idle] == pytest.approx([301.5, 1301.5])  # once per quiet period


def test_format_report_is_a_markdown_table_of_the_numbers() -> None:
    report = busy()
    text = format_report(report)
    assert text.startswith("### Engagement replay: `busy_chat.jsonl`")
    assert f"| messages | {report.messages:,} from" in text
    assert f"| mentions answered | {report.mentions_answered} / {report.mentions_total}" in text
    assert "| messages answered twice | 0 |" in text
    assert "| twitch | 20 / 30 s per account |" in text
    assert "| ignored | flood |" in text and "| dropped from the ledger | stale |" in text
    assert "NO |" not in text


def test_an_empty_trace_gives_an_empty_report() -> None:
    report = replay_lines([])
    assert report.messages == 0 and report.replies_sent == 0 and report.latency(0.5) is None
    assert "n/a" in format_report(report)


# --- property: random traces ---------------------------------------------------------------

_row = st.fixed_dictionaries(
    {
        "gap": st.floats(min_value=0, max_value=8, allow_nan=False),
        "platform": st.sampled_from(["twitch", "youtube", "discord"]),
        "channel": st.sampled_from(["a", "b"]),
        "user": st.sampled_from([f"u{i}" for i in range(8)] + ["mod"]),
        "text": st.sampled_from(
            ["lol", "what is this?", "gg", "how?", "nice one", "!chorus pause", "!chorus resume"]
        ),
        "mention": st.booleans(),
        "reply": st.booleans(),
    }
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_row, max_size=150), st.floats(min_value=0, max_value=3))
def test_random_traces_never_exceed_a_send_limit_or_answer_twice(
    rows: list[dict[str, Any]], latency: float
) -> None:
    limits = {
        "twitch": SendLimit(3, 30.0, per_channel=False),
        "youtube": SendLimit(2, 30.0, per_channel=False),
        "discord": SendLimit(2, 5.0, per_channel=True),
    }
    t, lines = 0.0, []
    for i, row in enumerate(rows):
        t += row["gap"]
        lines.append(
            json.dumps(
                {"t": t, "platform": row["platform"], "channel": row["channel"],
                 "user_id": row["user"], "user_name": row["user"], "text": row["text"],
                 "id": f"m{i}", "mentions_bot": row["mention"] and not row["reply"],
                 "reply_to_bot": row["reply"] and i % 3 == 0,
                 "roles": ["moderator"] if row["user"] == "mod" else []}
            )
        )  # fmt: skip
    config = PolicyConfig(min_pending=2, min_gap_seconds=10, user_cooldown_seconds=3)
    report = replay_lines(lines, config=config, send_limits=limits, model_latency_seconds=latency)
    assert report.malformed == ()
    assert report.within_send_limits
    assert all(
        n <= limits[key[0]].messages for key, n in budget_peaks(report.replies, limits).items()
    )
    ids = [i for r in report.replies for i in r.message_ids]
    assert len(ids) == len(set(ids)) and report.double_answers == 0
    assert report.mentions_lost == 0  # every accepted mention answered or declined with a reason
