"""What pyproject.toml declares against what the code imports and what the suite runs on.

Why: an import that works only because another package happens to pull its distribution in
breaks the day that package drops it, and a floor below the tested version promises users a
combination nobody has run. So every third-party module imported anywhere in the packages
(found by parsing every file, including imports inside functions and ``TYPE_CHECKING`` blocks)
must map, through ``importlib.metadata.packages_distributions()``, to a distribution that
pyproject.toml declares, and the floor of every runtime requirement equals the version
constraints.txt pins (the one the suite, the Dockerfile and the wheel test install).
"""

from __future__ import annotations

import ast
import sys
import tomllib
from collections.abc import Mapping
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent

PACKAGES = ("bot", "adapters", "insights", "prompts")

# Modules run only on a developer's machine, allowed to import what only the dev extra declares.
DEV_ONLY = {"adapters/youtube/_proto/generate.py"}  # `make proto`: grpcio-tools


def _project() -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project


def _requirements(dev: bool) -> list[Requirement]:
    """The requirements of pyproject.toml: the dependencies and every extra (the dev extra only
    if ``dev``); the ``chorus-bot[...]`` self-references are left out."""
    project = _project()
    raw: list[str] = list(project["dependencies"])
    extras: dict[str, list[str]] = project["optional-dependencies"]
    for name, group in extras.items():
        if name != "dev" or dev:
            raw += group
    found = [Requirement(text) for text in raw]
    return [r for r in found if canonicalize_name(r.name) != "chorus-bot"]


def _declared(dev: bool) -> set[NormalizedName]:
    return {canonicalize_name(r.name) for r in _requirements(dev)}


def _imports(path: Path) -> set[str]:
    """The absolute modules ``path`` imports; ``from a import b`` counts as ``a.b`` too (so a
    namespace package such as ``google`` resolves to the distribution of ``google.genai``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


@cache
def _top_level() -> Mapping[str, list[str]]:
    return metadata.packages_distributions()


@cache
def _files_of(distribution: str) -> frozenset[str]:
    return frozenset(str(f) for f in metadata.distribution(distribution).files or ())


def _distributions(module: str) -> set[NormalizedName]:
    """The distributions that provide ``module`` (for a namespace package, the one holding the
    module's own directory or file); empty when nothing installed provides it."""
    top, *rest = module.split(".")
    candidates = _top_level().get(top, [])
    if len(candidates) > 1 and rest:
        prefix = f"{top}/{rest[0]}"
        owning = [
            d
            for d in candidates
            if any(f.startswith(f"{prefix}/") or f == f"{prefix}.py" for f in _files_of(d))
        ]
        candidates = owning or candidates
    return {canonicalize_name(d) for d in candidates}


def _third_party_imports() -> dict[str, set[str]]:
    """Every module outside the standard library and our packages, with the files importing it."""
    found: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for module in _imports(path):
                top = module.split(".")[0]
                if top in sys.stdlib_module_names or top in PACKAGES or top == "__future__":
                    continue
                found.setdefault(module, set()).add(path.relative_to(ROOT).as_posix())
    return found


def test_every_imported_package_is_declared() -> None:
    imports = _third_party_imports()
    assert "yarl" in imports and "httpx2" in imports, "the scan sees imports inside functions"
    runtime, everything = _declared(dev=False), _declared(dev=True)
    undeclared: list[str] = []
    for module, files in sorted(imports.items()):
        distributions = _distributions(module)
        if not distributions:
            if "." in module:
                continue  # ``from a import b`` where b is a name, not a module: ``a`` is checked
            undeclared.append(f"{module}: no installed distribution provides it ({sorted(files)})")
            continue
        allowed = everything if files <= DEV_ONLY else runtime
        if not distributions & allowed:
            undeclared.append(f"{module} ({sorted(distributions)}) imported by {sorted(files)}")
    assert undeclared == [], "declare these in pyproject.toml (and pin them in constraints.txt)"


def _pins() -> dict[NormalizedName, Version]:
    pins: dict[NormalizedName, Version] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        text = line.split("#")[0].strip()
        if text:
            requirement = Requirement(text)
            [spec] = requirement.specifier
            assert spec.operator == "==", line
            pins[canonicalize_name(requirement.name)] = Version(spec.version)
    return pins


def test_every_runtime_floor_is_the_tested_version() -> None:
    """A floor is the version constraints.txt pins: the one every test ran on."""
    pins = _pins()
    wrong: list[str] = []
    for requirement in _requirements(dev=False):
        name = canonicalize_name(requirement.name)
        floors = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
        if name not in pins:
            wrong.append(f"{requirement}: not pinned in constraints.txt")
        elif floors != [pins[name]]:
            wrong.append(f"{requirement}: the tested version is {pins[name]}")
        elif not requirement.specifier.contains(pins[name]):
            wrong.append(f"{requirement}: excludes the tested version {pins[name]}")
    assert wrong == []


def test_every_dev_requirement_is_pinned() -> None:
    pins = _pins()
    unpinned = [str(r) for r in _requirements(dev=True) if canonicalize_name(r.name) not in pins]
    assert unpinned == [], "pin these in constraints.txt"
