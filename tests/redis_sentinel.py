"""A private primary, its replica and one Redis Sentinel watching them, for the tests that prove
Chorus follows a failover: ``redis-server`` twice (the second ``--replicaof`` the first) and
``redis-server CONF --sentinel`` (quorum 1, the primary judged down after one second). Ready
once the replica's link is up and the sentinel names the primary (polled, never a sleep)."""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.redis_server import free_port, start_redis, stop_redis

SERVICE = "chorus"


@dataclass
class Sentinels:
    primary: int
    replica: int
    sentinel: int
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"redis+sentinel://127.0.0.1:{self.sentinel}/{SERVICE}/0"

    def primary_port(self) -> int | None:
        """The port the sentinel names as the primary now."""
        reply = cli(self.sentinel, "sentinel", "get-master-addr-by-name", SERVICE).split()
        return int(reply[1]) if len(reply) == 2 and reply[1].isdigit() else None

    def kill(self, port: int) -> None:
        proc = self.procs.pop(port)
        proc.kill()
        proc.wait()

    def stop(self) -> None:
        for proc in self.procs.values():
            stop_redis(proc)
        self.procs.clear()


def start_sentinels(workdir: Path, *, timeout: float = 60.0) -> Sentinels:
    binary = shutil.which("redis-server")
    if binary is None or shutil.which("redis-cli") is None:
        raise RuntimeError("redis-server and redis-cli are needed (tests/prereqs.sh)")
    rig = Sentinels(free_port(), free_port(), free_port())
    try:
        for port, extra in (
            (rig.primary, ()),
            (rig.replica, ("--replicaof", "127.0.0.1", str(rig.primary))),
        ):
            node = workdir / f"node-{port}"
            node.mkdir(parents=True)
            rig.procs[port] = start_redis(binary, port, node, *extra)
        conf = workdir / "sentinel.conf"
        conf.write_text(
            f"port {rig.sentinel}\nbind 127.0.0.1\ndir {workdir}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {rig.primary} 1\n"
            f"sentinel down-after-milliseconds {SERVICE} 1000\n"
            f"sentinel failover-timeout {SERVICE} 5000\n"
        )
        rig.procs[rig.sentinel] = subprocess.Popen(
            [binary, str(conf), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + timeout
        while not (
            "master_link_status:up" in cli(rig.replica, "info", "replication")
            and rig.primary_port() == rig.primary
            and "num-slaves" in cli(rig.sentinel, "sentinel", "master", SERVICE)
            and _replicas_known(rig)
        ):
            if time.monotonic() > deadline:
                raise RuntimeError("the sentinel set-up did not come up")
            time.sleep(0.1)
    except BaseException:
        rig.stop()
        raise
    return rig


def _replicas_known(rig: Sentinels) -> bool:
    """The sentinel has discovered the replica (it can fail over to it)."""
    return str(rig.replica) in cli(rig.sentinel, "sentinel", "replicas", SERVICE)


def cli(port: int, *command: str) -> str:
    return subprocess.run(
        ["redis-cli", "-p", str(port), *command],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    ).stdout
