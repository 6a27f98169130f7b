"""The Kubernetes manifests and the KEDA ScaledObject, checked offline against the Kubernetes JSON schemas (strict) and KEDA's CRD schema, with a negative control proving a misspelt field is rejected, and against the code they must agree with: the CLI, the health port, the bus's streams and consumer group."""

from __future__ import annotations

import ast
import copy
import inspect
import json
import re
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import pytest
import yaml

from bot.bus.streams import RedisStreamsBus
from bot.bus.topics import INBOUND
from bot.ops.health import DEFAULT_PORT
from bot.state import keys
from tests.deploy_recipes import (
    DEPLOY,
    K8S,
    K8S_VERSION,
    ROOT,
    SCHEMAS,
    SHUTDOWN_GRACE,
    _assert_cli,
    _chorus_containers,
    _containers,
    _env_default,
    _env_example,
    _k8s_docs,
    _named,
    _objects,
    _serves_health,
)


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
        grace = float(config.get("CHORUS_SHUTDOWN_GRACE", SHUTDOWN_GRACE))
        assert pod["terminationGracePeriodSeconds"] >= grace + 10, f"{name}: room to drain"
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
    # /readyz fails while any one platform is down; Slack's events must reach the pod anyway
    assert _named("Service", "chorus-slack")["spec"]["publishNotReadyAddresses"] is True
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


def test_the_gateway_spools_to_a_volume_that_outlives_the_pod() -> None:
    """What a gateway stopped during a Redis outage acknowledged but could not publish goes to
    CHORUS_SPOOL_DIR; that must be a PersistentVolumeClaim (an emptyDir dies with the pod)."""
    pod = _named("Deployment", "chorus-gateway")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    env = {e["name"]: e["value"] for e in container.get("env", [])}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volume = mounts[env["CHORUS_SPOOL_DIR"]]
    [source] = [v for v in pod["volumes"] if v["name"] == volume]
    claim = _named("PersistentVolumeClaim", source["persistentVolumeClaim"]["claimName"])
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]  # one replica, Recreate
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsUser"]  # writable
