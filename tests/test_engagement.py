"""Table tests for the engagement policy (``bot/engagement/policy.py``), part one: addressed messages, thresholds and batches, cooldowns. The policy is pure, so every test drives it with explicit ``now`` values: no clock, no sleep."""

from __future__ import annotations

import pytest

from bot.engagement.policy import (
    Action,
    Decision,
    Reason,
    due,
    mark_spoke,
    observe,
)
from tests.engagement_rig import chatter_lines, check_counters, msg, new_state


@pytest.mark.parametrize("how", ["mention", "direct", "reply"])
def test_addressed_messages_are_answered_now(how: str) -> None:
    state = new_state()
    message = msg(
        "what do you think?", mention=how == "mention", direct=how == "direct", reply=how == "reply"
    )
    decision = observe(state, message, 0.0)
    assert decision == Decision(Action.ANSWER_NOW, Reason.ADDRESSED)
    assert not state.pending


def test_addressed_messages_skip_the_spam_filters() -> None:
    state = new_state(wall_max_chars=50)
    assert observe(state, msg("x" * 500, mention=True), 0.0).action is Action.ANSWER_NOW


def test_a_second_mention_inside_the_user_cooldown_is_queued_then_answered() -> None:
    state = new_state(mention_burst=1, user_cooldown_seconds=10, channel_cooldown_seconds=5)
    assert observe(state, msg("first", mention=True), 0.0).action is Action.ANSWER_NOW
    second = msg("second?", mention=True)
    assert observe(state, second, 3.0) == Decision(Action.QUEUE, Reason.USER_COOLDOWN)
    assert due(state, 9.9) is None  # the user's cooldown runs until t=10
    batch = due(state, 10.0)
    assert batch is not None and batch.reason is Reason.ADDRESSED
    assert batch.message_ids == (second.id,)
    assert batch.chatters[0].user_name == "U1"
    assert due(state, 11.0) is None  # answered once, gone from the ledger
    check_counters(state)


def test_an_answer_now_covers_the_users_queued_chatter() -> None:
    state = new_state()
    earlier = msg("anyone here?", "ada")
    observe(state, earlier, 0.0)
    decision = observe(state, msg("hey bot", "ada", mention=True), 5.0)
    assert decision.action is Action.ANSWER_NOW
    assert [p.message.id for p in decision.covered] == [earlier.id]
    assert "ada" not in state.pending
    check_counters(state)


@pytest.mark.parametrize(
    ("messages", "seconds_since_spoke", "expected"),
    [(7, 100.0, False), (8, 44.9, False), (8, 45.0, True), (20, 45.0, True)],
)
def test_a_chatter_batch_needs_n_messages_and_t_seconds(
    messages: int, seconds_since_spoke: float, expected: bool
) -> None:
    state = new_state(min_pending=8, min_gap_seconds=45)
    mark_spoke(state, 0.0)
    chatter_lines(state, [f"u{i}" for i in range(messages)], 1.0)
    batch = due(state, seconds_since_spoke)
    assert (batch is not None) is expected
    if batch is not None:
        assert batch.reason is Reason.CHATTER


def test_a_batch_names_two_chatters_questions_first() -> None:
    state = new_state(min_pending=4, min_gap_seconds=0, context_messages=3)
    chatter_lines(state, ["a", "b", "c"], 0.0, "lol")
    observe(state, msg("what game is this?", "d"), 1.0)
    chatter_lines(state, ["e"], 2.0, "gg")
    observe(state, msg("how do you do that jump", "f"), 3.0)
    batch = due(state, 10.0)
    assert batch is not None
    assert batch.user_ids == ("d", "f")  # the two questions, although a-c waited longer
    assert [c.user_name for c in batch.chatters] == ["D", "F"]
    assert len(batch.context) == 3 and {p.message.author.id for p in batch.context} <= {
        "a",
        "b",
        "c",
        "e",
    }
    assert set(state.pending) == {"a", "b", "c", "e"}  # context is not marked answered
    check_counters(state)


def test_without_questions_the_least_recently_answered_go_first() -> None:
    state = new_state(min_pending=4, min_gap_seconds=0, user_cooldown_seconds=0)
    chatter_lines(state, ["a", "b", "c", "d"], 0.0, "lol")
    first = due(state, 6.0)
    assert first is not None and first.user_ids == ("a", "b")  # waited longest (ties: order)
    chatter_lines(state, ["a", "b"], 7.0, "again")
    second = due(state, 13.0)
    assert second is not None and second.user_ids == ("c", "d")  # never answered beat a and b


def test_the_ledger_never_answers_a_message_twice() -> None:
    state = new_state(min_pending=2, min_gap_seconds=0)
    answered: list[str] = []
    now = 0.0
    for step in range(400):
        now += 1.7
        decision = observe(state, msg(f"line {step}", f"u{step % 7}"), now)
        answered += [p.message.id for p in decision.covered]
        batch = due(state, now)
        if batch is not None:
            answered += batch.message_ids
    assert answered and len(answered) == len(set(answered))
    check_counters(state)


def test_nobody_starves_over_a_long_run() -> None:
    """Two users ask questions all the time; the 18 who only chat are still all addressed."""
    state = new_state()
    users = [f"u{i}" for i in range(20)]
    addressed: dict[str, int] = dict.fromkeys(users, 0)
    now = 0.0
    for step in range(3 * 3600):  # three hours at one message a second
        now += 1.0
        user = users[step % 20] if step % 3 else users[step % 2]
        text = f"what is {step}?" if user in ("u0", "u1") else f"chatting {step}"
        observe(state, msg(text, user), now)
        batch = due(state, now)
        if batch is not None:
            for uid in batch.user_ids:
                addressed[uid] += 1
    assert all(count >= 5 for count in addressed.values()), addressed
    assert max(addressed.values()) < 4 * min(addressed.values()), addressed


def test_a_user_answered_moments_ago_is_not_picked_for_a_batch() -> None:
    state = new_state(min_pending=1, min_gap_seconds=0, user_cooldown_seconds=30)
    observe(state, msg("hi bot", "ada", mention=True), 0.0)
    observe(state, msg("what else can you do?", "ada"), 1.0)
    chatter_lines(state, ["b", "c"], 2.0)
    batch = due(state, 10.0)
    assert batch is not None and batch.user_ids == ("b", "c")
    assert due(state, 29.0) is None  # only ada is left, and she is still in her cooldown
    later = due(state, 31.0)
    assert later is not None and later.user_ids == ("ada",)


def test_the_channel_cooldown_holds_back_unprompted_messages() -> None:
    state = new_state(channel_cooldown_seconds=5, min_gap_seconds=0, min_pending=2)
    chatter_lines(state, ["a", "b"], 0.0)
    mark_spoke(state, 3.0)
    assert due(state, 7.9) is None
    batch = due(state, 8.0)
    assert batch is not None and batch.reason is Reason.CHATTER


def test_a_deferred_mention_is_not_held_back_by_a_busy_channel() -> None:
    """Mentions every two seconds keep the bot talking; a queued one still gets its turn."""
    state = new_state(mention_burst=1, channel_cooldown_seconds=5, user_cooldown_seconds=3)
    observe(state, msg("one", "ada", mention=True), 0.0)
    deferred = msg("two", "ada", mention=True)
    observe(state, deferred, 1.0)
    answered = None
    for step in range(1, 10):
        observe(state, msg("hi", f"other{step}", mention=True), 2.0 * step)
        mark_spoke(state, 2.0 * step + 0.5)
        answered = answered or due(state, 2.0 * step + 1)
    assert answered is not None and answered.message_ids == (deferred.id,)
