"""Golden tests of prompt overrides: ``[prompts]`` in chorus.toml replaces a shipped text, and the
functions production uses render the operator's text (``tests/golden/overrides/<case>.txt``;
``CHORUS_UPDATE_GOLDEN=1`` rewrites them, as for ``tests/test_prompts_golden.py``).

The configuration is ``tests/fixtures/config/overrides/chorus.toml``, loaded like ``chorus run``
loads it: its system override keeps ``{{identity}}``, so the persona still goes in front of the
operator's house rules; removing the overrides restores every shipped text."""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import prompts
from bot.engagement.policy import Batch, BatchChatter, Reason
from bot.engagement.turns import batch_turn
from bot.router.scoping import personas, prompt_overrides
from bot.router.texts import too_long
from bot.settings import load_settings
from tests.test_prompts_golden import LIVE, pending

GOLDEN = Path(__file__).parent / "golden" / "overrides"
CONFIG = Path(__file__).parent / "fixtures" / "config" / "overrides" / "chorus.toml"
UPDATE = os.environ.get("CHORUS_UPDATE_GOLDEN") == "1"


def _batch() -> str:
    chatters = (
        BatchChatter("bo", "Bo", (pending("what map is next?", "bo", 1.0, question=True),)),
        BatchChatter("cy", "Cy", (pending("gg", "cy", 2.0),)),
    )
    turn = batch_turn(LIVE, Batch(Reason.CHATTER, chatters))
    return f"{turn.message.text}\n---\n{turn.context}"  # the lines, then the instructions


CASES: dict[str, Callable[[], str]] = {
    "system": lambda: personas(load_settings(config=CONFIG, warn=False))["default"],
    "live_batch": _batch,
    "router_too_long": lambda: too_long(9001, 8000),
}


@pytest.fixture
def overridden() -> Iterator[None]:
    settings = load_settings(config=CONFIG, warn=False)
    previous = prompts.set_overrides(prompt_overrides(settings))
    yield
    prompts.set_overrides(previous)


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_override_is_what_production_renders(name: str, overridden: None) -> None:
    rendered = CASES[name]() + "\n"
    path = GOLDEN / f"{name}.txt"
    if UPDATE:
        path.write_text(rendered, encoding="utf-8")
        return
    expected = path.read_text(encoding="utf-8")
    if rendered != expected:
        diff = difflib.unified_diff(
            expected.splitlines(keepends=True), rendered.splitlines(keepends=True)
        )
        pytest.fail(f"{name} differs from golden/overrides/{name}.txt:\n" + "".join(diff))


def test_every_override_golden_file_belongs_to_a_case() -> None:
    assert sorted(p.stem for p in GOLDEN.glob("*.txt")) == sorted(CASES)


def test_without_overrides_the_shipped_texts_are_back() -> None:
    assert "House rules" not in CASES["system"]() and "Crew on deck" not in CASES["live_batch"]()
    assert CASES["router_too_long"]() == prompts.render(
        "router/too_long", length="9,001", limit="8,000"
    )
