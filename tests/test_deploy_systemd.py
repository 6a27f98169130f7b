"""The systemd units (unprivileged, hardened, accepted by systemd-analyze) and what holds across every recipe: each variable they set is documented in .env.example, none holds a real-looking token, README covers each."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bot.cli import EXIT_CONFIG
from tests.deploy_recipes import (
    _FOREIGN_VARIABLES,
    _TOKEN_SHAPES,
    DEPLOY,
    ROOT,
    SHUTDOWN_GRACE,
    _assert_cli,
    _chorus_containers,
    _compose,
    _env_example,
    _instructions,
    _k8s_docs,
)


# -- systemd -------------------------------------------------------------------------------------
def _unit(name: str) -> dict[str, dict[str, list[str]]]:
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for raw in (DEPLOY / "systemd" / name).read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, sep, value = line.partition("=")
        assert sep and key.strip() == key, f"{name}: bad line {raw!r}"
        current.setdefault(key, []).append(value)
    return sections


@pytest.mark.parametrize(
    "name,args",
    [("chorus.service", ["run"]), ("chorus-worker@.service", ["run", "--role", "worker"])],
)
def test_systemd_unit_runs_chorus_unprivileged_and_hardened(name: str, args: list[str]) -> None:
    unit = _unit(name)
    service = {k: v[-1] for k, v in unit["Service"].items()}
    assert unit["Unit"]["Description"] and unit["Install"]["WantedBy"] == ["multi-user.target"]
    assert service["User"] == "chorus" and service["Group"] == "chorus"
    assert service["EnvironmentFile"] == "/etc/chorus/chorus.env"
    exec_start = service["ExecStart"].split()
    venv = exec_start.index("/opt/chorus/venv/bin/chorus")
    assert exec_start[venv + 1 :] == args
    _assert_cli(args)
    assert service["Restart"] == "on-failure"
    assert service["RestartPreventExitStatus"] == str(EXIT_CONFIG)
    hardening = {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
    }
    assert hardening.items() <= service.items()
    assert service["StateDirectory"] == "chorus" and "ReadWritePaths" not in service
    assert service["KillSignal"] == "SIGTERM"  # a graceful stop, with room to drain:
    assert float(service["TimeoutStopSec"]) >= SHUTDOWN_GRACE + 10
    if name.endswith("@.service"):
        assert exec_start[:venv] == ["/usr/bin/env", "CHORUS_HEALTH_PORT=%i"], (
            "one port per instance"
        )


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_analyze_verify_accepts_the_units(tmp_path: Path) -> None:
    chorus = Path(sys.executable).parent / "chorus"  # the real entry point stands in for /opt/...
    for unit in (DEPLOY / "systemd").glob("*.service"):
        text = unit.read_text().replace("/opt/chorus/venv/bin/chorus", str(chorus))
        (tmp_path / unit.name).write_text(text)
    for name in ("chorus.service", "chorus-worker@9465.service"):
        result = subprocess.run(
            ["systemd-analyze", "verify", "--man=no", str(tmp_path / name)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        problems = [line for line in result.stderr.splitlines() if str(tmp_path) in line]
        assert result.returncode == 0 and problems == [], result.stderr


# -- across the recipes --------------------------------------------------------------------------
def _variables_set() -> dict[str, set[str]]:
    """Every environment variable a recipe sets or reads, by the file it appears in."""
    found: dict[str, set[str]] = {}
    for _, kw, args in _instructions():
        if kw == "ENV":
            found.setdefault("Dockerfile", set()).update(re.findall(r"([A-Z_][A-Z0-9_]*)=", args))
        found.setdefault("Dockerfile", set()).update(
            re.findall(r"environ.get\('([A-Z_0-9]+)'", args)
        )
    for service in _compose()["services"].values():
        found.setdefault("compose.yaml", set()).update(service.get("environment", {}))
    for name, doc in _k8s_docs():
        names = found.setdefault(name, set())
        if doc["kind"] == "ConfigMap":
            names.update(doc["data"])
        if doc["kind"] == "Secret":
            names.update(doc["stringData"])
        for trigger in doc.get("spec", {}).get("triggers", []):
            names.update(v for k, v in trigger["metadata"].items() if k.endswith("FromEnv"))
    for _, _, container in _chorus_containers():
        found.setdefault("containers", set()).update(e["name"] for e in container.get("env", []))
    for unit in (DEPLOY / "systemd").glob("*.service"):
        text = unit.read_text()
        names = found.setdefault(unit.name, set())
        for assignment in re.findall(r"^Environment=(.*)$", text, re.M):
            names.update(re.findall(r"([A-Z_][A-Z0-9_]*)=", assignment))
        names.update(re.findall(r"/usr/bin/env ([A-Z_][A-Z0-9_]*)=", text))
    return found


def test_every_variable_the_recipes_set_is_documented_in_env_example() -> None:
    found = _variables_set()
    assert {"Dockerfile", "compose.yaml", "configmap.yaml", "chorus.service"} <= set(found)
    unknown = {f: sorted(n - _env_example() - _FOREIGN_VARIABLES) for f, n in found.items()}
    assert {f: n for f, n in unknown.items() if n} == {}, "typo, or document it in .env.example"


def test_no_recipe_contains_a_real_looking_token() -> None:
    planted = "xoxb-" + "1234567890-0987654321-" + "a" * 24
    assert any(shape.search(planted) for shape in _TOKEN_SHAPES)  # the detector works
    files = [p for p in DEPLOY.rglob("*") if p.is_file()] + [ROOT / ".dockerignore"]
    for path in files:
        text = path.read_text()
        hits = [m.group(0) for shape in _TOKEN_SHAPES for m in shape.finditer(text)]
        assert hits == [], f"{path.relative_to(ROOT)}: {hits}"


def test_readme_covers_every_recipe() -> None:
    text = (DEPLOY / "README.md").read_text()
    for path in DEPLOY.rglob("*"):
        if path.is_file() and path.name != "README.md":
            assert path.name in text, f"deploy/README.md does not mention {path.name}"
