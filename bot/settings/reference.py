"""The settings reference page (``docs/reference/settings.md``), written from the settings models.

One source of truth: each field's docstring is its description (``description`` reads it from the
section's source, as pydantic's ``use_attribute_docstrings`` would, but only here and not at
every start), or its ``Field(description=...)``; its alias its variable, its default the model's. ``make docs`` writes the page before
building the site, and ``tests/test_docs_settings.py`` fails when a setting has no description or
the committed page differs from what this module writes, so the page cannot drift from the code.

``python -m bot.settings.reference [PATH]`` writes the page (stdout without a path).
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
import textwrap
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from bot.settings import Settings
from bot.settings.base import Section

PAGE = Path("docs/reference/settings.md")

# Each section's heading and the page (relative to docs/reference/) that explains it.
SECTIONS: dict[str, tuple[str, str]] = {
    "llm": ("The model and its vendors", "../configuration.md"),
    "fallback": ("Fallback models", "../operations.md#fallback-models"),
    "agent": ("Answering one message", "../agent.md"),
    "state": ("State, the bus and the gateway's spool", "../scaling.md"),
    "memory": ("Memory, summaries, recall, knowledge, insights", "../memory.md"),
    "engagement": ("Live chat: when to speak", "../live-chat.md"),
    "thanks": ("Thanks for stream events", "../live-chat.md#thanks-for-stream-events"),
    "tools": ("Tools", "../agent.md"),
    "plugins": ("Plugins", "../plugins.md"),
    "health": ("Health and metrics server", "../operations.md"),
    "admin": ("Admin dashboard", "../dashboard.md"),
    "metrics": ("Metrics", "../operations.md"),
    "logging": ("Logs", "../operations.md"),
    "discord": ("Discord", "../platforms/discord.md"),
    "slack": ("Slack", "../platforms/slack.md"),
    "twitch": ("Twitch", "../platforms/twitch.md"),
    "youtube": ("YouTube live chat", "../platforms/youtube.md"),
    "safety": ("Safety: moderation and user lists", "../safety.md"),
    "quota": ("Quotas and the daily cost cap", "../safety.md#quotas-and-the-cost-cap"),
    "file": ("The configuration file", "../customizing.md"),
}

HEADER = """\
# Settings reference

<!-- Written by `python -m bot.settings.reference docs/reference/settings.md` from the settings
models in bot/settings/ (`make docs` does it). Edit a field's docstring there, not this page:
tests/test_docs_settings.py fails while this page differs from the models. -->

Every setting Chorus reads, by section. Each one works from the process environment, from `.env`
in the working directory, or from `chorus.toml` by its section and field name (the second column);
the environment wins over `.env`, both win over the file, and an empty value counts as unset
([Configuration](../configuration.md) says more). `chorus config` prints what is set and where it
came from, secrets masked.
"""


@functools.cache
def _docstrings(section: type[Section]) -> dict[str, str]:
    """Each field's docstring: the string right after its annotated assignment in the class
    body (base classes first, so a subclass's own wins)."""
    found: dict[str, str] = {}
    for klass in reversed(section.__mro__):
        if not (isinstance(klass, type) and issubclass(klass, Section)) or klass is Section:
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in zip(body, body[1:], strict=False):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                found[node.target.id] = inspect.cleandoc(after.value.value)
    return found


def description(section: type[Section], field: str) -> str:
    """What the reference says of ``field``: its ``Field(description=...)``, else its
    docstring (empty: neither)."""
    given = section.model_fields[field].description
    return (given or _docstrings(section).get(field, "")).strip()


def settings_sections() -> dict[str, type[Section]]:
    """The root's sections, in the order the root declares them."""
    sections: dict[str, type[Section]] = {}
    for name, info in Settings.model_fields.items():
        assert isinstance(info.annotation, type) and issubclass(info.annotation, Section)
        sections[name] = info.annotation
    return sections


def variable_fields(section: type[Section]) -> list[str]:
    """The fields of ``section`` that an environment variable sets."""
    return [name for name in section.model_fields if section.variable_for(name) != name]


def file_only_fields(section: type[Section]) -> list[str]:
    """Fields only ``chorus.toml`` sets (its own tables): described, with no variable."""
    return [
        name
        for name, info in section.model_fields.items()
        if section.variable_for(name) == name and description(section, name)
    ]


def undescribed() -> list[str]:
    """``section.field`` of every variable-backed setting without a description."""
    return [
        f"{name}.{field}"
        for name, section in settings_sections().items()
        for field in variable_fields(section)
        if not description(section, field)
    ]


def shown_default(info: FieldInfo) -> str:
    """The default as a reader would write it in ``.env``."""
    if info.default_factory is not None:
        value: Any = info.default_factory()  # type: ignore[call-arg]
    elif info.default is PydanticUndefined:
        return "required"
    else:
        value = info.default
    if value is None:
        return "(unset)"
    text = _text(value)
    return f"`{text}`" if text else "(empty)"


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, SecretStr):
        return "(secret)"
    if isinstance(value, frozenset | set | tuple | list):
        items = sorted(_text(item) for item in value)
        return ",".join(items) if items else ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render() -> str:
    """The whole page."""
    out = [HEADER]
    for name, section in settings_sections().items():
        title, page = SECTIONS.get(name, (name, ""))
        out.append(f"## `[{name}]` {title}\n")
        if page:
            out.append(f"Explained in [{title}]({page}).\n")
        out.append("| variable | `chorus.toml` | default | meaning |")
        out.append("|---|---|---|---|")
        for field in variable_fields(section):
            info = section.model_fields[field]
            names = " / ".join(f"`{n}`" for n in section.variable_for(field).split(" / "))
            out.append(
                f"| {names} | `{field}` | {shown_default(info)} | {_cell(description(section, field))} |"
            )
        tables = file_only_fields(section)
        if tables:
            out.append("\nOnly in the file:\n")
            out.append("| table | meaning |")
            out.append("|---|---|")
            out.extend(f"| `{field}` | {_cell(description(section, field))} |" for field in tables)
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if not argv:
        sys.stdout.write(text)
        return 0
    Path(argv[0]).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
