"""The dependency direction of docs/architecture.md, enforced on the source.

The core never imports an adapter or the insights package (only the composition root,
``bot/cli.py``, wires them, lazily), so each platform SDK stays an optional extra and insights
can run as its own process.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COMPOSITION_ROOT = ROOT / "bot" / "cli.py"


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("path", sorted((ROOT / "bot").rglob("*.py")), ids=lambda p: p.name)
def test_core_never_imports_adapters_or_insights(path: Path) -> None:
    if path == COMPOSITION_ROOT:
        return
    assert not _imports(path) & {"adapters", "insights"}, f"{path} breaks the layering"


@pytest.mark.parametrize(
    "path",
    sorted((ROOT / "adapters").rglob("*.py")) + sorted((ROOT / "insights").rglob("*.py")),
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_adapters_and_insights_do_not_import_each_other(path: Path) -> None:
    other = "insights" if "adapters" in path.parts else "adapters"
    assert other not in _imports(path)


def test_platform_sdks_are_not_imported_by_the_core_at_module_level() -> None:
    sdks = {"discord", "slack_bolt", "slack_sdk", "twitchio"}
    for path in (ROOT / "bot").rglob("*.py"):
        assert not _imports(path) & sdks, path
