"""The order the suite's tests start in, a pytest plugin (the conftest loads it): the long
tests first, dealt out across the pytest-xdist workers, so a run does not end on one long test
that happened to start late.

Most of the suite's wall time is a few hundred ``e2e`` tests that wait on real processes and
real timers (BENCHMARKS.md, "The suite"); a handful take one to four minutes each. pytest's own
order is by file name, so one of those could start in the last minutes of a run and keep one
worker busy after every other one ran out of tests. Here the e2e modules are dealt like cards,
a whole module at a time (its module-scoped fixtures, such as tests/test_wheel.py's built
wheel, are then made once), into one hand per worker: the modules of ``LONGEST`` first (measured,
slowest first), then the other e2e modules in file order. Each hand is then filled up, in file
order, with the tests that start no process, to the size of the share ``--dist worksteal``
(``make test``) gives each worker at the start: a contiguous ``len // workers_left`` of what is
left. So each worker starts on its share of the long tests, and a worker that runs out steals
the back half of the longest queue: quick tests.

Only the order changes: every collected test runs, and each is independent of the others
(each has its own working directory, Redis keys, ports and processes: tests/conftest.py). A
stale ``LONGEST`` costs time, never a result.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

import pytest

T = TypeVar("T")
MARKER = "e2e"  # (tests/suite_rules.py marks the *_e2e.py files with it)

# The modules with the longest tests, longest first: `pytest -n 4 --durations=80` on the 2-core
# machine, 2026-12-06 (BENCHMARKS.md, "The suite"). Not the rolling restart (1.5-4 min): it
# asserts its slowest answer under 25 s, and started first, beside `make check` (mypy) and the
# gate (valgrind), both its runs took 26-36 s; in file order it starts once those are done.
LONGEST = (
    "test_youtube_poll_floor_e2e.py",
    "test_wheel.py",
    "test_outbox_e2e.py",
    "test_voice_overlay_e2e.py",
    "test_summaries_e2e.py",
    "test_bench_turn_ratio.py",
    "test_builtin_timers_e2e.py",
    "test_stream_discord_e2e.py",
    "test_persistence_e2e.py",
    "test_discord_shards_e2e.py",
    "test_worker_takeover_e2e.py",
    "test_admin_knowledge_e2e.py",
    "test_bench_startup.py",
)


def shares(total: int, hands: int) -> list[int]:
    """How many tests ``--dist worksteal`` gives each of ``hands`` workers at the start."""
    sizes = []
    for taken in range(hands):
        sizes.append(total // (hands - taken))
        total -= sizes[-1]
    return sizes


def dealt(
    items: Sequence[T],
    hands: int,
    *,
    long: Callable[[T], int | None],
    module: Callable[[T], Hashable],
) -> list[T]:
    """``items`` in ``hands`` hands laid end to end: the modules of the long items (``long``:
    a rank, lowest first, or None for a quick item) dealt whole by rank, then file order; each
    hand filled up to its ``shares`` with the quick items in their order."""
    groups: dict[Hashable, list[T]] = {}
    quick: list[T] = []
    for item in items:
        if long(item) is None:
            quick.append(item)
        else:
            groups.setdefault(module(item), []).append(item)
    ranked = sorted(groups.values(), key=lambda group: min(long(i) or 0 for i in group))
    dealt_out: list[list[T]] = [[] for _ in range(hands)]
    for n, group in enumerate(ranked):
        dealt_out[n % hands].extend(group)
    out: list[T] = []
    rest = iter(quick)
    for hand, size in zip(dealt_out, shares(len(items), hands), strict=True):
        out.extend(hand)
        out.extend(item for _, item in zip(range(size - len(hand)), rest, strict=False))
    out.extend(rest)
    return out


def rank(item: pytest.Item) -> int | None:
    """0, 1, ... for the modules of ``LONGEST``; then the other e2e tests; None for the rest."""
    name = item.path.name
    if name in LONGEST:
        return LONGEST.index(name)
    return len(LONGEST) if item.get_closest_marker(MARKER) is not None else None


def worker_count() -> int:
    """How many pytest-xdist workers run the suite (1 without ``-n``)."""
    return max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


@pytest.hookimpl(trylast=True)  # after every marker was added
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items[:] = dealt(items, worker_count(), long=rank, module=lambda item: item.path)
