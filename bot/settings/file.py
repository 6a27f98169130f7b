"""``chorus.toml``: read with ``tomllib``, every key checked, every problem with its line.

Why a loader of our own around ``tomllib``: the standard parser gives values, not positions,
and an operator who mistyped ``[scope] persona`` in a 200-line file needs ``chorus.toml:87``.
``Locator`` finds the line of each key in the text (tables, arrays of tables, dotted and quoted
keys; a value spanning lines is skipped over). Every key is checked against the model that
will receive it, so an unknown one is an error naming the closest valid key (difflib), never a
setting silently ignored.

What the file holds: a table per section of the settings root, by field name (``[agent]
bot_name = "Ada"``); ``plugins = [...]`` (the plugins section's ``modules``); and what only the
file says: ``[persona]``, ``[personas.NAME]``, ``[[scope]]``, ``[prompts]`` and each plugin's own
settings, ``[plugins.NAME]`` (a table inside ``[plugins]`` whose name is not one of the section's
fields; the plugin's model checks its keys when it loads, ``bot/plugins/config.py``). Paths in it
(``prompt_file``, prompt overrides) are relative to the file's folder; the files are read here,
so a missing one is named with its full path before anything starts.

Precedence is the caller's (``bot.settings.load_settings``): the environment, then ``.env``,
then this file, then the defaults.
"""

from __future__ import annotations

import difflib
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from bot.settings.base import ConfigError, Section
from bot.settings.scopes import Persona, Scope

CONFIG_NAME = "chorus.toml"
CONFIG_VARIABLE = "CHORUS_CONFIG"
FILE_SECTION = "file"  # the root's section for what follows; not a table of the file
FILE_KEYS = {"persona": "persona", "personas": "personas", "scope": "scopes", "prompts": "prompts"}
PLUGINS = ("plugins", "modules")  # the top-level list -> that section's field

Path_ = tuple[str | int, ...]
M = TypeVar("M", bound=BaseModel)


@dataclass
class FileValues:
    """The file, sorted for the settings root: section values by field name, and the fields
    of the ``file`` section (personas, scopes, prompt texts, the line of every key)."""

    path: Path
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)
    file: dict[str, Any] = field(default_factory=dict)

    def where(self, key: str) -> str:
        """``path:line`` of a dotted key, for error messages."""
        lines: dict[str, int] = self.file.get("lines", {})
        parts = key.split(".")
        while parts and ".".join(parts) not in lines:
            parts.pop()
        return f"{self.path}:{lines['.'.join(parts)]}" if parts else str(self.path)


def find_config(explicit: str | None, cwd: Path | None = None) -> Path | None:
    """``CHORUS_CONFIG`` (which must exist) or ``chorus.toml`` in the working directory."""
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigError(f"{CONFIG_VARIABLE}={explicit}: no such file ({path.absolute()})")
        return path
    candidate = (cwd or Path.cwd()) / CONFIG_NAME
    return candidate if candidate.is_file() else None


def read_config(path: Path, sections: Mapping[str, type[Section]]) -> FileValues:
    """Parse and check ``path``; ``ConfigError`` lists every problem, each with its line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        at = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        where = f"{path}:{at[1]}" if at else str(path)
        raise ConfigError(f"{where}: not valid TOML: {str(exc).split(' (at line')[0]}") from None
    locator = Locator(text)
    values = FileValues(path, file={"found": path, "lines": locator.dotted()})
    problems = _check_keys(data, sections)
    if not problems:
        problems = _sort(data, values, sections)
    if problems:
        raise ConfigError(
            "invalid configuration file:\n  "
            + "\n  ".join(f"{_at(path, locator, where)}: {message}" for where, message in problems)
        )
    return values


def _at(path: Path, locator: Locator, where: Path_) -> str:
    line = locator.line(where)
    key = ".".join(str(part) for part in where if not isinstance(part, int))
    scope = ""
    if len(where) >= 2 and where[0] == "scope" and isinstance(where[1], int):
        scope = f"[[scope]] #{where[1] + 1}: "
        key = ".".join(str(part) for part in where[2:])
    return f"{path}:{line}: {scope}{key}" if line else f"{path}: {scope}{key}"


# -- checking every key ----------------------------------------------------------------------
def _closest(key: str, known: list[str]) -> str:
    bare = key.lower().removeprefix("chorus_")
    close = difflib.get_close_matches(bare, known, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else f"; valid keys: {', '.join(known)}"


def _check_keys(data: Mapping[str, Any], sections: Mapping[str, type[Section]]) -> list[Any]:
    tables = sorted((set(sections) - {FILE_SECTION}) | set(FILE_KEYS))
    problems: list[tuple[Path_, str]] = []
    for key, value in data.items():
        if key == PLUGINS[0] and key in sections and isinstance(value, list):
            continue
        if key == PLUGINS[0] and isinstance(value, dict):
            value = {k: v for k, v in value.items() if not _plugin_table(sections[key], k, v)}
        if key not in tables:
            problems.append(((key,), f"unknown key{_closest(key, tables)}"))
        elif key == "scope":
            if not isinstance(value, list):
                problems.append(((key,), "write each scope as its own [[scope]] table"))
                continue
            for index, scope in enumerate(value):
                problems += _check_table(Scope, scope, ("scope", index))
        elif key == "personas":
            if not isinstance(value, dict):
                problems.append(((key,), "write each persona as a [personas.NAME] table"))
                continue
            for name, persona in value.items():
                problems += _check_persona(persona, ("personas", name))
        elif key == "persona":
            problems += _check_persona(value, ("persona",))
        elif key == "prompts":
            if not isinstance(value, dict):
                problems.append(((key,), 'a table of "name" = "file.md"'))
                continue
            for name, target in value.items():
                if not isinstance(target, str):
                    problems.append((("prompts", name), "must be the path of a file (a string)"))
        else:
            problems += _check_table(sections[key], value, (key,))
    return problems


def _check_persona(value: Any, where: Path_) -> list[Any]:
    problems = _check_table(Persona, value, where)
    if isinstance(value, dict) and "prompt" in value and "prompt_file" in value:
        problems.append(((*where, "prompt_file"), "give prompt or prompt_file, not both"))
    return problems


def _check_table(model: type[BaseModel], value: Any, where: Path_) -> list[Any]:
    if not isinstance(value, dict):
        return [(where, "must be a table")]
    known = list(model.model_fields)
    problems: list[tuple[Path_, str]] = []
    for key, item in value.items():
        if key not in model.model_fields:
            problems.append(((*where, key), f"unknown key{_closest(key, known)}"))
            continue
        nested = _nested_model(model.model_fields[key].annotation)
        if nested is not None:
            problems += _check_table(nested, item, (*where, key))
    return problems


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    candidates = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else ()
    for candidate in (annotation, *candidates):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _plugin_table(section: type[Section], key: str, value: Any) -> bool:
    """``[plugins.NAME]``: a table of ``[plugins]`` that is none of the section's own fields."""
    return isinstance(value, dict) and key not in section.model_fields


# -- sorting the values out ---------------------------------------------------------------------
def _sort(
    data: Mapping[str, Any], values: FileValues, sections: Mapping[str, type[Section]]
) -> list[Any]:
    problems: list[tuple[Path_, str]] = []
    base = values.path.parent
    tables: dict[str, dict[str, Any]] = {}
    for key, value in data.items():
        if key == PLUGINS[0] and isinstance(value, list):
            values.sections.setdefault(PLUGINS[0], {})[PLUGINS[1]] = value
        elif key == PLUGINS[0] and isinstance(value, dict):
            section = sections[key]
            tables = {k: v for k, v in value.items() if _plugin_table(section, k, v)}
            own = {k: v for k, v in value.items() if k not in tables}
            values.sections.setdefault(key, {}).update(_joined(section, own))
        elif key in sections and key not in FILE_KEYS:
            values.sections.setdefault(key, {}).update(_joined(sections[key], value))
    personas: dict[str, Persona] = {}
    for name, table in [("", data.get("persona", {})), *data.get("personas", {}).items()]:
        where: Path_ = ("personas", name) if name else ("persona",)
        persona = _validated(Persona, table, where, problems)
        if persona is not None:
            personas[name] = _with_prompt_file(persona, base, where, problems)
    scopes = [_validated(Scope, table, ("scope", i), problems) for i, table in _scopes(data)]
    texts: dict[str, str] = {}
    for name, target in data.get("prompts", {}).items():
        text = _read(base / target, ("prompts", name), problems)
        if text is not None:
            texts[name] = text
    values.file.update(
        given=frozenset(
            f"{name}.{key}" for name, table in values.sections.items() for key in table
        ),
        persona=personas.pop("", Persona()),
        personas=personas,
        scopes=tuple(s for s in scopes if s is not None),
        prompts={name: base / target for name, target in data.get("prompts", {}).items()},
        prompt_texts=texts,
        plugins=tables,
    )
    return problems


def _scopes(data: Mapping[str, Any]) -> list[tuple[int, Any]]:
    return list(enumerate(data.get("scope", [])))


def _joined(section: type[Section], table: Mapping[str, Any]) -> dict[str, Any]:
    """A list given for a comma-separated text setting (``fallback.models``) becomes the text."""
    out = dict(table)
    for key, value in table.items():
        if isinstance(value, list) and section.model_fields[key].annotation in (str, str | None):
            out[key] = ",".join(str(item) for item in value)
    return out


def _validated(model: type[M], table: Any, where: Path_, problems: list[Any]) -> M | None:
    try:
        return model.model_validate(table)
    except ValidationError as exc:
        for error in exc.errors():
            loc = tuple(part for part in error["loc"] if isinstance(part, str | int))
            message = str(error["msg"]).removeprefix("Value error, ")
            problems.append(((*where, *loc), message))
        return None


def _with_prompt_file(persona: Persona, base: Path, where: Path_, problems: list[Any]) -> Persona:
    if persona.prompt_file is None:
        return persona
    path = base / persona.prompt_file
    text = _read(path, (*where, "prompt_file"), problems)
    if text is not None and not text.strip():
        problems.append(((*where, "prompt_file"), f"{path.absolute()} is empty"))
    return persona.model_copy(update={"prompt": text, "prompt_file": path})


def _read(path: Path, where: Path_, problems: list[Any]) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        problems.append((where, f"no such file: {path.absolute()}"))
    except (OSError, UnicodeDecodeError) as exc:
        problems.append((where, f"cannot read {path.absolute()}: {exc}"))
    return None


# -- where each key is ------------------------------------------------------------------------
_PART = r'(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|\'[^\']*\')'
_DOTTED = rf"{_PART}(?:\s*\.\s*{_PART})*"
_HEADER = re.compile(rf"^\s*(\[\[?)\s*({_DOTTED})\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(rf"^\s*({_DOTTED})\s*=")
_SPLIT = re.compile(_PART)


def _parts(dotted: str) -> list[str]:
    return [p[1:-1] if p[0] in "\"'" else p for p in _SPLIT.findall(dotted)]


class Locator:
    """The line of each key path (``("scope", 0, "persona")``) in a TOML text; best effort:
    a key it cannot place is reported at its table's line."""

    def __init__(self, text: str) -> None:
        self.lines: dict[Path_, int] = {}
        table: Path_ = ()
        arrays: dict[tuple[str, ...], int] = {}
        closing: str | None = None  # inside a multi-line string: its closing quotes
        for number, line in enumerate(text.splitlines(), 1):
            if closing is not None:
                if line.count(closing) % 2 == 1:
                    closing = None
                continue
            header = _HEADER.match(line)
            key = None if header else _KEY.match(line)
            if header:
                names = tuple(_parts(header[2]))
                if header[1] == "[[":
                    arrays[names] = arrays.get(names, -1) + 1
                table = self._indexed(names, arrays)
                self.lines.setdefault(table, number)
            elif key:
                path = (*table, *_parts(key[1]))
                self.lines.setdefault(path, number)
                rest = line[key.end() :]
                closing = next((q for q in ('"""', "'''") if rest.count(q) % 2 == 1), None)

    @staticmethod
    def _indexed(names: tuple[str, ...], arrays: Mapping[tuple[str, ...], int]) -> Path_:
        path: list[str | int] = []
        for depth, name in enumerate(names, 1):
            path.append(name)
            if names[:depth] in arrays:
                path.append(arrays[names[:depth]])
        return tuple(path)

    def line(self, where: Path_) -> int | None:
        parts = list(where)
        while parts:
            found = self.lines.get(tuple(parts))
            if found is not None:
                return found
            parts.pop()
        return None

    def dotted(self) -> dict[str, int]:
        return {".".join(str(p) for p in path): line for path, line in self.lines.items()}
