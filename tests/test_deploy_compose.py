"""deploy/compose.yaml, checked offline: the Compose Specification, one ``chorus run`` and Redis
by default, the scaled-out roles under ``--profile scale``, every file ``chorus init`` writes
reaching the containers, the dashboard published on the host's loopback only, and the data
directory on a named volume. Why offline: no Docker engine runs here, and a mistake in the file
(a persona that is silently ignored, a dashboard nobody can reach) shows only in production;
tests/deploy_recipes.py says how the recipes are loaded."""

from __future__ import annotations

import copy
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from bot.ops.health import DEFAULT_PORT
from bot.settings import ConfigError, load_settings
from bot.settings.file import CONFIG_NAME
from bot.settings.ops import LOOPBACK_HOSTS
from tests.deploy_recipes import (
    _SECRET_NAME,
    DEPLOY,
    ROOT,
    SCHEMAS,
    SHUTDOWN_GRACE,
    _assert_cli,
    _compose,
    _env_default,
    _final_stage,
    _instructions,
    _serves_health,
)

# It starts processes (tests/suite_rules.py): `make test-fast` leaves it out.
pytestmark = pytest.mark.e2e

SHARED = {"CHORUS_REDIS_URL": "redis://redis:6379/0", "CHORUS_BUS": "redis"}


def _services(profile: str | None) -> dict[str, dict[str, Any]]:
    """The services ``docker compose [--profile <profile>] up`` starts: those without a
    ``profiles`` key always, the others only when one of their profiles is active."""
    services: dict[str, dict[str, Any]] = _compose()["services"]
    return {
        name: service
        for name, service in services.items()
        if "profiles" not in service or profile in service["profiles"]
    }


def _compose_validator() -> jsonschema.protocols.Validator:
    schema = json.loads((SCHEMAS / "compose-spec.json").read_text())
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    return validator_class(schema)


def _workdir() -> str:
    return _final_stage("WORKDIR")[-1]


def test_compose_file_follows_the_compose_specification() -> None:
    validator = _compose_validator()
    compose = _compose()
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(compose)]
    assert errors == []
    misspelt = copy.deepcopy(compose)
    misspelt["services"]["worker"]["deploy"] = {"replica": 2}
    assert not validator.is_valid(misspelt)
    misprofiled = copy.deepcopy(compose)
    misprofiled["services"]["worker"]["profiles"] = "scale"
    assert not validator.is_valid(misprofiled)


def test_by_default_one_chorus_run_and_redis_and_the_scaled_roles_under_a_profile() -> None:
    default, scaled = _services(None), _services("scale")
    assert sorted(default) == ["chorus", "redis"]
    assert sorted(scaled) == ["chorus", "insights", "redis", "worker"]
    commands = {name: service["command"] for name, service in scaled.items() if name != "redis"}
    assert commands == {
        "chorus": ["run"],  # --role all: the platforms, the answers and the analyses
        "worker": ["run", "--role", "worker"],
        "insights": ["insights"],
    }
    # The one process connected to the platforms (one connection per bot token) is never
    # replicated, in either topology; the workers are.
    assert "deploy" not in scaled["chorus"]
    assert scaled["worker"]["deploy"]["replicas"] == 2
    for name in ("worker", "insights"):  # the analyses leave the workers' reply path
        assert scaled[name]["environment"]["CHORUS_INSIGHTS_IN_PROCESS"] == "false"
    assert "CHORUS_INSIGHTS_IN_PROCESS" not in scaled["chorus"]["environment"]  # alone: analyses
    for name, command in commands.items():
        service = scaled[name]
        _assert_cli(command)
        assert {k: service["environment"][k] for k in SHARED} == SHARED, name
        assert service["environment"]["CHORUS_HEALTH_PORT"] == str(DEFAULT_PORT)
        if _serves_health(command):
            assert f":{DEFAULT_PORT}/healthz" in service["healthcheck"]["test"][-1]
        else:
            assert service["healthcheck"] == {"disable": True}, f"{name}: nothing answers"
        assert service["depends_on"] == {"redis": {"condition": "service_healthy"}}
        assert service["restart"] == "unless-stopped"
        stop = service.get("stop_grace_period", "10s")  # Compose's default
        assert stop.endswith("s") and float(stop[:-1]) >= SHUTDOWN_GRACE + 10, f"{name}: drain"
        assert (DEPLOY / service["build"]["context"] / service["build"]["dockerfile"]).is_file()
        assert not [k for k in service["environment"] if _SECRET_NAME.search(k)], "secrets: .env"
        assert service["read_only"] is True and service["cap_drop"] == ["ALL"]
    slack_port = _env_default("SLACK_HTTP_PORT")
    assert f"{slack_port}:{slack_port}" in scaled["chorus"]["ports"]
    assert not [n for n in ("worker", "insights") if scaled[n].get("ports")], "one front door"


def test_redis_keeps_an_append_only_file_on_a_named_volume() -> None:
    compose = _compose()
    redis = compose["services"]["redis"]
    command = redis["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert command[command.index("--maxmemory-policy") + 1] == "noeviction"
    assert [v.split(":")[1] for v in redis["volumes"]] == ["/data"]
    assert redis["volumes"][0].split(":")[0] in compose["volumes"]
    assert redis["healthcheck"]["test"] and redis["restart"] == "unless-stopped"


def _init_writes(directory: Path) -> list[Path]:
    """The files a real ``chorus init`` writes (no question asked, nothing checked)."""
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(directory), "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "bot.cli", "init", "--non-interactive", "--no-check",
         "--vendor=openai", "--api-key=sk-compose-0123", "--platforms=none",
         "--persona-name=Wren", f"--dir={directory / 'project'}"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return sorted((directory / "project").iterdir())


def test_every_file_chorus_init_writes_reaches_every_chorus_container(tmp_path: Path) -> None:
    """A private file (``.env``, mode 600) through ``env_file``: Compose reads it on the host,
    where the container's user could not. Any other file (``chorus.toml``) bind-mounted read-only
    from the repository root into the image's working directory, where Chorus looks for it."""
    written = _init_writes(tmp_path)
    names = [path.name for path in written]
    assert ".env" in names and CONFIG_NAME in names
    for name, service in _services("scale").items():
        if name == "redis":
            continue
        mounts = [v for v in service.get("volumes", []) if isinstance(v, dict)]
        for path in written:
            if stat.S_IMODE(path.stat().st_mode) & 0o077 == 0:
                assert (DEPLOY / service["env_file"]).resolve() == ROOT / path.name, (name, path)
                continue
            [mount] = [m for m in mounts if m["target"] == f"{_workdir()}/{path.name}"]
            assert mount["type"] == "bind" and mount["read_only"] is True, (name, mount)
            assert (DEPLOY / mount["source"]).resolve() == ROOT / path.name, (name, mount)
            # Long syntax, no create_host_path: a missing file stops `up` instead of becoming
            # an empty directory that Chorus would silently ignore.
            assert not mount.get("bind", {}).get("create_host_path"), name
    assert ".env" in (ROOT / ".gitignore").read_text().split()


def test_the_dashboard_is_published_on_the_host_loopback_and_needs_its_token() -> None:
    chorus = _services(None)["chorus"]
    [documented] = re.findall(
        r"^#?\s*CHORUS_ADMIN_PORT=(\d+)", (ROOT / ".env.example").read_text(), re.MULTILINE
    )
    host = chorus["environment"]["CHORUS_ADMIN_HOST"]
    assert host not in LOOPBACK_HOSTS, "inside the container it must face Docker's network"
    published = [p for p in chorus["ports"] if p.rsplit(":", 1)[-1] == documented]
    assert published == [f"127.0.0.1:{documented}:{documented}"], "the host's loopback only"
    # Bound beyond loopback, the dashboard still never starts without its token.
    environ = {"CHORUS_ADMIN_HOST": host, "CHORUS_ADMIN_PORT": documented}
    with pytest.raises(ConfigError, match="CHORUS_ADMIN_TOKEN is required"):
        load_settings(env_file=None, environ=environ, config=False)
    token = {"CHORUS_ADMIN_TOKEN": "a-long-enough-admin-token"}
    assert load_settings(env_file=None, environ=environ | token, config=False).admin.enabled


def test_the_data_directory_is_a_named_volume_the_image_makes_writable() -> None:
    """CHORUS_DATA_DIR (the spool, the process's files) must survive the read-only container:
    a named volume on a directory the image creates as its user, so Docker initialises the
    volume with that owner."""
    compose = _compose()
    chorus = compose["services"]["chorus"]
    [image_data_dir] = re.findall(r"CHORUS_DATA_DIR=(\S+)", " ".join(_final_stage("ENV")))
    data_dir = chorus["environment"]["CHORUS_DATA_DIR"]
    assert data_dir == image_data_dir
    [volume] = [v for v in chorus["volumes"] if isinstance(v, str) and v.split(":")[1] == data_dir]
    assert volume.split(":")[0] in compose["volumes"]
    final = [(kw, args) for stage, kw, args in _instructions() if stage == 1]
    spool = f"{data_dir}/{_env_default('CHORUS_SPOOL_DIR')}"
    made = final.index(("RUN", f"mkdir -p {spool}"))
    assert [kw for kw, _ in final[:made]].count("USER") == 1, "made as the user, not root"
