"""Where setting values come from, and what is said about the ones that are wrong or unknown.

One flat mapping of variable -> value is built once: the ``.env`` file's values overlaid by the
process environment (the environment wins, as in a shell). Each value remembers where it came
from, so an error can say ``CHORUS_HISTORY_MAX='abc' in .env`` rather than leave the operator
to guess which of two places holds the typo. An empty value counts as unset (in either
place), so the blank lines ``.env.example`` ships (``OPENAI_API_KEY=``) mean "default".

A ``CHORUS_*`` name that no section reads is most likely a typo that would otherwise be ignored
in silence: it gets a warning naming the closest known variable.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from dotenv import dotenv_values

ENVIRONMENT = "the environment"
GIVEN = "the given values"  # settings_from: passed in by a test or a benchmark
PREFIX = "CHORUS_"

# Switches read outside the settings root (the test suite's and the benchmarks'): known names,
# so they are never reported as typos.
INTERNAL_VARIABLES = frozenset(
    {
        "CHORUS_BLOCK_REAL_LLM",
        "CHORUS_TEST_REDIS_URL",
        "CHORUS_TEST_STRICT",
        "CHORUS_BENCH_REDIS_URL",
    }
)


@dataclass(frozen=True)
class Value:
    text: str
    source: str  # ENVIRONMENT, or the path of the .env file


def read_env_file(path: str | Path | None) -> dict[str, Value]:
    """The variables of a ``.env`` file; none when there is no such file."""
    if path is None or not Path(path).is_file():
        return {}
    found = dotenv_values(path, encoding="utf-8")
    return {name: Value(text, str(path)) for name, text in found.items() if text and text.strip()}


def read_environ(environ: Mapping[str, str] | None = None) -> dict[str, Value]:
    env = os.environ if environ is None else environ
    return {name: Value(text, ENVIRONMENT) for name, text in env.items() if text.strip()}


def unknown_variables(sources: Iterable[Mapping[str, Value]], known: Iterable[str]) -> list[str]:
    """One line per ``CHORUS_*`` name nobody reads: where it is and the closest known name."""
    everything = sorted(set(known) | INTERNAL_VARIABLES)
    places: dict[str, list[str]] = {}
    for source in sources:
        for name, value in source.items():
            if name.startswith(PREFIX) and name not in everything:
                places.setdefault(name, []).append(_where(value))
    # Compared without the shared prefix, which would make every CHORUS_ name look alike.
    bare = {known_name.removeprefix(PREFIX): known_name for known_name in everything}
    lines = []
    for name, where in sorted(places.items()):
        close = difflib.get_close_matches(name.removeprefix(PREFIX), list(bare), n=1, cutoff=0.6)
        hint = f"; did you mean {bare[close[0]]}?" if close else "; no setting has a similar name"
        lines.append(f"unknown setting {name} {' and '.join(where)} is ignored{hint}")
    return lines


def shown(value: Value, *, secret: bool) -> str:
    """``NAME=value in .env`` without ever printing a secret."""
    return f"={'****' if secret else repr(value.text)} {_where(value)}"


def _where(value: Value) -> str:
    return "in the environment" if value.source == ENVIRONMENT else f"in {value.source}"
