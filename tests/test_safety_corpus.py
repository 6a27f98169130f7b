"""The moderation corpora: ordinary chat (the shipped busy traces and a list of look-alike lines)
is flagged at most 1% by the default lists, and every line of the abuse and injection corpus is
caught by the rule its line documents (``tests/fixtures/safety/abusive.jsonl``). The same
figures are printed by ``python -m bench.safety`` and recorded in BENCHMARKS.md."""

from __future__ import annotations

import pytest

from bench.safety import abusive, caught, flag_rate, ordinary_lines


def test_the_ordinary_corpus_is_large_and_includes_the_busy_traces() -> None:
    lines = ordinary_lines()
    assert len(lines) > 12_000
    assert "@chorusbot what do you think of this run?" in lines


def test_the_default_lists_flag_at_most_one_percent_of_ordinary_chat() -> None:
    rate = flag_rate(ordinary_lines(), "standard")
    assert rate.share <= 0.01, (rate.flagged, rate.examples)


def test_the_streamer_preset_flags_at_most_one_percent_of_ordinary_chat() -> None:
    rate = flag_rate(ordinary_lines(), "streamer")
    assert rate.share <= 0.01, (rate.flagged, rate.examples)


def test_the_look_alike_lines_pass_the_default_lists() -> None:
    lines = ordinary_lines()[-60:]
    rate = flag_rate(lines, "standard")
    assert rate.flagged == 0, rate.examples


@pytest.mark.parametrize("rule", ["slur", "harassment", "injection", "link", "personal_data"])
def test_every_abusive_line_is_caught_by_its_documented_rule(rule: str) -> None:
    found = caught(abusive())
    ok, total, missed = found[rule]
    assert total >= 5 and missed == [], missed


def test_the_corpus_documents_only_known_rules_and_presets() -> None:
    attempts = abusive()
    assert {a.preset for a in attempts} == {"standard", "streamer"}
    assert {a.caught for a in attempts} == {
        "slur",
        "harassment",
        "injection",
        "link",
        "personal_data",
    }
