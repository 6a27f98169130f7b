"""Editing ``chorus.toml`` from the dashboard: the form's fields, the edit, the check, the write.

Why tomlkit: the file is the operator's, with their comments and their order; tomlkit changes
one value and leaves every other byte where it was. Why the check is the start's own
(``load_settings`` on the edited text, in a file next to the real one so relative paths
resolve): an invalid value must be refused with exactly the message a start would print,
``chorus.toml:LINE: ...``, and a value the start would accept must never be refused here.
Why a version: the form carries the hash of the text it was built from, and a file changed
since (by hand, or from another browser) is never overwritten; the caller shows a conflict.

The fields are those of ``Persona`` and ``Scope`` (``bot/settings/scopes.py``), their nested
tables flattened to dotted keys (``scope.2.safety.patterns``), each with the kind of input its
type asks for. Nothing here is a secret (the file must never hold one): a value equal to a
secret the process knows is refused.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import os
import re
import tempfile
import tomllib
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import tomlkit
from pydantic import BaseModel

from bot.settings import ConfigError, load_settings
from bot.settings.scopes import Persona, Scope

Kind = Literal["text", "long", "list", "bool", "choice", "number"]
NESTED = ("tools", "engagement", "safety", "quota")
LONG = {"prompt", "style"}  # free text over several lines
NEW_PERSONA, NEW_SCOPE = "new.persona", "new.scope"  # the form's "add" fields


@dataclass(frozen=True, slots=True)
class Field:
    """One input of the form: ``name`` is the dotted path in the file (``scope.0.persona``)."""

    name: str
    key: str  # the key within its persona or scope (``safety.patterns``)
    kind: Kind
    choices: tuple[str, ...] = ()
    value: str = ""  # as the form shows it


@dataclass(frozen=True, slots=True)
class Change:
    name: str
    before: str
    after: str


def version(text: str) -> str:
    """The file's version: what the form carries to find a change made meanwhile."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _kind(annotation: Any) -> tuple[Kind, tuple[str, ...]]:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    inner = args[0] if args else annotation
    origin = typing.get_origin(inner)
    if origin is Literal:
        return "choice", tuple(str(a) for a in typing.get_args(inner))
    if origin in (tuple, frozenset):
        return "list", ()
    if inner is bool:
        return "bool", ("true", "false")
    if inner in (int, float):
        return "number", ()
    if isinstance(inner, types.UnionType):
        return "text", ()
    return "text", ()


def _keys(model: type[BaseModel], prefix: str = "") -> Iterable[tuple[str, Kind, tuple[str, ...]]]:
    for name, info in model.model_fields.items():
        inner = [a for a in typing.get_args(info.annotation) if a is not type(None)]
        sub = inner[0] if inner else info.annotation
        if name in NESTED and isinstance(sub, type) and issubclass(sub, BaseModel):
            yield from _keys(sub, f"{prefix}{name}.")
            continue
        kind, choices = _kind(info.annotation)
        if name in LONG:
            kind = "long"
        yield f"{prefix}{name}", kind, choices


PERSONA_KEYS = tuple(_keys(Persona))
SCOPE_KEYS = tuple(_keys(Scope))


def _get(table: Mapping[str, Any], key: str) -> Any:
    for part in key.split("."):
        if not isinstance(table, Mapping) or part not in table:
            return None
        table = table[part]
    return table


def shown(value: Any) -> str:
    """A value as the form shows it (lists one item a line)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return "\n".join(str(v) for v in value)
    return str(value)


@dataclass(frozen=True, slots=True)
class Table:
    """A persona or a scope as a group of the form."""

    name: str  # ``persona``, ``personas.pirate``, ``scope.0``
    title: str
    fields: tuple[Field, ...]


def tables(text: str) -> list[Table]:
    """The form's groups for the file's text: ``[persona]``, each ``[personas.NAME]``, each
    ``[[scope]]`` (the file must parse; the caller has loaded it)."""
    data = tomllib.loads(text)
    personas = ["default", *data.get("personas", {})]
    found = [("persona", "[persona]", data.get("persona", {}), PERSONA_KEYS)]
    found += [
        (f"personas.{n}", f"[personas.{n}]", t, PERSONA_KEYS)
        for n, t in data.get("personas", {}).items()
    ]
    found += [
        (f"scope.{i}", f"[[scope]] {s.get('match', '')}", s, SCOPE_KEYS)
        for i, s in enumerate(data.get("scope", []))
    ]
    groups = []
    for name, title, table, keys in found:
        fields = []
        for key, kind, choices in keys:
            if key == "persona" and name.startswith("scope."):
                kind, choices = "choice", tuple(personas)
            fields.append(Field(f"{name}.{key}", key, kind, choices, shown(_get(table, key))))
        groups.append(Table(name, title, tuple(fields)))
    return groups


def _value(kind: Kind, text: str) -> Any:
    """What the form's text becomes in the file (None: the key is removed)."""
    text = text.replace("\r\n", "\n")
    if kind == "list":
        items = [line.strip() for line in text.split("\n") if line.strip()]
        return items or None
    text = text.strip() if kind != "long" else text.strip("\n")
    if not text:
        return None
    if kind == "bool":
        return {"true": True, "false": False}.get(text, text)
    if kind == "number":
        for convert in (int, float):
            try:
                return convert(text)
            except ValueError:
                continue
    return text  # a wrong value is the check's to refuse, with the start's message


def edit(
    text: str, form: Mapping[str, str], secrets: Iterable[str] = ()
) -> tuple[str, list[Change]]:
    """The file's text with the form's values (only those that differ from the file's), and
    what changed. ``ValueError`` for a secret typed into a field."""
    doc = tomlkit.parse(text)
    hidden = [s for s in secrets if len(s) >= 8]
    changes = []
    for group in tables(text):
        for field in group.fields:
            if field.name not in form:
                continue
            after = _value(field.kind, form[field.name])
            if shown(after).strip() == field.value.strip():
                continue
            if any(secret in shown(after) for secret in hidden):
                raise ValueError(f"{field.name}: a secret belongs in .env, never in the file")
            _set(doc, group.name, field.key, after)
            changes.append(Change(field.name, field.value, shown(after)))
    changes += _added(doc, form)
    return tomlkit.dumps(doc), changes


def _added(doc: Any, form: Mapping[str, str]) -> list[Change]:
    """A new ``[personas.NAME]`` (``new.persona``) and a new ``[[scope]]`` (``new.scope``, its
    match), appended after what the file has; their other fields are set once they exist."""
    changes = []
    persona = form.get(NEW_PERSONA, "").strip()
    if persona:
        personas = doc.setdefault("personas", tomlkit.table(is_super_table=True))
        if persona in personas:
            raise ValueError(f"{NEW_PERSONA}: there is a persona {persona!r} already")
        personas[persona] = tomlkit.table()
        changes.append(Change(f"personas.{persona}", "", "(new persona)"))
    match = form.get(NEW_SCOPE, "").strip()
    if match:
        scope = tomlkit.table()
        scope["match"] = match
        if "scope" in doc:
            doc["scope"].append(scope)
        else:
            doc.append("scope", tomlkit.aot())
            doc["scope"].append(scope)
        changes.append(Change(f"scope.{len(doc['scope']) - 1}.match", "", match))
    return changes


def _set(doc: Any, group: str, key: str, value: Any) -> None:
    head, _, rest = group.partition(".")
    if head == "persona":
        table = doc.setdefault("persona", tomlkit.table())
    elif head == "personas":
        table = doc["personas"][rest]
    else:
        table = doc["scope"][int(rest)]
    *parents, last = key.split(".")
    chain = [table]
    for part in parents:
        if part not in chain[-1]:
            if value is None:
                return
            chain[-1][part] = tomlkit.inline_table()
        chain.append(chain[-1][part])
    if value is None:
        chain[-1].pop(last, None)
        for parent, part in zip(reversed(chain[:-1]), reversed(parents), strict=True):
            if len(parent[part]) == 0:
                del parent[part]
        return
    if isinstance(value, str) and "\n" in value:
        value = tomlkit.string(value if value.endswith("\n") else value + "\n", multiline=True)
    chain[-1][last] = value


def diff(before: str, after: str, path: Path) -> str:
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        f"{path.name} (now)",
        f"{path.name} (saved)",
    )
    return "".join(lines)


_SCOPE_AT = re.compile(r"\[\[scope\]\] #(\d+): ([\w.]+)")
_KEY_AT = re.compile(r":\d+: (persona|personas\.[^.\s]+)\.([\w.]+)")


def check(path: Path, text: str) -> tuple[Path | None, dict[str, str], list[str]]:
    """Load ``text`` as a start would, from a file next to ``path``. Valid: the checked file
    (to rename over ``path``), no problems. Invalid: None, each problem by the form field it
    names, and the ones that name none; every message as a start prints it (naming
    ``path``)."""
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".edit", dir=path.parent)
    temp = Path(name)
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    try:
        load_settings(config=temp, warn=False)
    except ConfigError as exc:
        temp.unlink(missing_ok=True)
        by_field: dict[str, str] = {}
        rest: list[str] = []
        for line in str(exc).replace(str(temp), str(path)).splitlines():
            line = line.strip()
            if not line or line.endswith(":") and not line.startswith(str(path)):
                continue
            scope, key = _SCOPE_AT.search(line), _KEY_AT.search(line)
            if scope:
                by_field.setdefault(f"scope.{int(scope[1]) - 1}.{scope[2]}", line)
            elif key:
                by_field.setdefault(f"{key[1]}.{key[2]}", line)
            else:
                rest.append(line)
        return None, by_field, rest
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return temp, {}, []


def replace(checked: Path, path: Path) -> None:
    """The checked file in place of ``path``, atomically (a reader sees the old or the new
    text, never half), keeping the file's permissions."""
    with contextlib.suppress(OSError):  # a file of someone else's: its mode stays the temp's
        os.chmod(checked, path.stat().st_mode & 0o777)
    os.replace(checked, path)
