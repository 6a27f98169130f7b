"""Table tests for the engagement policy, part three: mentions are never dropped by flood control.

A busy regular mentions the bot, mentions it again inside their 10 s cooldown (that mention
waits in the ledger), then floods the chat. Flood and repeat filters judge ambient lines only;
the waiting mention is answered once when the cooldown ends, or - when it must leave the ledger
unanswered - it is declined with a reason the caller logs and counts (``take_declined``).
"""

from __future__ import annotations

from bot.engagement.policy import (
    Action,
    Decision,
    Reason,
    due,
    observe,
    take_declined,
)
from bot.events import Role
from tests.engagement_rig import check_counters, msg, new_state


def test_a_flood_after_a_waiting_mention_keeps_the_mention() -> None:
    state = new_state(
        mention_burst=1, user_cooldown_seconds=10, flood_max_messages=6, flood_window_seconds=15
    )
    assert observe(state, msg("first?", "reg", mention=True), 0.0).action is Action.ANSWER_NOW
    waiting = msg("and the second thing?", "reg", mention=True)
    assert observe(state, waiting, 2.0) == Decision(Action.QUEUE, Reason.USER_COOLDOWN)
    reasons = [observe(state, msg(f"spam {i}", "reg"), 3.0 + i * 0.5).reason for i in range(8)]
    assert Reason.FLOOD in reasons  # the regular is flooding...
    assert [p.message.id for p in state.pending["reg"].messages] == [waiting.id]  # ...mention kept
    assert state.dropped["flood"] > 0 and state.addressed_pending == 1
    check_counters(state)
    assert due(state, 9.9) is None  # still inside the cooldown
    batch = due(state, 10.0)
    assert batch is not None and batch.reason is Reason.ADDRESSED
    assert batch.message_ids == (waiting.id,)  # answered, without the flood lines
    assert due(state, 11.0) is None and take_declined(state) == []  # once, nothing declined
    check_counters(state)


def test_ambient_lines_never_push_a_waiting_mention_out_of_the_slots() -> None:
    state = new_state(
        mention_burst=1, user_cooldown_seconds=10, max_pending_per_chatter=3, flood_max_messages=20
    )
    observe(state, msg("hi bot", "reg", mention=True), 0.0)
    waiting = msg("what about now?", "reg", mention=True)
    observe(state, waiting, 1.0)
    for i in range(5):  # not a flood, but more lines than the chatter has slots
        observe(state, msg(f"line {i}", "reg"), 1.5 + i)
    kept = [p.message.id for p in state.pending["reg"].messages]
    assert kept[0] == waiting.id and len(kept) == 3  # the newest two ambient lines beside it
    assert state.dropped["superseded"] == 3
    check_counters(state)


def test_a_newer_mention_wins_when_every_slot_holds_one() -> None:
    state = new_state(mention_burst=1, user_cooldown_seconds=10, max_pending_per_chatter=3)
    observe(state, msg("first", "reg", mention=True), 0.0)
    waiting = [msg(f"more {i}?", "reg", mention=True) for i in range(4)]
    for i, message in enumerate(waiting):
        observe(state, message, 1.0 + i)
    observe(state, msg("ambient line", "reg"), 6.0)  # no room: every slot holds a mention
    (declined,) = take_declined(state)
    assert (declined.message.id, declined.reason) == (waiting[0].id, "superseded")
    batch = due(state, 10.0)
    assert batch is not None
    assert batch.message_ids == tuple(m.id for m in waiting[1:])  # one reply, latest last
    assert take_declined(state) == []
    check_counters(state)


def test_overflow_evicts_a_chatter_without_a_waiting_mention_first() -> None:
    state = new_state(mention_burst=1, max_pending_chatters=3, user_cooldown_seconds=10)
    observe(state, msg("hi", "reg", mention=True), 0.0)
    waiting = msg("again?", "reg", mention=True)
    observe(state, waiting, 1.0)  # "reg" is the oldest chatter in the ledger
    for user in ("a", "b", "c"):
        observe(state, msg("lol", user), 2.0)
    assert list(state.pending) == ["reg", "b", "c"] and state.dropped["overflow"] == 1
    assert take_declined(state) == []
    check_counters(state)


def test_overflow_declines_a_mention_only_when_every_chatter_has_one() -> None:
    state = new_state(mention_burst=1, max_pending_chatters=2, user_cooldown_seconds=10)
    waiting = {}
    for user in ("a", "b", "c"):
        observe(state, msg("hi", user, mention=True), 0.0)
        waiting[user] = msg("again?", user, mention=True)
        observe(state, waiting[user], 1.0)
    (declined,) = take_declined(state)
    assert (declined.message.id, declined.reason) == (waiting["a"].id, "overflow")
    assert list(state.pending) == ["b", "c"]
    check_counters(state)


def test_a_stale_or_paused_mention_is_declined_with_its_reason() -> None:
    state = new_state(mention_burst=1, user_cooldown_seconds=10, stale_after_seconds=60)
    observe(state, msg("hi", "reg", mention=True), 0.0)
    stale = msg("still there?", "reg", mention=True)
    observe(state, stale, 1.0)
    assert due(state, 100.0) is None  # the timer never ran in between: it went stale
    assert [(d.message.id, d.reason) for d in take_declined(state)] == [(stale.id, "stale")]

    observe(state, msg("hi", "ann", mention=True), 200.0)
    paused = msg("you there?", "ann", mention=True)
    observe(state, paused, 201.0)
    observe(state, msg("!chorus pause", "viewer"), 202.0)
    assert not state.paused  # a viewer cannot pause: nothing declined
    assert take_declined(state) == []
    observe(state, msg("!chorus pause", "mod", roles=(Role.MODERATOR,)), 203.0)
    assert [(d.message.id, d.reason) for d in take_declined(state)] == [(paused.id, "paused")]
    check_counters(state)


def test_a_flooders_ambient_lines_still_go() -> None:
    state = new_state(flood_max_messages=3, flood_window_seconds=15)
    for i in range(3):
        observe(state, msg(f"line {i}", "spam"), float(i))
    assert observe(state, msg("line 3", "spam"), 3.0).reason is Reason.FLOOD
    assert "spam" not in state.pending and state.dropped["flood"] == 3
    check_counters(state)
