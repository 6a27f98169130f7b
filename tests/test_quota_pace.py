"""YouTube replies that last the whole stream (issue 38, item 5): mention replies paced over the
stream (bot/quota/plan.py ``pace_left``/``mentions_open``), mentions that wait for the pace
answered several at once (bot/engagement/policy.py ``hold_mentions``/``due(mentions=...)``),
a reading reserve sized for polling wherever the reader may fall back to it, and ``chorus
replay`` over the busier four-hour trace (1.5 lines a second, about 500 mentions) at default
settings: mentions answered in every hour, the last included, and at least 80% addressed, read
by the stream and by polling."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from bench.traces.make_trace import generate_youtube_busier
from bot.engagement.policy import (
    Action,
    Decision,
    Engagement,
    Reason,
    due,
    observe,
    take_declined,
)
from bot.engagement.replay import ReplayReport, format_report, replay_lines
from bot.engagement.turns import LiveChat, replay_options
from bot.events import Author, ChatMessage, ConversationKey
from bot.quota.gate import ReplyGate
from bot.quota.plan import PACE_BURST, QuotaConfig, StreamView, Usage, plan_budget
from bot.quota.view import LedgerView
from bot.settings import Settings, YouTubeSettings
from tests.engagement_rig import check_counters, msg, new_state
from tests.test_quota_plan import START

ROWS = [json.dumps(row) for row in generate_youtube_busier()]


# -- the plan -------------------------------------------------------------------------------------
def test_mention_replies_are_paced_over_the_stream() -> None:
    config = QuotaConfig()
    stream = StreamView(START, "stream")
    fresh = plan_budget(config, Usage(), stream, START)
    assert fresh.mentions_open and fresh.pace_left == PACE_BURST * config.reply_units
    # an hour in, 110 replies already sent: far ahead of a quarter of the pool
    hour = START + timedelta(hours=1)
    ahead = plan_budget(config, Usage(units=5_600, inserts=110, replies=110), stream, hour)
    assert ahead.replies_left >= ahead.piece_units and not ahead.mentions_open
    # the same spend three hours in is behind the pace: mentions go again
    late = plan_budget(
        config, Usage(units=5_600, inserts=110, replies=110), stream, START + timedelta(hours=3)
    )
    assert late.mentions_open and late.pace_left >= late.reply_cost
    # nothing left for replies at all: open, so the reservation declines it ``quota``
    spent = plan_budget(config, Usage(units=9_990, inserts=190, replies=190), stream, hour)
    assert spent.replies_left < spent.piece_units and spent.mentions_open


def test_a_reader_that_may_fall_back_to_polling_keeps_the_polling_reserve() -> None:
    auto = QuotaConfig.from_settings(YouTubeSettings())  # YOUTUBE_READ_MODE=auto
    streamed = QuotaConfig.from_settings(YouTubeSettings(read_mode="stream"))
    assert auto.poll_reserve and not streamed.poll_reserve
    polled = plan_budget(auto, Usage(), StreamView(START, "poll"), START)
    while_streamed = plan_budget(auto, Usage(), StreamView(START, "stream"), START)
    stream_only = plan_budget(streamed, Usage(), StreamView(START, "stream"), START)
    # four hours of polls at the 30 s floor (480 x 5) + the tail, never spendable by replies
    assert polled.reading_now == 480 * 5 and while_streamed.reading == polled.reading
    assert stream_only.reading < polled.reading
    assert while_streamed.reply_limit == auto.daily_units - auto.safety_units - polled.reading


# -- the policy -----------------------------------------------------------------------------------
def test_mentions_held_for_the_budget_go_out_together_in_the_policys_order() -> None:
    state = new_state(max_batch_chatters=2, max_mention_batch=3)
    observe(state, msg("hi", "early"), 0.0)  # ranks by when last answered, then by waiting
    held = [msg(f"question {i}?", f"u{i}", mention=True) for i in range(4)]
    for i, message in enumerate(held):
        decision = observe(state, message, 1.0 + i, hold_mentions=True)
        assert decision == Decision(Action.QUEUE, Reason.BUDGET)
    check_counters(state)
    assert due(state, 10.0, room=False, mentions=False) is None  # the pace is closed: they wait
    first = due(state, 11.0, room=False, mentions=True)
    assert first is not None and first.reason is Reason.ADDRESSED
    assert first.user_ids == ("u0", "u1", "u2")  # up to max_mention_batch, longest waiting first
    second = due(state, 12.0, room=False, mentions=True)
    assert second is not None and second.user_ids == ("u3",)
    assert take_declined(state) == []
    check_counters(state)


def test_a_mention_held_past_stale_is_declined_with_a_reason() -> None:
    state = new_state(stale_after_seconds=60)
    waiting = msg("are you there?", "u1", mention=True)
    observe(state, waiting, 0.0, hold_mentions=True)
    assert due(state, 61.0, room=False, mentions=False) is None
    assert [(d.message.id, d.reason) for d in take_declined(state)] == [(waiting.id, "stale")]
    check_counters(state)


# -- chorus replay on the busier four hours -------------------------------------------------------
@pytest.fixture(scope="module", params=["stream", "poll"])
def busier(request: pytest.FixtureRequest) -> ReplayReport:
    options = replay_options(Settings(), request.param)  # the defaults, as `chorus replay` runs
    return replay_lines(ROWS, name="youtube_busier.jsonl", **options)


def test_the_busier_stream_is_four_hours_at_one_and_a_half_lines_a_second() -> None:
    rows = [json.loads(r) for r in ROWS]
    assert 239 * 60 < rows[-1]["t"] <= 240 * 60
    assert 1.4 <= len(rows) / rows[-1]["t"] <= 1.6
    assert 480 <= sum(1 for r in rows if r.get("mentions_bot")) <= 560
    assert generate_youtube_busier() == rows  # the seed decides


def test_busier_four_hours_answer_mentions_every_hour_and_keep_reading(
    busier: ReplayReport,
) -> None:
    quota = busier.quota
    assert quota is not None and busier.ok and not quota.reading_stopped
    assert busier.mentions_total >= 480 and busier.mentions_lost == 0
    assert busier.mentions_answered >= 0.8 * busier.mentions_total  # alone or in a shared reply
    hours = busier.mentions_by_hour
    assert len(hours) == 4 and all(h.answered > 0 for h in hours)  # the last hour included
    assert sum(h.shared for h in hours) > sum(h.alone for h in hours)  # batched when low
    assert len(quota.hours) >= 4
    for hour in quota.hours[:3]:  # while the stream runs, reading's reserve is all there
        assert hour.left >= hour.reading_needs
    if quota.reading == "poll":  # a poll at least every 30 s (the floor), in every hour
        assert quota.slowest_poll <= 30.0 + 1e-6
        assert all(h.reads >= 110 for h in quota.hours[:4])
    assert quota.left >= quota.reading_reserve_end  # the day ends with reading's reserve
    text = format_report(busier)
    assert "| hour | mentions | answered alone | in a shared reply |" in text


# -- the live chat's turns ------------------------------------------------------------------------
def test_live_chat_holds_mentions_while_the_pace_is_closed_then_answers_them_in_one_turn() -> None:
    clock = [(START + timedelta(hours=1)).timestamp()]
    gate = ReplyGate(QuotaConfig(), clock=lambda: clock[0])
    # an hour in, 50 replies sent: just at the pace (a quarter of the pool and the slack)
    ahead = LedgerView(Usage(units=2_600, inserts=50, replies=50), StreamView(START, "stream"))
    gate.update(ahead, clock[0])
    live = LiveChat(Engagement(), clock=lambda: clock[0], budget=gate)
    conv = ConversationKey(platform="youtube", channel="chat-1")
    said = []
    for user in ("ann", "bob", "cat"):
        message = ChatMessage(
            platform="youtube",
            id=f"m-{user}",
            conversation=conv,
            author=Author(id=user, display_name=user),
            text="@Chorus what is the boss weak to?",
            mentions_bot=True,
        )
        said.append(message)
        assert live.observe(message) == Decision(Action.QUEUE, Reason.BUDGET)
    assert live.tick() == []  # the replies are ahead of their pace: the mentions wait
    clock[0] += 150.0
    gate.update(ahead, clock[0])  # the same spend 150 s later leaves the pace a reply
    turns = live.tick()
    assert len(turns) == 1 and turns[0].kind == "mention"
    assert turns[0].addressed == ("ann", "bob", "cat")  # one message names them all
    assert turns[0].mentions == tuple(said) and live.declined == 0
