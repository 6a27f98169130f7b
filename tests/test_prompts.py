"""The prompt files and the code agree, and ``prompts.render`` keeps its rules.

No orphan: every file in ``prompts/`` is named by a string in the code (``bot``, ``insights``,
``adapters``). Nothing missing: every name the code passes to ``prompts.load``/``render``, and
every string in the code that looks like a prompt name (``<folder>/<name>`` with a folder of
``prompts/``), names a file that exists. Read from the source with ``ast``, so a name in a
comment or a docstring does not count.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

import prompts

ROOT = Path(__file__).resolve().parent.parent
CODE = ("bot", "insights", "adapters")
FOLDERS = {name.split("/")[0] for name in prompts.names() if "/" in name}


def _trees() -> list[tuple[Path, ast.Module]]:
    return [
        (path, ast.parse(path.read_text(encoding="utf-8"), str(path)))
        for folder in CODE
        for path in sorted((ROOT / folder).rglob("*.py"))
    ]


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the docstring nodes of ``tree`` (they are prose, not names)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _strings() -> dict[str, list[str]]:
    """Every string constant in the code (docstrings left out) -> where it appears."""
    found: dict[str, list[str]] = {}
    for path, tree in _trees():
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in skip
            ):
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                found.setdefault(node.value, []).append(where)
    return found


def _called_names() -> dict[str, str]:
    """Literal first arguments of ``prompts.load(...)`` / ``prompts.render(...)`` calls."""
    found: dict[str, str] = {}
    for path, tree in _trees():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "prompts"
                and node.func.attr in ("load", "render")
                and node.args
            ):
                for arg in ast.walk(node.args[0]):
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        found[arg.value] = f"{path.relative_to(ROOT)}:{node.lineno}"
    return found


def test_every_prompt_file_is_used_by_the_code() -> None:
    strings = _strings()
    orphans = [name for name in prompts.names() if name not in strings]
    assert orphans == [], f"prompt files no code names: {orphans}"


def test_every_name_the_code_asks_for_exists() -> None:
    shipped = set(prompts.names())
    called = _called_names()
    assert called, "found no prompts.load/render call: the scan is broken"
    missing = {name: where for name, where in called.items() if name not in shipped}
    looks_like_a_name = {
        name: where
        for name, where in _strings().items()
        if name.split("/")[0] in FOLDERS and "/" in name and " " not in name
    }
    missing |= {name: w[0] for name, w in looks_like_a_name.items() if name not in shipped}
    assert missing == {}, f"the code names prompts that do not exist: {missing}"


def test_names_are_lowercase_paths_and_nothing_else_is_shipped() -> None:
    folder = ROOT / "prompts"
    files = sorted(
        str(p.relative_to(folder).with_suffix("")) for p in folder.rglob("*") if p.is_file()
    )
    code = [f for f in files if f == "__init__" or f.startswith("__pycache__")]
    code += [f for f in files if f.startswith("admin/")]  # the dashboard's Jinja2 templates
    assert [f for f in files if f not in code] == prompts.names()
    for name in prompts.names():
        prompts.resolve(name)  # raises for a name that breaks the scheme


def test_the_package_data_ships_every_prompt_file() -> None:
    """A wheel holds only what ``package-data`` matches: a new folder depth or file type must be
    added there, or an installed bot would not find its prompts."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["prompts"]
    folder = ROOT / "prompts"
    shipped = {p for pattern in patterns for p in folder.glob(pattern)}
    files = {
        p
        for p in folder.rglob("*")
        if p.is_file() and p.suffix != ".pyc" and p.name != "__init__.py"
    }
    assert sorted(map(str, files - shipped)) == []


@pytest.mark.parametrize("name", ["../system", "System", "live//batch", "live/batch.md", ""])
def test_a_malformed_name_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="not a prompt name"):
        prompts.load(name)


def test_an_unknown_name_says_which_file_was_looked_for() -> None:
    with pytest.raises(FileNotFoundError, match=r"prompts/live/nothing\.md"):
        prompts.load("live/nothing")


def test_a_missing_value_is_named() -> None:
    with pytest.raises(KeyError, match=r"\{\{context\}\}"):
        prompts.render("live/batch_lines", lines="- Bo: hi")


def test_a_line_holding_only_an_empty_placeholder_disappears() -> None:
    text = prompts.render(
        "memory/context",
        platform="discord",
        user="Ada",
        time="t",
        pins="",
        recommendations="",
        summaries="",
        community="",
    )
    assert text == '<context platform="discord" user="Ada" time="t">\n</context>'


def test_an_empty_value_inside_a_sentence_stays_an_empty_string() -> None:
    assert prompts.render("insights/retry", error="") == (
        "That answer was not valid: \nAnswer again with only the JSON object that matches the schema."
    )


def test_values_are_inserted_in_one_pass() -> None:
    text = prompts.render("live/earlier_line", name="{{text}}", text="{{name}} {{nothing}}")
    assert text == "{{text}} also said earlier: {{name}} {{nothing}}"


def test_the_final_line_break_of_a_file_is_not_part_of_the_text() -> None:
    raw = prompts.resolve("router/crash").read_text(encoding="utf-8")
    assert raw.endswith("\n")
    assert prompts.load("router/crash") == raw[:-1]
    assert not prompts.load("system").endswith("\n")


def test_placeholders_lists_what_a_prompt_asks_for() -> None:
    assert prompts.placeholders("live/batch_lines") == {"lines", "context"}
    assert prompts.placeholders("system") == {"identity"}
