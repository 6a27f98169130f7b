"""A private Redis Cluster of three primaries for the tests that prove Chorus on one: three
``redis-server --cluster-enabled yes`` on free ports, joined by ``redis-cli --cluster create``
(the slots split in three), ready once every node reports ``cluster_state:ok`` and agrees on
the slot map (polled, never a fixed sleep), so a test never meets a half-formed cluster."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from bot.state import keys
from tests.redis_server import free_port, start_redis, stop_redis

NODES = 3


@dataclass
class Cluster:
    """A running cluster: its nodes' ports and processes, and the URL Chorus takes."""

    ports: list[int]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in self.ports)

    def stop(self) -> None:
        for proc in self.procs:
            stop_redis(proc)


def start_cluster(workdir: Path, *, timeout: float = 60.0) -> Cluster:
    """Three primaries (no replicas) on free ports, ``cluster_state:ok`` on each."""
    server = shutil.which("redis-server")
    cli = shutil.which("redis-cli")
    if server is None or cli is None:
        raise RuntimeError("redis-server and redis-cli are needed (tests/prereqs.sh)")
    cluster = Cluster(ports=[])
    try:
        for _ in range(NODES):
            port, proc = _start_node(server, workdir)
            cluster.procs.append(proc)
            cluster.ports.append(port)
        nodes = [f"127.0.0.1:{port}" for port in cluster.ports]
        subprocess.run(
            [cli, "--cluster", "create", *nodes, "--cluster-replicas", "0", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=timeout,
        )
        _wait_ok(cli, cluster.ports, timeout)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _start_node(server: str, workdir: Path) -> tuple[int, subprocess.Popen[bytes]]:
    """One cluster-enabled node on free ports: its own and its cluster bus's (``cluster-port``,
    drawn like the other: the default, port + 10000, may fall among the kernel's ephemeral
    ports, which outgoing connections take). A port taken between the probe and the bind is
    drawn again, a few times."""
    for attempt in range(3):
        port, bus = free_port(), free_port()
        node_dir = workdir / f"node-{port}"
        node_dir.mkdir(parents=True)
        try:
            return port, start_redis(
                server,
                port,
                node_dir,
                "--cluster-enabled",
                "yes",
                "--cluster-port",
                str(bus),
                "--cluster-config-file",
                str(node_dir / "nodes.conf"),
                "--cluster-node-timeout",
                "5000",
            )
        except RuntimeError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _wait_ok(cli: str, ports: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        infos = [_cli(cli, port, "cluster", "info") for port in ports]
        slots = {_cli(cli, port, "cluster", "slots") for port in ports}
        if all("cluster_state:ok" in info for info in infos) and len(slots) == 1:
            return
        if time.monotonic() > deadline:
            raise RuntimeError("the cluster did not reach cluster_state:ok:\n" + "\n".join(infos))
        time.sleep(0.1)


def _cli(cli: str, port: int, *command: str) -> str:
    return subprocess.run(
        [cli, "-p", str(port), *command], capture_output=True, text=True, timeout=10, check=False
    ).stdout


def store_url(request: pytest.FixtureRequest, key_tag: str) -> Iterator[str]:
    """The body of a ``redis_url`` fixture: ``memory`` (the embedded store), ``real`` (the
    session's server; keys with ``key_tag`` removed after) or ``cluster`` (the session's
    cluster, keys built in its layout meanwhile)."""
    if request.param == "memory":
        yield f"memory://test-{key_tag}"
        return
    if request.param == "cluster":
        yield request.getfixturevalue("redis_cluster_url")
        keys.use_cluster_layout(False)
        return
    url: str = request.getfixturevalue("real_redis_url")
    yield url
    client = redis.Redis.from_url(url)
    try:
        doomed = list(client.scan_iter(match=f"*{key_tag}*", count=1000))
        if doomed:
            client.delete(*doomed)
    finally:
        client.close()


STORES = [
    pytest.param("memory", id="memory", marks=pytest.mark.redis),
    pytest.param("real", id="real", marks=pytest.mark.redis),
]
"""The stores a ``redis_url`` test runs on."""

WITH_CLUSTER = [
    *STORES,
    pytest.param("cluster", id="cluster", marks=[pytest.mark.redis, pytest.mark.e2e]),
]
"""The same and a Redis Cluster of three primaries, for a module whose store applies there:
it overrides ``redis_url`` with ``pytest.fixture(params=WITH_CLUSTER)`` over ``store_url``."""
