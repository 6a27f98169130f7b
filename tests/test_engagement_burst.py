"""Table tests for the mention burst: a regular who asks twice in a row is answered twice at
once, while one person mentioning the bot every second gets one answer per cooldown.

Before the burst every mention inside the 10 s user cooldown waited for it to end, so a busy
regular's second question took up to 10 s (p95 9.3 s on bench/traces/busy_regulars.jsonl).
"""

from __future__ import annotations

from bot.engagement.policy import Action, Decision, Reason, due, note_answered, observe
from tests.engagement_rig import check_counters, msg, new_state


def test_three_mentions_in_a_row_are_answered_at_once_and_the_fourth_waits_its_turn() -> None:
    state = new_state(mention_burst=3, user_cooldown_seconds=10, channel_cooldown_seconds=0)
    for t in (0.0, 1.0, 2.0):
        assert observe(state, msg(f"q{t}?", "ada", mention=True), t).action is Action.ANSWER_NOW
    fourth = msg("and one more?", "ada", mention=True)
    assert observe(state, fourth, 3.0) == Decision(Action.QUEUE, Reason.USER_COOLDOWN)
    # Three answers by t=2 left 0.2 of an answer; one refills per 10 s: ready at t=10.
    assert due(state, 9.9) is None
    batch = due(state, 10.0)
    assert batch is not None and batch.reason is Reason.ADDRESSED
    assert batch.message_ids == (fourth.id,)
    check_counters(state)


def test_the_burst_is_per_person() -> None:
    state = new_state(mention_burst=1, user_cooldown_seconds=10)
    assert observe(state, msg("hi", "ada", mention=True), 0.0).action is Action.ANSWER_NOW
    assert observe(state, msg("hi", "bob", mention=True), 0.5).action is Action.ANSWER_NOW
    assert observe(state, msg("again", "ada", mention=True), 1.0).action is Action.QUEUE


def test_a_mention_spammer_gets_one_answer_per_cooldown_after_the_burst() -> None:
    state = new_state(mention_burst=3, user_cooldown_seconds=10, channel_cooldown_seconds=0)
    answers = 0
    for second in range(120):
        t = float(second)
        decision = observe(state, msg(f"spam {second}", "spammer", mention=True), t)
        answers += decision.action is Action.ANSWER_NOW
        batch = due(state, t + 0.5)
        answers += batch is not None
    # 3 at once, then one per 10 s over the remaining ~118 s.
    assert 3 + 11 <= answers <= 3 + 12
    check_counters(state)


def test_an_answer_another_process_made_counts_against_the_burst() -> None:
    state = new_state(mention_burst=2, user_cooldown_seconds=10)
    note_answered(state, "ada", 0.0)  # restored from the durable store
    note_answered(state, "ada", 0.0)  # the same answer learnt twice is counted once
    assert observe(state, msg("one", "ada", mention=True), 1.0).action is Action.ANSWER_NOW
    assert observe(state, msg("two", "ada", mention=True), 2.0).action is Action.QUEUE


def test_a_room_batch_answer_still_waits_out_the_plain_cooldown() -> None:
    state = new_state(
        mention_burst=3,
        user_cooldown_seconds=10,
        min_pending=1,
        min_gap_seconds=0,
        channel_cooldown_seconds=0,
    )
    observe(state, msg("what game is this?", "ada"), 0.0)
    first = due(state, 1.0)
    assert first is not None and first.user_ids == ("ada",)
    observe(state, msg("nice", "ada"), 2.0)
    assert due(state, 5.0) is None  # ambient lines wait out the cooldown, burst or not
    later = due(state, 11.0)
    assert later is not None and later.user_ids == ("ada",)
