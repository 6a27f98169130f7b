"""The merge rules: add, update, replace, keep; a contradiction replaces the older pin and the
two are never both lost; stale targets; confidence floor; caps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bot.memory.buffers import PIN_TEXT_MAX, MemorySettings, Pin, Recommendation, UserBuffer
from insights.analyse import ProposedPin, ProposedRec
from insights.merge import MergeReport, merge

T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
LATER = T0 + timedelta(days=3)
SETTINGS = MemorySettings()


def pin(text: str, confidence: float = 0.8, at: datetime = T0) -> Pin:
    return Pin(text=text, source="old", confidence=confidence, created_at=at, updated_at=at)


def state(*pins: Pin, recs: tuple[Recommendation, ...] = ()) -> UserBuffer:
    return UserBuffer(platform="discord", user_id="alice", pins=pins, recommendations=recs)


def op(
    kind: str, text: str = "", target: int | None = None, confidence: float = 0.9
) -> ProposedPin:
    return ProposedPin(kind, target, text, "m9", confidence)  # type: ignore[arg-type]


def run(
    current: UserBuffer,
    *pins: ProposedPin,
    recs: tuple[ProposedRec, ...] = (),
    shown: UserBuffer | None = None,
) -> tuple[UserBuffer, MergeReport]:
    return merge(current, pins, recs, shown=(shown or current).pins, now=LATER, settings=SETTINGS)


def texts(buffer: UserBuffer) -> list[str]:
    return [p.text for p in buffer.pins]


def test_add_a_new_pin() -> None:
    merged, report = run(state(pin("Lives in Lyon")), op("add", "Is vegan"))
    assert texts(merged) == ["Lives in Lyon", "Is vegan"]
    new = merged.pins[1]
    assert (new.confidence, new.created_at, new.updated_at) == (0.9, LATER, LATER)
    assert new.came_from("m9")
    assert report.added == 1 and report.changed


def test_adding_a_restated_pin_updates_it_instead() -> None:
    merged, report = run(state(pin("Is vegan")), op("add", "Is a vegan"))
    assert texts(merged) == ["Is a vegan"]
    assert merged.pins[0].created_at == T0 and merged.pins[0].updated_at == LATER
    assert report.updated == 1 and report.added == 0


def test_update_refines_in_place() -> None:
    current = state(pin("Lives in Lyon"), pin("Learning Rust"))
    merged, report = run(current, op("update", "Learning Rust for a CLI tool", target=2))
    assert texts(merged) == ["Lives in Lyon", "Learning Rust for a CLI tool"]
    assert merged.pins[1].created_at == T0 and merged.pins[1].updated_at == LATER
    assert merged.pins[1].came_from("m9")
    assert report.updated == 1


def test_a_contradiction_replaces_the_older_pin() -> None:
    current = state(pin("Is vegan"), pin("Lives in Lyon"))
    merged, report = run(current, op("replace", "Eats fish again", target=1))
    assert texts(merged) == ["Lives in Lyon", "Eats fish again"]
    assert merged.pins[1].created_at == LATER
    assert report.replaced == 1


def test_a_bad_replacement_never_deletes_both() -> None:
    current = state(pin("Is vegan"))
    for bad in ("", "x" * (PIN_TEXT_MAX + 1), "\x00\x01"):
        merged, report = run(current, op("replace", bad, target=1))
        assert texts(merged) == ["Is vegan"], bad
        assert report.dropped == 1 and report.replaced == 0
    merged, _ = run(current, op("replace", "Eats fish", target=1, confidence=0.2))
    assert texts(merged) == ["Is vegan"], "an unsure contradiction does not win"


def test_replacing_with_a_restatement_of_another_pin_keeps_one_copy() -> None:
    current = state(pin("Is vegan"), pin("Lives in Lyon"))
    merged, _ = run(current, op("replace", "Lives in Lyon!", target=1))
    assert texts(merged) == ["Lives in Lyon!"]


def test_keep_changes_nothing() -> None:
    current = state(pin("Is vegan"))
    merged, report = run(current, op("keep", target=1))
    assert merged == current
    assert report.kept == 1 and not report.changed


def test_an_unknown_target_turns_into_an_add() -> None:
    current = state(pin("Is vegan"))
    merged, _ = run(current, op("replace", "Lives in Oslo", target=7), op("update", "Plays go"))
    assert texts(merged) == ["Is vegan", "Lives in Oslo", "Plays go"]


def test_targets_are_found_by_value_in_the_buffer_as_stored() -> None:
    shown = state(pin("Is vegan"), pin("Lives in Lyon"))
    # Meanwhile a /remember added a pin in front and "Is vegan" was refined by someone else.
    current = state(pin("Remembered", 1.0), pin("Is strictly vegan"), pin("Lives in Lyon"))
    merged, _ = run(
        current,
        op("replace", "Lives in Paris", target=2),
        op("update", "Is vegan since 2019", target=1),
        shown=shown,
    )
    assert texts(merged) == [
        "Remembered",
        "Is strictly vegan",
        "Lives in Paris",
        "Is vegan since 2019",
    ]


def test_a_target_is_used_once() -> None:
    current = state(pin("Is vegan"))
    merged, _ = run(
        current,
        op("replace", "Eats fish", target=1),
        op("replace", "Eats chicken", target=1),
    )
    assert texts(merged) == ["Eats fish", "Eats chicken"]


def test_low_confidence_proposals_are_dropped() -> None:
    merged, report = run(state(), op("add", "Might like jazz", confidence=0.3))
    assert merged == state()
    assert report.dropped == 1


def test_caps_evict_the_weakest_pin() -> None:
    full = state(*(pin(f"Fact {chr(97 + n)}", 0.6 + n / 100) for n in range(20)))
    merged, _ = run(full, op("add", "Is vegan", confidence=0.95))
    assert len(merged.pins) == SETTINGS.pins_max
    assert "Fact a" not in texts(merged) and "Is vegan" in texts(merged)


def test_recommendations_are_added_deduplicated_and_capped() -> None:
    old = tuple(
        Recommendation(text=f"Old tip {chr(97 + n)}", created_at=T0 + timedelta(seconds=n))
        for n in range(10)
    )
    merged, report = run(
        state(recs=old),
        recs=(
            ProposedRec("Answer in French", None, "m9"),
            ProposedRec("answer in french!", None, "m9"),
            ProposedRec("x" * 200, "tool", "m9"),
        ),
    )
    assert [r.text for r in merged.recommendations][-1] == "answer in french!"
    assert len(merged.recommendations) == 10
    assert "Old tip a" not in [r.text for r in merged.recommendations]
    assert report.recommendations == 2 and report.dropped == 1
