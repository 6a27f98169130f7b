"""The thanks policy, table-tested (bot/engagement/thanks.py): bursts coalesce into one thanks, kinds
are off until turned on, the caps and waits hold. Pure: every time is passed in."""

from __future__ import annotations

import pytest

from bot.engagement import thanks
from bot.engagement.thanks import Thanks, ThanksConfig, ThanksState
from bot.events import ChatMessage
from tests.thanks_rig import K, burst, event, state


def feed(
    waiting: ThanksState, messages: list[ChatMessage], at: float = 0.0, step: float = 0.0
) -> list[bool]:
    return [thanks.observe(waiting, m, at + i * step) for i, m in enumerate(messages)]


def named(due: Thanks | None) -> list[tuple[str, str | None, int]]:
    """Each named entry: kind, name, size (people in order, a person's kinds in rank order)."""
    assert due is not None
    return [
        (e.kind.value, e.user_name or e.user_id, e.gifts or e.count or e.bits)
        for person in due.named
        for e in person
    ]


def test_every_kind_is_off_by_default() -> None:
    waiting = ThanksState(ThanksConfig())
    everything = [event(kind, f"u{n}") for n, kind in enumerate(K)]
    assert not any(feed(waiting, everything))
    assert thanks.due(waiting, 1000.0) is None and not waiting.pending


@pytest.mark.parametrize(
    ("on", "expected"),
    [
        ((K.RAID,), ["raid"]),
        ((K.SUB, K.RESUB), ["sub", "resub"]),  # same weight: arrival order
        ((K.GIFT_SUB, K.CHEER, K.SUPER_CHAT), ["gift_sub", "cheer", "super_chat"]),
        ((K.SUPER_STICKER, K.ANNOUNCEMENT), ["super_sticker", "announcement"]),
    ],
)
def test_only_the_kinds_turned_on_are_thanked(on: tuple[K, ...], expected: list[str]) -> None:
    waiting = state(*on, max_names=10)
    feed(waiting, [event(kind, f"u{n}", count=2, bits=5, months=3) for n, kind in enumerate(K)])
    assert [kind for kind, _, _ in named(thanks.due(waiting, 60.0))] == expected


def test_a_gift_burst_is_one_thanks_with_the_announced_total() -> None:
    waiting = state(K.GIFT_SUB)
    assert all(feed(waiting, burst("gifter", "g1", 20), step=0.1))  # 21 notices, 21 message ids
    assert named(thanks.due(waiting, 7.0)) == [("gift_sub", "GIFTER", 20)]
    assert thanks.due(waiting, 100.0) is None


@pytest.mark.parametrize(
    ("order", "total", "parts", "expected"),
    [
        ("announcement first", 5, 5, 5),
        ("parts first", 5, 5, 5),
        ("more parts than announced", 3, 4, 4),
        ("parts missing", 10, 2, 10),
    ],
)
def test_a_burst_counts_once_whatever_the_order(
    order: str, total: int, parts: int, expected: int
) -> None:
    waiting = state(K.GIFT_SUB)
    messages = burst("g", "c1", total, parts=parts)
    if order == "parts first":
        messages = messages[1:] + messages[:1]
    feed(waiting, messages)
    assert named(thanks.due(waiting, 10.0)) == [("gift_sub", "G", expected)]


def test_parts_that_arrive_after_the_thanks_never_start_a_second_one() -> None:
    waiting = state(K.GIFT_SUB, min_gap_seconds=0)
    messages = burst("g", "late", 10)
    feed(waiting, messages[:4])
    assert named(thanks.due(waiting, 6.0)) == [("gift_sub", "G", 10)]
    assert not any(feed(waiting, messages[4:], at=7.0))
    assert thanks.due(waiting, 60.0) is None


def test_redelivered_messages_count_once_and_distinct_ids_all_count() -> None:
    waiting = state(K.GIFT_SUB, K.CHEER)
    cheer = event(K.CHEER, "c", bits=100)
    parts = burst("g", "x", 3)[1:]  # three single notices of a burst, no announcement seen
    assert feed(waiting, [cheer, cheer, *parts, parts[0]]) == [True, False, True, True, True, False]
    assert named(thanks.due(waiting, 10.0)) == [("gift_sub", "G", 3), ("cheer", "C", 100)]


def test_one_gifters_bursts_and_single_gifts_are_one_name() -> None:
    waiting = state(K.GIFT_SUB)
    single = event(K.GIFT_SUB, "g", count=1, recipient_id="r-single")
    feed(waiting, [*burst("g", "b1", 5), *burst("g", "b2", 10), single, *burst("h", "b3", 1)])
    assert named(thanks.due(waiting, 10.0)) == [("gift_sub", "G", 16), ("gift_sub", "H", 1)]


def test_an_anonymous_gifter_is_thanked_without_a_name() -> None:
    waiting = state(K.GIFT_SUB)
    feed(waiting, burst(None, "anon", 3))
    due = thanks.due(waiting, 10.0)
    assert named(due) == [("gift_sub", None, 3)]
    assert due is not None and "an anonymous gifter: gifted 3 subs" in thanks.turn_text(
        due, "twitch"
    )


def test_one_persons_events_add_up() -> None:
    waiting = state(K.CHEER, K.SUPER_CHAT, K.RAID)
    feed(
        waiting,
        [
            event(K.CHEER, "c", bits=100, text="Cheer100 hi"),
            event(K.CHEER, "c", bits=50, text="Cheer50 again"),
            event(K.CHEER, "c", bits=1, text="Cheer1 third"),
            event(K.SUPER_CHAT, "s", amount="$5.00", amount_micros=5_000_000),
            event(K.SUPER_CHAT, "s", amount="$2.00", amount_micros=2_000_000),
            event(K.RAID, "r", count=12),
        ],
    )
    due = thanks.due(waiting, 10.0)
    assert named(due) == [("raid", "R", 12), ("cheer", "C", 151), ("super_chat", "S", 0)]
    assert due is not None
    (cheer,), (paid,) = due.named[1], due.named[2]
    assert cheer.messages == ["Cheer100 hi", "Cheer50 again"]  # at most MAX_MESSAGES lines
    assert paid.amounts == ["$5.00", "$2.00"] and paid.micros == 7_000_000


def test_raids_first_then_gifts_paid_subs_and_bigger_first_within_a_kind() -> None:
    waiting = state(max_names=10)
    feed(
        waiting,
        [
            event(K.ANNOUNCEMENT, "mod", text="schedule"),
            event(K.SUB, "s"),
            event(K.CHEER, "small", bits=10),
            event(K.CHEER, "big", bits=1000),
            *burst("g", "b", 2),
            event(K.RAID, "r", count=3),
        ],
    )
    order = [name for _, name, _ in named(thanks.due(waiting, 10.0))]
    assert order == ["R", "G", "BIG", "SMALL", "S", "MOD"]


def test_a_burst_waits_to_settle_but_not_past_the_cap() -> None:
    waiting = state(K.SUB, settle_seconds=5, max_wait_seconds=30)
    for t in range(0, 40, 2):  # a new sub every 2 s: the burst never settles by itself
        thanks.observe(waiting, event(K.SUB, f"s{t}"), float(t))
        if t < 30:
            assert thanks.due(waiting, t + 1.0) is None
    due = thanks.due(waiting, 39.0)  # capped: 30 s after the first sub
    assert due is not None and len(due.named) + due.others == 20


def test_thanks_keep_their_gap_and_quiet_channels_are_forgotten() -> None:
    waiting = state(K.RAID, min_gap_seconds=30)
    thanks.observe(waiting, event(K.RAID, "a", count=1), 0.0)
    assert thanks.due(waiting, 4.9) is None  # still settling
    assert thanks.due(waiting, 5.0) is not None
    thanks.observe(waiting, event(K.RAID, "b", count=1), 10.0)
    assert thanks.due(waiting, 20.0) is None  # settled, but only 15 s after the last thanks
    assert named(thanks.due(waiting, 35.0)) == [("raid", "B", 1)]
    assert not thanks.idle(waiting, 35.0 + thanks.EVICT_AFTER)
    assert thanks.idle(waiting, 35.1 + thanks.EVICT_AFTER)


def test_caps_name_a_few_and_count_the_rest() -> None:
    waiting = state(K.SUB, K.GIFT_SUB, max_names=2, max_pending=5)
    feed(waiting, [event(K.SUB, f"s{n}") for n in range(8)])
    feed(waiting, burst("g", "late", 4))  # a burst past the cap counts once, not per notice
    assert len(waiting.pending) == 5 and len(waiting.overflow) == 4  # kept 5, counted 4
    due = thanks.due(waiting, 10.0)
    assert due is not None and due.user_ids == ("s0", "s1")
    assert due.others == 7
    assert "- and 7 more supporters" in thanks.turn_text(due, "twitch")


def test_clear_drops_what_waits() -> None:
    waiting = state(K.SUB)
    feed(waiting, [event(K.SUB, "a"), event(K.SUB, "b")])
    assert thanks.clear(waiting) == 2
    assert thanks.due(waiting, 100.0) is None


@pytest.mark.parametrize(
    "bad",
    [
        {"settle_seconds": -1},
        {"settle_seconds": 10, "max_wait_seconds": 5},
        {"max_names": 0},
        {"max_names": 5, "max_pending": 4},
    ],
)
def test_config_is_checked(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        ThanksConfig(**bad)  # type: ignore[arg-type]


def test_one_person_is_named_once_with_everything_they_did() -> None:
    waiting = state(max_names=2)
    feed(
        waiting,
        [
            event(K.SUPER_CHAT, "a", amount="$5.00", text="love it"),
            event(K.SUB, "b"),
            *burst("a", "g", 5),
            event(K.SUPER_STICKER, "a", amount="$2.00"),
        ],
    )
    due = thanks.due(waiting, 10.0)
    assert due is not None and due.user_ids == ("a", "b") and due.others == 0
    text = thanks.turn_text(due, "youtube")
    assert text.splitlines()[0] == (
        "- A: gifted 5 memberships to the community (Tier 1); sent a Super Chat ($5.00); "
        "sent a Super Sticker ($2.00)"
    )
    assert text.splitlines()[1:] == ["  and wrote: love it", "- B: became a member"]


def test_late_parts_are_absorbed_for_the_latest_thanked_bursts_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(thanks, "DONE_GIFTS", 2)
    waiting = state(K.GIFT_SUB)
    for n, gift in enumerate(("g1", "g2", "g3")):
        feed(waiting, burst("gifter", gift, 1), at=100.0 * n)
        assert named(thanks.due(waiting, 100.0 * n + 10)) == [("gift_sub", "GIFTER", 1)]
    late = [
        event(K.GIFT_SUB, "gifter", count=1, gift_id=g, recipient_id="r")
        for g in ("g3", "g2", "g1")
    ]
    # g3 and g2 are remembered (their late parts absorbed); g1, thanked first, was forgotten
    assert feed(waiting, late, at=400.0) == [False, False, True]
