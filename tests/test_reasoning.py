"""Reasoning control: a table of messages and the level the cheap rule picks."""

from __future__ import annotations

import pytest

from bot.agent.reasoning import decide, score


@pytest.mark.parametrize(
    ("text", "level"),
    [
        ("hi!", "off"),
        ("thanks so much", "off"),
        ("lol", "off"),
        ("what time is it in Lisbon?", "off"),
        ('please call tool current_time with {"timezone": "Asia/Tokyo"}', "off"),
        ("Can you explain why the sky is blue?", "low"),
        ("Why does this crash?\n```py\nx = 1 / 0\n```", "medium"),
        ("Compare Postgres and MySQL for our design, step by step, with trade-offs.", "medium"),
        ("Traceback (most recent call last):\n  File 'a.py'\nZeroDivisionError", "medium"),
        ("x" * 2500, "low"),
    ],
)
def test_auto_levels(text: str, level: str) -> None:
    assert decide(text) == level


def test_small_talk_scores_zero_even_with_punctuation() -> None:
    assert score("Good morning!!!") == 0


def test_cap_and_forced_modes() -> None:
    hard = "Prove it step by step and explain why:\n```\ncode\n```"
    assert decide(hard) == "medium"
    assert decide(hard, max_level="low") == "low"
    assert decide("hi", mode="high") == "high"
    assert decide(hard, mode="off") == "off"
