"""Mutations of recorded platform payloads, for the property tests that feed them to adapters.

Why: a platform (or anyone who can reach an endpoint) sends what it sends; an adapter must log
and skip a payload it cannot read and keep its connection. The recorded fixtures are what the
platforms document; the variants here are those payloads with one to three fields, at any
depth, removed, set to null or retyped (str <-> int <-> list <-> dict, and bool and float), the
shapes a parser is most likely to choke on. ``mutations`` is the hypothesis strategy (a list of
``(where, kind, which)`` picks resolved against the payload's own paths, so every example is a
plausible near-miss of a real payload); ``mutate`` applies one by hand. Pure: no I/O.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from hypothesis import strategies as st

T = TypeVar("T")
FIXTURES = Path(__file__).resolve().parent / "fixtures"
Path_ = tuple[str | int, ...]
KINDS = ("remove", "null", "str", "int", "float", "bool", "list", "dict")
Pick = tuple[int, str, int]


def fixture(platform: str, name: str) -> Any:
    return json.loads((FIXTURES / platform / f"{name}.json").read_text(encoding="utf-8"))


def paths(node: Any, prefix: Path_ = ()) -> list[Path_]:
    """Every path to a value inside ``node`` (dict keys and list indexes), depth first."""
    found: list[Path_] = []
    items: Sequence[tuple[str | int, Any]] = ()
    if isinstance(node, dict):
        items = list(node.items())
    elif isinstance(node, list):
        items = list(enumerate(node))
    for key, value in items:
        path = (*prefix, key)
        found.append(path)
        found.extend(paths(value, path))
    return found


def retyped(value: Any, kind: str, which: int = 0) -> Any:
    """``value`` as a ``kind``: a different type where it is another, an edge case where not."""
    text = value if isinstance(value, str) else json.dumps(value)
    is_int = isinstance(value, int) and not isinstance(value, bool)
    choices: dict[str, list[Any]] = {
        "null": [None],
        "str": ["", "x"] if isinstance(value, str) else [text, ""],
        "int": [-1, 2**64] if is_int else [0, 2**64, -1],
        "float": [1.5, -0.0, 1e308],
        "bool": [not value] if isinstance(value, bool) else [True, False],
        "list": [[], [value]] if not isinstance(value, list) else [[], [[]]],
        "dict": [{}, {"": value}] if not isinstance(value, dict) else [{}, {"": None}],
    }
    options = choices[kind]
    return options[which % len(options)]


def mutate(payload: Any, path: Path_, kind: str, which: int = 0) -> Any:
    """A deep copy of ``payload`` with the value at ``path`` removed or replaced."""
    out = copy.deepcopy(payload)
    if not path:
        return None if kind == "remove" else retyped(out, kind, which)
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    last = path[-1]
    if kind == "remove":
        del parent[last]
    else:
        parent[last] = retyped(parent[last], kind, which)
    return out


def apply(payload: Any, picks: Sequence[Pick]) -> Any:
    """Apply each pick to the payload's paths as they are after the picks before it."""
    for where, kind, which in picks:
        options = paths(payload)
        if not options:
            break
        payload = mutate(payload, options[where % len(options)], kind, which)
    return payload


def mutations(max_size: int = 3) -> st.SearchStrategy[list[Pick]]:
    """One to ``max_size`` picks: which path (modulo their number), what to do, which variant."""
    pick = st.tuples(st.integers(0, 10_000), st.sampled_from(KINDS), st.integers(0, 2))
    return st.lists(pick, min_size=1, max_size=max_size)


class Escapes(logging.Handler):
    """Every ERROR-or-worse log record (an SDK's "exception in handler", asyncio's "Task
    exception was never retrieved", an adapter's catch-all): what a fuzzed payload must never
    cause. A payload an adapter cannot read is a WARNING line and a skip."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def take(self) -> list[str]:
        """The records so far, formatted with their traceback's last line; then forget them."""
        found = []
        for record in self.records:
            error = record.exc_info[1] if record.exc_info else None
            found.append(f"{record.name}: {record.getMessage()} {error!r}")
        self.records.clear()
        return found


@contextlib.contextmanager
def escapes() -> Iterator[Escapes]:
    handler = Escapes()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)


class Held(Generic[T]):
    """A fixture's value with a one-word repr: hypothesis prints each failing example's
    arguments, and a rig's repr (every message it saw) would bury the payload that failed."""

    def __init__(self, value: T) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"<{type(self.value).__name__}>"
