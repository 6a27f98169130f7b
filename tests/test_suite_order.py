"""The suite's start order (tests/suite_order.py): the long modules first, dealt whole across
the workers, each worker's share filled up with the quick tests."""

from __future__ import annotations

from tests.suite_order import dealt, shares

# (module, rank or None for a quick test, name)
ITEMS = [
    ("a", None, "a1"),
    ("b", 2, "b1"),
    ("c", 0, "c1"),
    ("c", 0, "c2"),
    ("d", None, "d1"),
    ("d", None, "d2"),
    ("e", 1, "e1"),
    ("f", 2, "f1"),
    ("g", None, "g1"),
    ("g", None, "g2"),
]


def order(hands: int) -> list[str]:
    made = dealt(ITEMS, hands, long=lambda item: item[1], module=lambda item: item[0])
    assert sorted(made) == sorted(ITEMS)  # every test, once
    return [name for _, _, name in made]


def test_each_worker_share_starts_with_its_turn_of_the_long_modules_kept_whole() -> None:
    assert shares(10, 2) == [5, 5] and shares(10, 3) == [3, 3, 4]  # worksteal's first shares
    # c (rank 0) and e (1) to the first and second hands, b and f (2, file order) after them
    assert order(2) == ["c1", "c2", "b1", "a1", "d1"] + ["e1", "f1", "d2", "g1", "g2"]
    assert order(3) == ["c1", "c2", "f1"] + ["e1", "a1", "d1"] + ["b1", "d2", "g1", "g2"]


def test_one_worker_runs_the_long_modules_first_then_the_quick_tests_in_file_order() -> None:
    assert order(1) == ["c1", "c2", "e1", "b1", "f1", "a1", "d1", "d2", "g1", "g2"]
