"""The dependency rules of docs/architecture.md, enforced on the source.

Each package's docstring says what it may import; ``MAY_IMPORT`` below is the same table, and
these tests read every import statement (module level, ``TYPE_CHECKING`` blocks and lazy imports
inside functions alike) to hold the code to it. The direction is adapters -> core <- insights:
the core never imports an adapter or the insights package (only the composition root wires
them, lazily), so each platform SDK stays an optional extra and insights can run as its own
process. On top of that: no import cycle between modules, ``bot/`` holds only the composition
root, the core types and subpackages, and no module (tests and benchmarks included) grows past
700 lines. Modules are split by what they own, never to meet a count: past 450 lines the run
prints a ``LineBudgetWarning`` (a prompt to look, not a failure).
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("bot", "adapters", "insights", "prompts")
MAX_LINES = 700  # hard: the test fails
WARN_LINES = 450  # soft: the run prints a LineBudgetWarning


class LineBudgetWarning(UserWarning):
    """A module past ``WARN_LINES``: worth a look at whether it still owns one thing."""


# The foundation every layer may use.
BASE = {"bot.events", "bot.settings", "bot.resilience", "prompts"}
MAY_IMPORT: dict[str, set[str]] = {
    "bot": set(),
    "bot.events": set(),
    "bot.settings": {"bot.events"},
    "bot.resilience": {"bot.events"},
    "prompts": set(),
    "bot.llm": BASE,
    "bot.tools": BASE | {"bot.llm"},
    "bot.state": BASE,
    "bot.ops": BASE | {"bot.state", "bot.llm"},
    "bot.bus": BASE | {"bot.state", "bot.ops"},
    "bot.platform": BASE,
    "bot.quota": BASE | {"bot.state", "bot.ops"},
    "bot.engagement": BASE | {"bot.state", "bot.ops", "bot.quota"},
    "bot.memory": BASE | {"bot.state", "bot.ops"},
    "bot.agent": BASE | {"bot.llm", "bot.tools", "bot.ops", "bot.state"},
    "bot.plugins": BASE | {"bot.llm", "bot.tools", "bot.state", "bot.ops"},
    "bot.safety": BASE | {"bot.llm", "bot.state", "bot.ops", "bot.quota"},
    "bot.onboarding": BASE | {"bot.llm"},
    "bot.knowledge": BASE | {"bot.state", "bot.ops", "bot.llm", "bot.tools", "bot.memory"},
    "bot.voice": BASE | {"bot.llm", "bot.state", "bot.ops", "bot.quota"},
    "bot.router": BASE
    | {"bot.llm", "bot.tools", "bot.state", "bot.ops", "bot.bus", "bot.engagement", "bot.memory"}
    | {"bot.agent", "bot.plugins", "bot.quota", "bot.safety", "bot.voice"},
    "bot.app": BASE
    | {"bot.llm", "bot.tools", "bot.state", "bot.ops", "bot.bus", "bot.engagement", "bot.memory"}
    | {"bot.agent", "bot.router", "bot.platform", "bot.plugins", "bot.quota", "bot.safety"}
    | {"bot.knowledge", "bot.admin", "bot.voice"},
    # The dashboard: every core package (it shows and steers them).
    "bot.admin": BASE
    | {"bot.llm", "bot.state", "bot.ops", "bot.engagement", "bot.memory", "bot.quota", "bot.safety"}
    | {"bot.router", "bot.voice", "bot.agent", "bot.tools", "bot.plugins", "bot.knowledge"},
    "insights": BASE | {"bot.llm", "bot.state", "bot.ops", "bot.memory"},
    "adapters": BASE | {"bot.llm", "bot.state", "bot.ops", "bot.bus", "bot.platform", "bot.quota"},
}
# The composition root may wire anything (adapters and insights only lazily, see below).
MAY_IMPORT["bot.cli"] = set(MAY_IMPORT) | {"adapters", "insights"}
MAY_IMPORT["bot.cli_config"] = set(MAY_IMPORT["bot.cli"])  # `chorus config` and `reload`
MAY_IMPORT["bot.cli"].add("bot.cli_config")
TOP_LEVEL_MODULES = {
    "__init__.py",
    "cli.py",
    "cli_config.py",
    "app.py",
    "events.py",
    "resilience.py",
}
# The command line itself (subcommands, options, examples): read by the composition root.
MAY_IMPORT["bot.cli_parser"] = BASE | {"bot.onboarding"}
MAY_IMPORT["bot.cli"].add("bot.cli_parser")
TOP_LEVEL_MODULES.add("cli_parser.py")


def _modules() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            yield name, path


MODULES = dict(_modules())


def _unit(module: str) -> str:
    """The layer a module belongs to: ``bot.<package>``, a top-level ``bot`` module, or the
    top-level package itself (``adapters``, ``insights``, ``prompts``)."""
    parts = module.split(".")
    if parts[0] != "bot":
        return parts[0]
    return ".".join(parts[:2]) if len(parts) > 1 else "bot"


def _imports(
    path: Path, *, top_level_only: bool = False, runtime_only: bool = False
) -> Iterator[tuple[str, int]]:
    """Every project module ``path`` imports, with its line; ``top_level_only`` skips imports
    inside functions (the composition root's deliberate lazy imports), ``runtime_only`` also
    skips ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(path.read_text(), str(path))
    nodes: list[ast.AST] = []
    if top_level_only:
        stack: list[ast.AST] = list(tree.body)
        while stack:
            node = stack.pop()
            nodes.append(node)
            if (
                isinstance(node, ast.If)
                and runtime_only
                and "TYPE_CHECKING" in ast.unparse(node.test)
            ):
                stack.extend(node.orelse)
            elif isinstance(node, ast.If | ast.Try):
                stack.extend(ast.iter_child_nodes(node))
    else:
        nodes = list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                yield (sub if sub in MODULES else node.module), node.lineno


def _project(name: str) -> bool:
    return name.split(".")[0] in PACKAGES


@pytest.mark.parametrize("module", sorted(MODULES), ids=str)
def test_every_import_follows_the_layering(module: str) -> None:
    unit = _unit(module)
    allowed = MAY_IMPORT.get(unit)
    assert allowed is not None, f"{module}: no layering rule for {unit}; add it to MAY_IMPORT"
    broken = [
        f"line {line}: {target}"
        for target, line in _imports(MODULES[module])
        if _project(target) and _unit(target) != unit and _unit(target) not in allowed
    ]
    assert not broken, f"{module} ({unit}) imports what its layer may not: {broken}"


@pytest.mark.parametrize("root", ["bot.cli", "bot.cli_config"])
def test_the_composition_root_imports_adapters_and_insights_only_lazily(root: str) -> None:
    eager = [
        target
        for target, _ in _imports(MODULES[root], top_level_only=True, runtime_only=True)
        if _unit(target) in {"adapters", "insights"}
    ]
    assert not eager, f"{root} imports {eager} at module level; import them where they are used"


def test_no_import_cycle_between_modules() -> None:
    """Type-only imports count too: a cycle hidden behind ``TYPE_CHECKING`` is still two
    modules that cannot be understood one without the other."""
    graph = {
        name: {t for t, _ in _imports(path, top_level_only=True) if t in MODULES and t != name}
        for name, path in MODULES.items()
    }
    cycles = _strongly_connected(graph)
    assert not cycles, f"import cycles: {cycles}"


def test_no_import_cycle_through_lazy_imports_either() -> None:
    """An import inside a function defers the cycle to run time but keeps it: the composition
    root's lazy imports of adapters and insights go one way only, and so must every other."""
    graph = {
        name: {t for t, _ in _imports(path) if t in MODULES and t != name}
        for name, path in MODULES.items()
    }
    cycles = _strongly_connected(graph)
    assert not cycles, f"import cycles through imports inside functions: {cycles}"


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _strongly_connected(graph) == [["a", "b", "c"]]


def test_bot_top_level_holds_only_the_root_the_core_types_and_subpackages() -> None:
    stray = sorted(p.name for p in (ROOT / "bot").glob("*.py") if p.name not in TOP_LEVEL_MODULES)
    assert not stray, f"move {stray} into the subpackage that owns it"


@pytest.mark.parametrize("module", sorted(MODULES), ids=str)
def test_every_package_says_what_it_owns(module: str) -> None:
    tree = ast.parse(MODULES[module].read_text())
    assert ast.get_docstring(tree), f"{module} has no docstring saying why it exists"


def _line_counts() -> dict[str, int]:
    paths = [p for _, p in MODULES.items()]
    paths += sorted((ROOT / "bench").rglob("*.py")) + sorted((ROOT / "tests").rglob("*.py"))
    return {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in paths}


def test_no_module_over_the_line_budget() -> None:
    counts = _line_counts()
    long = {name: n for name, n in counts.items() if n > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split by what they own): {long}"
    for name, n in sorted(counts.items()):
        if n > WARN_LINES:
            warnings.warn(
                f"{name}: {n} lines (over {WARN_LINES}); does it still own one thing?",
                LineBudgetWarning,
                stacklevel=1,
            )


def test_platform_sdks_are_not_imported_by_the_core() -> None:
    sdks = {"discord", "slack_bolt", "slack_sdk", "twitchio"}
    for name, path in MODULES.items():
        if name.startswith("bot."):
            found = {t.split(".")[0] for t, _ in _imports(path)} & sdks
            assert not found, f"{name} imports {found}"


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: every strongly connected component of more than one node, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)
