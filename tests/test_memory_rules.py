"""The memory rules that need no store: how pins and recommendations are added, deduplicated,
evicted, cleaned and fitted into the byte budget, and the memory settings. ``MemoryStore`` itself
(both backends) is the contract in ``test_memory_store.py``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bot.memory.buffers import (
    PIN_TEXT_MAX,
    SOURCE_MAX,
    MemorySettings,
    Pin,
    UserBuffer,
    encode,
    fit,
    source_ref,
)
from bot.memory.edit import Outcome, add_pin, add_recommendation
from bot.settings import ConfigError, load_settings, parse_model_spec
from tests.memory_samples import full_buffer

T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def pin(text: str, *, confidence: float = 0.9, at: datetime = T0, source: str = "m1") -> Pin:
    return Pin(text=text, source=source, confidence=confidence, created_at=at, updated_at=at)


def buffer(user: str, *pins: Pin, platform: str = "discord", **extra: Any) -> UserBuffer:
    return UserBuffer(platform=platform, user_id=user, pins=pins, **extra)


def test_add_pin_evicts_at_the_cap_but_keeps_explicit_pins() -> None:
    state = buffer("ada", pin("Remembered on request", confidence=1.0))
    for n, word in enumerate(["chess", "rust", "lyon", "piano"]):
        state, outcome = add_pin(
            state,
            f"Likes {word}",
            source_message_id=f"m{n}",
            confidence=0.7,
            now=T0 + timedelta(seconds=n),
            max_pins=3,
        )
        assert outcome is Outcome.ADDED
    assert [p.text for p in state.pins] == ["Remembered on request", "Likes lyon", "Likes piano"]


@pytest.mark.parametrize(
    "restated",
    ["is vegan", "Is vegan!", "The user is a vegan", "  IS   VEGAN  ", "Is a vegan"],
)
def test_near_duplicates_collapse_into_one_pin(restated: str) -> None:
    state = buffer("ada", pin("Is vegan", confidence=0.7))
    state, outcome = add_pin(
        state,
        restated,
        source_message_id="m9",
        confidence=0.9,
        now=T0 + timedelta(hours=1),
        max_pins=20,
    )
    assert outcome is Outcome.UPDATED
    assert len(state.pins) == 1
    assert state.pins[0].text == " ".join(restated.split())  # the newer wording wins
    assert state.pins[0].created_at == T0
    assert state.pins[0].updated_at == T0 + timedelta(hours=1)
    assert state.pins[0].came_from("m9")


@pytest.mark.parametrize("other", ["Lives in Paris", "Is vegetarian", "Likes vegan food trucks"])
def test_different_facts_are_not_duplicates(other: str) -> None:
    state = buffer("ada", pin("Lives in Lyon"), pin("Is vegan"))
    state, outcome = add_pin(
        state, other, source_message_id="m2", confidence=0.9, now=T0, max_pins=20
    )
    assert outcome is Outcome.ADDED
    assert len(state.pins) == 3


def test_restating_an_identical_pin_with_less_confidence_changes_nothing() -> None:
    state = buffer("ada", pin("Is vegan", confidence=0.9))
    same, outcome = add_pin(
        state, "is vegan", source_message_id="m2", confidence=0.6, now=T0, max_pins=20
    )
    assert outcome is Outcome.UNCHANGED
    assert same == state


def test_recommendations_dedupe_per_tool() -> None:
    state = buffer("ada")
    for text, tool in [
        ("Use web search for prices", "web_search"),
        ("use web search for prices!", "web_search"),
        ("Use web search for prices", None),
    ]:
        state, _ = add_recommendation(state, text, tool=tool, now=T0, max_recs=10)
    assert [(r.text, r.tool) for r in state.recommendations] == [
        ("use web search for prices!", "web_search"),
        ("Use web search for prices", None),
    ]


def test_entries_are_cleaned_and_bounded() -> None:
    state, _ = add_pin(
        buffer("ada"),
        "Is\x00 vegan\u202e\n\n and  proud",
        source_message_id="m1",
        confidence=0.9,
        now=T0,
        max_pins=20,
    )
    assert state.pins[0].text == "Is vegan and proud"
    with pytest.raises(ValueError, match="at most"):
        add_pin(
            state,
            "x" * (PIN_TEXT_MAX + 1),
            source_message_id="m",
            confidence=1,
            now=T0,
            max_pins=20,
        )
    with pytest.raises(ValueError, match="needs some text"):
        add_pin(state, " \x07 ", source_message_id="m", confidence=1, now=T0, max_pins=20)


def test_long_message_ids_are_stored_as_a_stable_digest() -> None:
    youtube = "LCC." + "Cjg" * 40
    ref = source_ref(youtube)
    assert len(ref) == SOURCE_MAX and ref.startswith("~")
    assert ref == source_ref(youtube) != source_ref(youtube + "x")
    assert source_ref("1234567890123456789") == "1234567890123456789"  # a Discord snowflake
    assert pin("Is vegan", source=ref).came_from(youtube)


def test_fit_keeps_any_buffer_within_the_byte_budget() -> None:
    settings = MemorySettings()
    fitted = fit(full_buffer("ada", "😀"), settings)
    assert len(encode(fitted).encode()) <= settings.max_bytes
    assert len(encode(full_buffer("ada", "a")).encode()) <= settings.max_bytes


# -- settings ----------------------------------------------------------------------------------
def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = MemorySettings()
    assert (defaults.pins_max, defaults.recs_max, defaults.ttl_seconds) == (20, 10, 30 * 86400)
    assert (defaults.prompt_pins, defaults.prompt_recs, defaults.context_chars) == (2, 1, 800)
    assert (defaults.pin_threshold, defaults.rec_threshold) == (0.1, 0.05)
    assert defaults.insights_enabled and defaults.insights_in_process
    assert defaults.max_bytes <= 3550
    for name, value in {
        "CHORUS_PINS_MAX": "5",
        "CHORUS_MEMORY_TTL": "3600",
        "CHORUS_CONTEXT_CHARS": "400",
        "CHORUS_INSIGHTS_ENABLED": "false",
        "CHORUS_INSIGHTS_IN_PROCESS": "0",
        "CHORUS_INSIGHTS_DEBOUNCE": "5",
        "CHORUS_INSIGHTS_MAX_DELAY": "30",
    }.items():
        monkeypatch.setenv(name, value)
    loaded = load_settings().memory
    assert (loaded.pins_max, loaded.ttl_seconds, loaded.context_chars) == (5, 3600, 400)
    assert not loaded.insights_enabled and not loaded.insights_in_process
    assert (loaded.insights_debounce, loaded.insights_max_delay) == (5, 30)


def test_bad_settings_name_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHORUS_INSIGHTS_DEBOUNCE", "60")
    monkeypatch.setenv("CHORUS_INSIGHTS_MAX_DELAY", "10")
    with pytest.raises(ConfigError, match="CHORUS_INSIGHTS_MAX_DELAY must be at least"):
        load_settings()
    monkeypatch.setenv("CHORUS_INSIGHTS_MAX_DELAY", "100")
    monkeypatch.setenv("CHORUS_PINS_MAX", "zero")
    with pytest.raises(ConfigError, match="CHORUS_PINS_MAX"):
        load_settings()


@pytest.mark.parametrize(
    ("chat", "base_url", "override", "expected"),
    [
        ("anthropic:claude-sonnet-4-5", None, None, "anthropic:claude-haiku-4-5"),
        ("openai:gpt-4.1-mini", None, None, "openai:gpt-4.1-nano"),
        ("gemini:gemini-2.5-flash", None, None, "gemini:gemini-2.5-flash-lite"),
        ("openai:llama3.2", "http://localhost:11434/v1", None, "openai:llama3.2"),
        ("anthropic:claude-sonnet-4-5", None, "openai:gpt-4.1-mini", "openai:gpt-4.1-mini"),
    ],
)
def test_the_insights_model(
    chat: str, base_url: str | None, override: str | None, expected: str
) -> None:
    settings = MemorySettings(insights_model_name=override)
    spec = settings.insights_model(parse_model_spec(chat), base_url=base_url)
    assert str(spec) == expected


def test_a_bad_insights_model_names_its_variable() -> None:
    settings = MemorySettings(insights_model_name="haiku")
    with pytest.raises(ConfigError, match="CHORUS_INSIGHTS_MODEL"):
        settings.insights_model(parse_model_spec("anthropic:claude-sonnet-4-5"))
