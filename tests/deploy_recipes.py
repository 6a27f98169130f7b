"""Offline validation of the deploy/ recipes: Dockerfile, Compose, Kubernetes, KEDA, systemd.

Why: none of them can run here (no Docker engine, no cluster), and a typo in one fails only in
production. So each is checked against the real schema of its format (the Kubernetes JSON
schemas shipped by kubernetes-validate, in strict mode; KEDA's ScaledObject CRD schema and the
Compose Specification, vendored in tests/fixtures/schemas/) and against the code it must agree
with: the CLI's commands, the health server's port, the bus's streams and consumer group, the
config exit status, and .env.example. A negative control next to each schema check proves that
the schema would reject a misspelt field.

This module loads the recipes and the code they must agree with; the tests are in
tests/test_deploy_images.py, test_deploy_compose.py, test_deploy_kubernetes.py and
test_deploy_systemd.py.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from bot import cli
from bot.cli_parser import parser as _parser
from bot.settings.agent import AgentSettings

ROOT = Path(__file__).resolve().parents[1]


DEPLOY = ROOT / "deploy"


K8S = DEPLOY / "k8s"


SCHEMAS = ROOT / "tests" / "fixtures" / "schemas"


K8S_VERSION = kubernetes_validate.utils.latest_version()


# A stopping chorus drains this long by default; every stop timeout in deploy/ must exceed it
# with room for the hand-over (grace + 10 s).
SHUTDOWN_GRACE: float = AgentSettings.model_fields["shutdown_grace"].default


# Variables the recipes may set that are not Chorus settings (so not in .env.example).
_FOREIGN_VARIABLES = {
    "PATH", "HOME", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED",  # the interpreter
    "PIP_DISABLE_PIP_VERSION_CHECK", "PIP_ROOT_USER_ACTION",  # the image build
    "KEDA_REDIS_ADDRESS",  # read by KEDA's redis-streams scaler (addressFromEnv), never by Chorus
}  # fmt: skip


_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD")


_TOKEN_SHAPES = [
    re.compile(p)
    for p in (
        r"sk-ant-[A-Za-z0-9_-]{8,}",  # Anthropic
        r"\bsk-[A-Za-z0-9_-]{16,}",  # OpenAI
        r"\bAIza[0-9A-Za-z_-]{20,}",  # Google
        r"\bxox[abposr]-[A-Za-z0-9-]{8,}",  # Slack bot/user tokens
        r"\bxapp-[A-Za-z0-9-]{8,}",  # Slack app-level tokens
        r"\b[MN][A-Za-z0-9_-]{23,}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,}",  # Discord bot token
        r"\boauth:[a-z0-9]{20,}",  # Twitch chat token
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
    )
]


# -- loading -------------------------------------------------------------------------------------
@cache
def _k8s_docs() -> tuple[tuple[str, dict[str, Any]], ...]:
    return tuple(
        (path.name, doc)
        for path in sorted(K8S.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    )


def _objects(kind: str) -> list[dict[str, Any]]:
    return [doc for _, doc in _k8s_docs() if doc["kind"] == kind]


def _named(kind: str, name: str) -> dict[str, Any]:
    [found] = [doc for doc in _objects(kind) if doc["metadata"]["name"] == name]
    return found


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return loaded


@cache
def _env_example() -> frozenset[str]:
    text = (ROOT / ".env.example").read_text()
    return frozenset(re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", text, flags=re.MULTILINE))


def _instructions() -> list[tuple[int, str, str]]:
    """The Dockerfile as (stage index, KEYWORD, arguments), continuations joined."""
    out: list[tuple[int, str, str]] = []
    stage, pending = -1, ""
    for raw in (DEPLOY / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, args = (pending + line).partition(" ")
        pending = ""
        stage += keyword.upper() == "FROM"
        out.append((stage, keyword.upper(), args.strip()))
    return out


def _final_stage(keyword: str) -> list[str]:
    instructions = _instructions()
    last = instructions[-1][0]
    return [args for stage, kw, args in instructions if stage == last and kw == keyword]


def _docker_ignored(path: str) -> bool:
    """Whether the root .dockerignore keeps ``path`` out of the build context (last match wins;
    a pattern matching a directory covers what is under it)."""
    ignored = False
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = (line[1:] if negate else line).strip("/")
        regex = re.escape(pattern).replace(r"\*\*/", "(?:.*/)?").replace(r"\*", "[^/]*")
        regex = re.sub(r"\\\[(.*?)\\\]", r"[\1]", regex).replace(r"\?", "[^/]")
        if re.fullmatch(regex + "(?:/.*)?", path):
            ignored = not negate
    return ignored


def _assert_cli(args: list[str]) -> None:
    """``args`` is a command the ``chorus`` CLI accepts (argparse exits on anything else)."""
    _parser().parse_args(args)


def _containers() -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(workload name, pod spec, container) of every Deployment and StatefulSet."""
    for workload in [*_objects("Deployment"), *_objects("StatefulSet")]:
        pod = workload["spec"]["template"]["spec"]
        for container in pod["containers"]:
            yield workload["metadata"]["name"], pod, container


def _chorus_containers() -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    return ((n, p, c) for n, p, c in _containers() if c["image"].startswith("chorus"))


def _env_default(name: str) -> str:
    [value] = re.findall(rf"^{name}=(.*)$", (ROOT / ".env.example").read_text(), flags=re.MULTILINE)
    return str(value).strip()


def _serves_health(args: list[str]) -> bool:
    """Whether this ``chorus`` command starts the health server (``run``, every role, and
    ``insights``): the deploy files must probe exactly the processes that answer."""
    handlers: dict[str, Callable[..., Any]] = {"run": cli._run, "insights": cli._insights}
    source = inspect.getsource(handlers[args[0]])
    return "start_health" in source or "HealthServer.from_settings" in source
