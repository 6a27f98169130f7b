"""The instruction-count gate's verdict (bench/instructions.py): the counting itself runs under
valgrind in ``make test`` after pytest; here, what it makes of the figures."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bench import instructions
from bench.instructions import BASELINE, PATHS, STARTUP_VENDOR, TOLERANCE, judge

BASE: dict[str, object] = {
    "per_message": {"in-process": 7_000_000, "redis-streams": 20_000_000},
    "startup": {"openai": 1_000_000_000},
}


def test_figures_within_the_tolerance_pass() -> None:
    assert judge({"in-process": 7_690_000, "redis-streams": 19_000_000}, BASE) == []


def test_growth_past_ten_percent_fails_naming_the_figure() -> None:
    failures = judge({"in-process": 7_710_000, "redis-streams": 20_000_000}, BASE)
    assert len(failures) == 1
    assert "(in-process)" in failures[0] and "7,710,000" in failures[0]
    assert "7,000,000" in failures[0] and "+10%" in failures[0]


def test_a_path_without_a_baseline_fails() -> None:
    failures = judge({"in-process": 1, "new-path": 5}, BASE)
    assert failures == [
        "new-path: no per_message baseline in instructions.json; record one on purpose"
    ]


def test_start_up_growth_past_ten_percent_fails_naming_the_start_up_figure() -> None:
    """A deliberate 20% slower start-up (above the SDK's import) fails; 9% passes."""
    assert judge({"openai": 1_090_000_000}, BASE, "startup") == []
    failures = judge({"openai": 1_200_000_000}, BASE, "startup")
    assert failures == [
        "start-up instructions above the SDK's import (openai) grew 20.0%: "
        "1,200,000,000 against the baseline 1,000,000,000 (limit +10%)"
    ]
    assert judge({"openai": 1}, {"per_message": {}}, "startup") == [
        "openai: no startup baseline in instructions.json; record one on purpose"
    ]


def test_the_committed_baseline_covers_every_path_and_says_why() -> None:
    data = json.loads(BASELINE.read_text())
    assert set(data["per_message"]) == set(PATHS)
    assert set(data["startup"]) == {STARTUP_VENDOR}
    figures = [*data["per_message"].values(), *data["startup"].values()]
    assert all(isinstance(v, int) and v > 0 for v in figures)
    assert data["reason"].strip() and data["interpreter"].startswith("CPython")
    assert TOLERANCE == 0.10


def test_every_module_is_compiled_before_a_run_and_a_broken_one_stops_the_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run must never compile a module the next run finds compiled (a fresh clone, with
    pytest's workers writing the caches beside the gate, halved the figure per message)."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "mod.py").write_text("VALUE = 1\n")
    monkeypatch.setattr(instructions, "ROOT", tmp_path)
    monkeypatch.setattr(instructions, "SOURCES", ("pkg",))
    instructions.compiled()
    assert [p.name for p in (package / "__pycache__").iterdir()] == [
        f"mod.{sys.implementation.cache_tag}.pyc"
    ]
    (package / "broken.py").write_text("def f(:\n")
    with pytest.raises(instructions.GateError, match="does not compile"):
        instructions.compiled()


def test_the_gate_compiles_what_its_runs_import() -> None:
    assert set(instructions.SOURCES) >= {"bot", "adapters", "bench", "tests"}
    assert all((instructions.ROOT / name).is_dir() for name in instructions.SOURCES)


def test_a_figure_over_the_limit_is_measured_again_and_the_lower_is_judged() -> None:
    """A run slowed by a busy machine (over the limit once, within it the second time)
    passes; a regression (over both times) fails on the lower figure; a figure within the
    limit, or without a baseline, is not measured again."""
    asked: list[tuple[str, str]] = []
    again = {"in-process": 7_100_000, "redis-streams": 23_000_000}

    def measure_again(section: str, name: str) -> int:
        asked.append((section, name))
        return again[name]

    measured = {
        "per_message": {"in-process": 9_000_000, "redis-streams": 24_000_000, "new": 1},
        "startup": {"openai": 1_050_000_000},
    }
    said = instructions.settle_over_limit(measured, BASE, measure_again)
    assert asked == [("per_message", "in-process"), ("per_message", "redis-streams")]
    assert said == [
        "instructions per answered message (in-process): 9,000,000 is over the limit; "
        "measured again: 7,100,000",
        "instructions per answered message (redis-streams): 24,000,000 is over the limit; "
        "measured again: 23,000,000",
    ]
    assert measured["per_message"] == {
        "in-process": 7_100_000,
        "redis-streams": 23_000_000,
        "new": 1,
    }
    failures = judge(measured["per_message"], BASE)
    assert [f.split(":")[0] for f in failures] == [
        "instructions per answered message (redis-streams) grew 15.0%",
        "new",
    ]
