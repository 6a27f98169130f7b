"""The sharded Discord gateway recipe (deploy/k8s-discord-sharded): a kustomize overlay of the
Kubernetes recipe whose StatefulSet pods each connect one block of the bot's shards, checked
offline against the Kubernetes schemas (strict) and against the settings that read it: the
pods' names pick blocks that cover every shard exactly once."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import yaml

from bot.settings import load_settings
from tests.deploy_recipes import DEPLOY, K8S_VERSION, _assert_cli, _named

OVERLAY = DEPLOY / "k8s-discord-sharded"


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((OVERLAY / name).read_text()) if d]


def _statefulset() -> dict[str, Any]:
    [found] = [d for d in _docs("discord-gateway.yaml") if d["kind"] == "StatefulSet"]
    return found


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_the_overlay_builds_on_the_base_recipe() -> None:
    [kustomization] = _docs("kustomization.yaml")
    assert kustomization["resources"] == ["../k8s", "discord-gateway.yaml"]
    [patch] = kustomization["patches"]
    assert (OVERLAY / patch["path"]).is_file()


def test_every_object_matches_the_kubernetes_schema() -> None:
    for doc in _docs("discord-gateway.yaml"):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        assert "namespace" not in doc["metadata"]


def test_each_pod_connects_its_own_block_and_together_every_shard() -> None:
    spec = _statefulset()["spec"]
    [container] = spec["template"]["spec"]["containers"]
    _assert_cli(container["args"])
    assert container["args"] == ["run", "--role", "gateway"]
    env = _env(container)
    assert env["DISCORD_GATEWAY_INDEX"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert int(env["DISCORD_GATEWAY_COUNT"]) == spec["replicas"]
    count = int(env["DISCORD_SHARD_COUNT"])
    name = _statefulset()["metadata"]["name"]
    blocks = []
    for ordinal in range(spec["replicas"]):
        discord = load_settings(
            environ={
                "DISCORD_TOKEN": "t",
                "DISCORD_SHARD_COUNT": env["DISCORD_SHARD_COUNT"],
                "DISCORD_GATEWAY_COUNT": env["DISCORD_GATEWAY_COUNT"],
                "DISCORD_GATEWAY_INDEX": f"{name}-{ordinal}",  # the pod's metadata.name
            },
            env_file=None,
            config=False,
        ).discord
        blocks.append(discord.shards_of(count))
    assert all(blocks), "every pod has shards"
    assert sorted(s for block in blocks for s in block) == list(range(count))
    for platform in ("SLACK_BOT_TOKEN", "TWITCH_CLIENT_ID", "YOUTUBE_REFRESH_TOKEN"):
        assert env[platform] == "", f"{platform}: the pods connect Discord only"
    [service] = [d for d in _docs("discord-gateway.yaml") if d["kind"] == "Service"]
    assert service["metadata"]["name"] == spec["serviceName"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= spec["template"]["metadata"]["labels"].items()


def test_the_base_gateway_leaves_discord_to_the_statefulset() -> None:
    [patch] = _docs("gateway-without-discord.yaml")
    base = _named("Deployment", patch["metadata"]["name"])
    [patched] = patch["spec"]["template"]["spec"]["containers"]
    names = {c["name"] for c in base["spec"]["template"]["spec"]["containers"]}
    assert patched["name"] in names
    assert _env(patched) == {"DISCORD_TOKEN": ""}
