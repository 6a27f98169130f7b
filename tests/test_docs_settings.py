"""The settings reference is the settings models: every setting has a description, and the
committed page (docs/reference/settings.md) is exactly what ``bot.settings.reference`` writes
from them, every variable with its default."""

from __future__ import annotations

import re
from pathlib import Path

from bot.settings import known_variables
from bot.settings.reference import PAGE, description, render, settings_sections, undescribed

ROOT = Path(__file__).resolve().parent.parent


def test_every_setting_has_a_description() -> None:
    assert undescribed() == [], "give each of these a docstring under its field in bot/settings/"


def test_the_committed_reference_is_what_the_models_say() -> None:
    committed = (ROOT / PAGE).read_text(encoding="utf-8")
    assert committed == render(), (
        "docs/reference/settings.md is stale: run "
        "`.venv/bin/python -m bot.settings.reference docs/reference/settings.md` (make docs)"
    )


def test_the_reference_lists_every_variable_with_its_default_and_description() -> None:
    rows: dict[str, list[str]] = {}
    for line in render().splitlines():
        if line.startswith("| `"):
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", cells[0]):
                rows[name] = cells
    assert set(rows) == known_variables()
    assert rows["CHORUS_HISTORY_MAX"][1:3] == ["`history_max_messages`", "`40`"]
    assert rows["CHORUS_STREAM_REPLIES"][2] == "`console,discord,slack`"
    assert rows["DISCORD_TOKEN"][2] == "(unset)" and rows["CHORUS_FEEDS"][2] == "(empty)"
    assert all(len(cells) == 4 and len(cells[3]) > 10 for cells in rows.values())
    for name, section in settings_sections().items():
        assert f"## `[{name}]`" in render(), name
        for field in section.model_fields:
            if section.variable_for(field) != field:
                said = " ".join(description(section, field).split())
                assert said and said.replace("|", "\\|") in render(), field
