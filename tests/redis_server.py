"""A private ``redis-server`` for tests that need a server of their own (the real-Redis
fallback of the conftest, outage and readiness tests): start on a port, wait for its "Ready"
log line by reading its pipe (not a sleep loop), stop."""

from __future__ import annotations

import os
import selectors
import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_redis(
    binary: str, port: int, workdir: Path, *extra: str, timeout: float = 15.0
) -> subprocess.Popen[bytes]:
    """A ready server on 127.0.0.1:``port`` (no RDB snapshots; ``extra`` adds options, e.g. an
    AOF); raises RuntimeError with the server's output when it does not come up."""
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    output = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while b"Ready to accept connections" not in output:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not selector.select(timeout=remaining):
                break
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:  # the server exited
                break
            output += chunk
        else:
            # Nothing reads the pipe any more; redis ignores SIGPIPE, so it never blocks on it.
            proc.stdout.close()
            return proc
    stop_redis(proc)
    raise RuntimeError("redis-server did not start:\n" + output.decode(errors="replace")[-2000:])


def stop_redis(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stdout is not None and not proc.stdout.closed:
        proc.stdout.close()
