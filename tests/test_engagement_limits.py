"""Table tests for the engagement policy, part two: spam filters, pause and resume, idle prompting, the ledger's bounds, configuration, and a property test over random streams. Pure: explicit ``now`` values, no clock, no sleep."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.engagement import policy as engagement
from bot.engagement.policy import (
    SEND_LIMITS,
    Action,
    ChannelState,
    Decision,
    Engagement,
    PolicyConfig,
    Reason,
    due,
    idle_due,
    is_question,
    is_wall,
    mark_spoke,
    observe,
    send_limit,
)
from bot.events import ChatMessage, ConversationKey, Role
from tests.engagement_rig import KEY, chatter_lines, check_counters, msg, new_state


@pytest.mark.parametrize(
    ("first", "second", "gap", "reason"),
    [
        ("Nice shot!", "nice   SHOT", 10.0, Reason.REPEAT),
        ("Nice shot!", "nice shot", 61.0, Reason.CHATTER),
        ("Nice shot!", "nicer shot", 1.0, Reason.CHATTER),
    ],
)
def test_repeated_lines_are_ignored_within_the_window(
    first: str, second: str, gap: float, reason: Reason
) -> None:
    state = new_state(repeat_window_seconds=60)
    observe(state, msg(first), 0.0)
    assert observe(state, msg(second), gap).reason is reason


def test_a_flooder_is_ignored_and_its_queued_lines_dropped() -> None:
    state = new_state(flood_max_messages=6, flood_window_seconds=15)
    reasons = [observe(state, msg(f"buy followers {i}", "spam"), i * 2.0).reason for i in range(8)]
    assert reasons[:6] == [Reason.CHATTER] * 6
    assert reasons[6:] == [Reason.FLOOD, Reason.FLOOD]
    assert "spam" not in state.pending
    assert state.dropped["flood"] == 3  # the per-chatter cap had kept the newest three
    check_counters(state)
    assert observe(state, msg("calm now", "spam"), 60.0).reason is Reason.CHATTER


@pytest.mark.parametrize(
    ("text", "wall"),
    [
        ("x" * 401, True),
        ("KEKW " * 8, True),
        ("A" * 30, True),
        ("LUL LUL LUL LUL LUL LUL", True),
        (
            "honestly the way he baited the boss into the corner before swapping weapons was "
            "the cleanest thing I have seen all week, and the chat called it before it happened "
            "which makes it even funnier; I really hope the clip gets posted to the subreddit "
            "later tonight",
            False,
        ),
        ("KEKW KEKW", False),
        ("what game is this?", False),
    ],
)
def test_walls_of_text_are_ignored(text: str, wall: bool) -> None:
    assert is_wall(text, 400) is wall
    expected = Reason.WALL if wall else Reason.QUESTION if "?" in text else Reason.CHATTER
    assert observe(new_state(), msg(text), 0.0).reason is expected


@pytest.mark.parametrize(
    ("text", "question"),
    [
        ("is this the new patch", True),
        ("How do you do that", True),
        ("anyone know the song", True),
        ("that was great, right?", True),
        ("this is great", False),
        ("lol", False),
        ("", False),
    ],
)
def test_question_detection(text: str, question: bool) -> None:
    assert is_question(text) is question


def test_duplicates_other_bots_and_empty_lines_are_ignored() -> None:
    state = new_state()
    observe(state, msg("hi", msg_id="same"), 0.0)
    assert observe(state, msg("hi", msg_id="same"), 1.0).reason is Reason.DUPLICATE
    assert observe(state, msg("follow me", "nightbot", bot=True), 1.0).reason is Reason.BOT_AUTHOR
    assert observe(state, msg("   "), 2.0).reason is Reason.EMPTY


def test_a_chat_bot_command_is_never_batch_material_but_a_mention_still_is() -> None:
    state = new_state(min_pending=1, min_gap_seconds=0)
    for line in ("!socials", "  !so @friend", "!Discord please"):
        assert observe(state, msg(line, "b"), 1.0) == Decision(Action.IGNORE, Reason.BOT_COMMAND)
    assert not state.pending and due(state, 100.0) is None
    for who, line in (("c", "! wow"), ("d", "!!!"), ("e", "!?")):  # exclamations, not commands
        assert observe(state, msg(line, who), 2.0).action is Action.QUEUE
    assert observe(state, msg("@bot !socials", mention=True), 3.0).action is Action.ANSWER_NOW


@pytest.mark.parametrize("role", [Role.MODERATOR, Role.OWNER])
def test_pause_and_resume_by_a_moderator_or_the_broadcaster(role: Role) -> None:
    state = new_state(min_pending=1, min_gap_seconds=0)
    observe(state, msg("queued chatter", "b"), 0.0)
    assert observe(state, msg("!Chorus PAUSE", "mod", roles=(role,)), 1.0) == Decision(
        Action.COMMAND, Reason.PAUSE
    )
    assert state.paused and not state.pending and state.dropped["paused"] == 1
    for message in (msg("@bot hi", mention=True), msg("what?", "c"), msg("hi", direct=True)):
        assert observe(state, message, 2.0) == Decision(Action.IGNORE, Reason.PAUSED)
    assert due(state, 100.0) is None
    assert observe(state, msg("!chorus resume", "mod", roles=(role,)), 3.0).reason is Reason.RESUME
    assert not state.paused
    assert observe(state, msg("@bot back?", mention=True), 4.0).action is Action.ANSWER_NOW


@pytest.mark.parametrize("roles", [(), (Role.SUBSCRIBER,), (Role.MEMBER,)])
def test_pause_from_a_viewer_is_ignored(roles: tuple[Role, ...]) -> None:
    state = new_state()
    decision = observe(state, msg("!chorus pause", "viewer", roles=roles), 0.0)
    assert decision == Decision(Action.IGNORE, Reason.NOT_PERMITTED)
    assert not state.paused
    observe(state, msg("!chorus pause", "mod", roles=(Role.MODERATOR,)), 1.0)
    assert observe(state, msg("!chorus resume", "viewer"), 2.0).reason is Reason.NOT_PERMITTED
    assert state.paused
    assert observe(state, msg("!chorus dance", "mod", roles=(Role.MODERATOR,)), 3.0).reason is (
        Reason.UNKNOWN_COMMAND
    )


def test_idle_prompting_is_off_by_default() -> None:
    state = new_state()
    observe(state, msg("hi"), 0.0)
    assert not any(idle_due(state, t) for t in (100.0, 1000.0, 100000.0))


def test_idle_fires_once_per_quiet_period() -> None:
    state = new_state(idle_prompt_after_seconds=120)
    assert not idle_due(state, 500.0)  # nobody has spoken yet: never into an empty channel
    observe(state, msg("hi"), 0.0)
    assert not idle_due(state, 119.0)
    assert idle_due(state, 120.0)
    assert not idle_due(state, 121.0) and not idle_due(state, 10000.0)
    observe(state, msg("back"), 10000.0)  # a user's message starts a new quiet period
    mark_spoke(state, 10050.0)  # the bot speaking pushes it back
    assert not idle_due(state, 10169.0)
    assert idle_due(state, 10170.0)


def test_idle_never_fires_while_paused() -> None:
    state = new_state(idle_prompt_after_seconds=60)
    observe(state, msg("hi"), 0.0)
    observe(state, msg("!chorus pause", "mod", roles=(Role.MODERATOR,)), 1.0)
    assert not idle_due(state, 1000.0)
    observe(state, msg("!chorus resume", "mod", roles=(Role.MODERATOR,)), 1001.0)
    assert not idle_due(state, 1060.0)
    assert idle_due(state, 1061.0)


def test_stale_pending_messages_are_dropped_not_answered() -> None:
    state = new_state(min_pending=8, min_gap_seconds=0, stale_after_seconds=180)
    chatter_lines(state, [f"u{i}" for i in range(8)], 0.0)
    observe(state, msg("fresh", "late"), 200.0)
    assert due(state, 200.0) is None
    assert state.dropped["stale"] == 8 and list(state.pending) == ["late"]
    check_counters(state)


def test_the_ledger_drops_its_oldest_chatter_beyond_the_cap() -> None:
    state = new_state(max_pending_chatters=3, max_pending_per_chatter=2)
    chatter_lines(state, ["a", "b", "c", "d"], 0.0)
    assert list(state.pending) == ["b", "c", "d"] and state.dropped["overflow"] == 1
    for i in range(3):
        observe(state, msg(f"more {i}", "d"), 1.0 + i)
    assert len(state.pending["d"].messages) == 2 and state.dropped["superseded"] == 2
    check_counters(state)


def test_every_structure_stays_bounded() -> None:
    config = PolicyConfig(max_tracked_users=100, max_pending_chatters=10)
    state = ChannelState(config)
    for i in range(20000):
        observe(state, msg(f"line {i}", f"u{i % 3000}", mention=i % 50 == 0), i * 0.01)
        if i % 100 == 0:
            due(state, i * 0.01)
    assert len(state.users) <= 100
    assert len(state.pending) <= 10
    assert all(len(c.messages) <= config.max_pending_per_chatter for c in state.pending.values())
    assert len(state.seen) == len(state.seen_order) <= 4096
    assert all(len(u.times) <= config.flood_max_messages for u in state.users.values())
    check_counters(state)


def _lines_run(state: ChannelState, message: ChatMessage, now: float) -> int:
    """How many lines of bot/engagement/policy.py run while observing one message."""
    count = 0

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if frame.f_code.co_filename == engagement.__file__:
            if event == "line":
                count += 1
            return tracer
        return None

    sys.settrace(tracer)
    try:
        observe(state, message, now)
    finally:
        sys.settrace(None)
    return count


@pytest.mark.parametrize("kind", ["chatter", "question", "mention"])
def test_observe_does_the_same_work_whatever_the_ledger_size(kind: str) -> None:
    def run(ledger: int) -> int:
        state = new_state(max_pending_chatters=1000, max_tracked_users=10000)
        chatter_lines(state, [f"u{i}" for i in range(ledger)], 0.0)
        text = {"chatter": "lol nice", "question": "what is this?", "mention": "hey"}[kind]
        return _lines_run(state, msg(text, "newcomer", mention=kind == "mention"), 1.0)

    assert run(5) == run(900)


def test_overrides_per_channel_then_per_platform() -> None:
    channel, platform = PolicyConfig(min_pending=2), PolicyConfig(min_pending=3)
    policy = Engagement(overrides={str(KEY): channel, "twitch": platform})
    other = ConversationKey(platform="twitch", channel="other")
    youtube = ConversationKey(platform="youtube", channel="live")
    assert policy.state(KEY).config is channel
    assert policy.state(other).config is platform
    assert policy.state(youtube).config == PolicyConfig()
    assert policy.state(KEY) is policy.state(KEY)


def test_config_rejects_a_stale_window_inside_the_user_cooldown() -> None:
    with pytest.raises(ValueError, match="stale_after_seconds"):
        PolicyConfig(stale_after_seconds=10, user_cooldown_seconds=10)


@pytest.mark.parametrize(
    ("platform", "moderator", "messages", "seconds", "per_channel"),
    [
        ("twitch", False, 20, 30.0, False),
        ("twitch", True, 100, 30.0, False),
        ("discord", False, 5, 5.0, True),
        ("slack", False, 1, 1.0, True),
        ("console", False, 1, 1.0, True),
    ],
)
def test_send_limits(
    platform: str, moderator: bool, messages: int, seconds: float, per_channel: bool
) -> None:
    limit = send_limit(platform, bot_is_moderator=moderator)
    assert limit is not None
    assert (limit.messages, limit.seconds, limit.per_channel) == (messages, seconds, per_channel)


def test_youtube_has_no_made_up_send_rate_its_quota_limits_it() -> None:
    assert send_limit("youtube") is None and "youtube" not in SEND_LIMITS


_event = st.tuples(
    st.floats(min_value=0, max_value=30),
    st.sampled_from(["a", "b", "c", "d", "e", "mod"]),
    st.sampled_from(["lol", "what is this?", "gg", "!chorus pause", "!chorus resume", "x" * 500]),
    st.booleans(),
    st.booleans(),
)


def _stream(events: list[tuple[float, str, str, bool, bool]]) -> Iterator[tuple[float, Any]]:
    now = 0.0
    for gap, user, text, mention, tick in events:
        now += gap
        roles = (Role.MODERATOR,) if user == "mod" else ()
        yield now, (msg(text, user, roles=roles, mention=mention), tick)


@settings(max_examples=150, deadline=None)
@given(st.lists(_event, max_size=120))
def test_random_streams_never_answer_twice_and_stay_consistent(
    events: list[tuple[float, str, str, bool, bool]],
) -> None:
    state = new_state(min_pending=2, min_gap_seconds=5, max_pending_chatters=4)
    answered: list[str] = []
    for now, (message, tick) in _stream(events):
        decision = observe(state, message, now)
        if decision.action is Action.ANSWER_NOW:
            answered += [message.id, *(p.message.id for p in decision.covered)]
        if tick:
            batch = due(state, now)
            if batch is not None:
                assert 1 <= len(batch.chatters) <= 2
                answered += batch.message_ids
        check_counters(state)
        assert len(state.pending) <= 4
    assert len(answered) == len(set(answered))
