"""Prompt texts, shipped as package data and loaded by name.

Keeping prompts out of code lets operators read and diff them, and keeps the cached system
prefix byte-stable: a prompt is a fixed file, rendered only with deployment-wide values.
"""

from __future__ import annotations

from functools import cache
from importlib import resources


@cache
def load(name: str) -> str:
    """The text of ``prompts/<name>.md``; raises FileNotFoundError naming the prompt."""
    path = resources.files(__package__).joinpath(f"{name}.md")
    if not path.is_file():
        raise FileNotFoundError(f"no prompt named {name!r} (looked for prompts/{name}.md)")
    return path.read_text(encoding="utf-8")


def render(name: str, **values: str) -> str:
    """Fill ``{{key}}`` placeholders. Only deployment-wide values belong here, never per-turn
    ones (time, user, ids): they would break the prompt cache."""
    text = load(name)
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", value)
    if "{{" in text:
        missing = text[text.index("{{") : text.index("}}", text.index("{{")) + 2]
        raise KeyError(f"prompt {name!r} needs a value for {missing}")
    return text
