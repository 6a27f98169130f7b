"""Writing what ``chorus init`` decided: ``.env`` (secrets, mode 0600) and ``chorus.toml``.

``.env`` is read by python-dotenv, so a value that is not a plain token is double-quoted with
``\\`` and ``"`` escaped. ``chorus.toml`` holds what is not secret: the persona (a ``[persona]``
table with ``name`` and ``prompt``) and the ``plugins`` list. Both are written to a temporary
file first and renamed into place, so an interrupted run never leaves half a file; ``.env`` is
created 0600 before the first secret is written to it.

``update_env`` is how ``chorus auth`` stores what it obtained: the named variables are replaced
where they are (or appended), every other line (comments, other settings) is kept as it was,
and the new file replaces the old one atomically, mode 0600.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

_PLAIN = re.compile(r"[A-Za-z0-9_./:@+,=-]*")


def env_value(value: str) -> str:
    if _PLAIN.fullmatch(value):
        return value
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def render_env(values: Mapping[str, str]) -> str:
    lines = [
        "# Written by `chorus init`. It holds secrets: keep it private (mode 600) and out of git.",
        "# .env.example documents every variable; the environment wins over this file.",
    ]
    lines += [f"{name}={env_value(value)}" for name, value in values.items()]
    return "\n".join(lines) + "\n"


def _assigned(line: str) -> str | None:
    """The variable a ``.env`` line sets (``NAME=...`` or ``export NAME=...``), else None."""
    text = line.strip().removeprefix("export ").lstrip()
    name, sep, _ = text.partition("=")
    name = name.strip()
    if not sep or text.startswith("#") or not name.replace("_", "").isalnum():
        return None
    return name


def update_env(path: Path, values: Mapping[str, str]) -> None:
    """Set ``values`` in the ``.env`` at ``path`` (created when missing), keeping its other
    lines; a variable set more than once keeps only its first line, with the new value."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        lines = render_env({}).splitlines()
    done: set[str] = set()
    kept: list[str] = []
    for line in lines:
        name = _assigned(line)
        if name is not None and name in values:
            if name in done:
                continue
            kept.append(f"{name}={env_value(values[name])}")
            done.add(name)
        else:
            kept.append(line)
    kept += [f"{name}={env_value(value)}" for name, value in values.items() if name not in done]
    write_file(path, "\n".join(kept) + "\n", private=True)


def toml_string(value: str) -> str:
    """A TOML basic string (escapes per the TOML spec)."""
    out = []
    for char in value:
        if char in '"\\':
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def render_toml(persona_name: str, persona_prompt: str, plugins: Sequence[str]) -> str:
    lines = [
        "# Chorus configuration, written by `chorus init`. Secrets live in .env, not here.",
        "# chorus.example.toml documents every key.",
    ]
    if plugins:
        lines += ["", f"plugins = [{', '.join(toml_string(p) for p in plugins)}]"]
    lines += ["", "[persona]", f"name = {toml_string(persona_name)}"]
    if persona_prompt:
        lines.append(f"prompt = {toml_string(persona_prompt)}")
    return "\n".join(lines) + "\n"


def write_file(path: Path, text: str, *, private: bool) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed into place."""
    temporary = path.with_name(f".{path.name}.chorus-init.tmp")
    mode = 0o600 if private else 0o644
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)  # O_CREAT's mode is filtered by the umask, and the file may exist
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    os.replace(temporary, path)
