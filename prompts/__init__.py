"""Every text a user or a model reads, shipped as package data and loaded by name.

Keeping the texts out of code lets operators read, diff and (later) override them without
touching Python, and keeps the cached system prefix byte-stable: a prompt is a fixed file.

The scheme, one rule for every text:

- One text, one file: ``prompts/<name>.md``. A name is a lowercase path without the suffix,
  grouped by who sends the text: ``system``, ``live/batch``, ``router/too_long``,
  ``commands/help``... The file's final line break is not part of the text.
- ``{{key}}`` marks a value the code fills in (``render``). A line that holds nothing but one
  placeholder disappears when its value is empty, so optional parts of a block need no glue in
  code. Values are inserted in one pass: text a user wrote that looks like ``{{key}}`` stays as
  it is.
- What goes in a file: every sentence and instruction, and the frame of a block that carries
  one (the tags with their hints). What stays in code: the layout of repeated data lines (a
  bullet, a label, the escaping that keeps user text inside its block), log and exception
  messages for operators, and a tool's own docstring and errors (they are its schema).
- The cached system prefix is rendered only with deployment-wide values (``system`` with the
  bot's name). Per-turn values (time, user, lengths) go into texts that sit after the last
  cache point: the context block, live-chat turns, replies.

Every name resolves through ``resolve``; the golden tests in ``tests/golden`` show each rendered
text, and a test checks that every file here is used by code and every name the code asks for
exists.

Operators replace any text with a file of their own (``[prompts]`` in ``chorus.toml``): the
composition root reads the files and hands the texts to ``set_overrides``, after ``check_override``
accepted each one (a known name, no placeholder the code does not fill). ``load`` returns an
override before the shipped file, so every ``render`` uses it; replacing the whole set at once
keeps a reload atomic (the event loop runs no turn between the two calls).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable

SUFFIX = ".md"
_NAME = re.compile(r"[a-z][a-z0-9_]*(/[a-z][a-z0-9_]*)*")
_PLACEHOLDER = re.compile(r"\{\{([a-z_][a-z0-9_]*)\}\}")


def resolve(name: str) -> Traversable:
    """The file that holds prompt ``name`` (raises ValueError for a malformed name)."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"not a prompt name: {name!r} (lowercase words separated by '/')")
    *folders, last = name.split("/")
    path = resources.files(__package__)
    for folder in folders:
        path = path.joinpath(folder)
    return path.joinpath(last + SUFFIX)


_overrides: dict[str, str] = {}


def load(name: str) -> str:
    """The text of prompt ``name`` (the operator's override, else the shipped file); raises
    FileNotFoundError naming the prompt."""
    text = _overrides.get(name)
    return text if text is not None else shipped(name)


@cache
def shipped(name: str) -> str:
    """The text of prompt ``name`` as shipped, whatever overrides are set."""
    path = resolve(name)
    if not path.is_file():
        raise FileNotFoundError(f"no prompt named {name!r} (looked for prompts/{name}{SUFFIX})")
    text = path.read_text(encoding="utf-8")
    return text.removesuffix("\n").removesuffix("\r")


def render(name: str, /, **values: str | int) -> str:
    """Prompt ``name`` with its ``{{key}}`` placeholders filled in one pass.

    Raises KeyError naming a placeholder that got no value. Only deployment-wide values may go
    into a text of the cached prefix (``system``); see the module docstring.
    """
    text = load(name)
    if "{{" not in text:
        return text
    lines = [
        line
        for line in text.split("\n")
        if not ((m := _PLACEHOLDER.fullmatch(line.strip())) and values.get(m[1]) == "")
    ]

    def fill(match: re.Match[str]) -> str:
        key = match[1]
        if key not in values:
            raise KeyError(f"prompt {name!r} needs a value for {{{{{key}}}}}")
        return str(values[key])

    return _PLACEHOLDER.sub(fill, "\n".join(lines))


def placeholders(name: str) -> frozenset[str]:
    """The keys prompt ``name`` asks for."""
    return frozenset(_PLACEHOLDER.findall(load(name)))


def names() -> list[str]:
    """Every prompt shipped here, sorted."""
    found: list[str] = []

    def walk(folder: Traversable, prefix: str) -> None:
        for item in folder.iterdir():
            if item.is_dir():
                walk(item, f"{prefix}{item.name}/")
            elif item.name.endswith(SUFFIX):
                found.append(prefix + item.name.removesuffix(SUFFIX))

    walk(resources.files(__package__), "")
    return sorted(found)


def check_override(name: str, text: str) -> str | None:
    """Why ``text`` cannot replace prompt ``name`` (None when it can): an unknown name (with the
    closest one), or a placeholder the code never fills for that prompt."""
    known = names()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else " (see the files in prompts/)"
        return f"no prompt is named {name!r}{hint}"
    filled = set(_PLACEHOLDER.findall(shipped(name)))
    extra = set(_PLACEHOLDER.findall(text)) - filled
    if extra:
        return (
            f"uses {_braced(extra)}, which the code does not fill for {name!r} "
            f"(it fills: {_braced(filled) or 'nothing'})"
        )
    return None


def set_overrides(texts: Mapping[str, str]) -> dict[str, str]:
    """Replace every override at once (name -> text, final line break dropped); returns the
    previous set, so a caller can put it back."""
    global _overrides
    previous = _overrides
    _overrides = {name: text.removesuffix("\n").removesuffix("\r") for name, text in texts.items()}
    return previous


def _braced(keys: set[str]) -> str:
    return ", ".join("{{" + key + "}}" for key in sorted(keys))
