"""A private ``redis-server`` for tests that need a server of their own (the real-Redis
fallback of the conftest, outage and readiness tests): start on a port, wait for its "Ready"
log line by reading its pipe (not a sleep loop), stop; and ``free_port`` for every rig that
hands a port to a process of its own."""

from __future__ import annotations

import os
import random
import selectors
import socket
import subprocess
import time
from pathlib import Path


def _ephemeral_floor() -> int:
    """The lowest port the kernel gives outgoing connections (Linux; 32768 elsewhere)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_FIRST_PORT = 20000


def free_port() -> int:
    """A port nothing listens on now, for a server another process will bind.

    Drawn at random below the kernel's ephemeral range: between this probe and the server's
    bind, an outgoing connection of any test (workers run side by side) can never be given the
    same port, and two workers drawing at random rarely meet; a port the kernel picked (bind to
    0) would be an ephemeral one, free for exactly that reuse.
    """
    top = max(_FIRST_PORT + 1000, _ephemeral_floor())
    for _ in range(200):
        port = random.randrange(_FIRST_PORT, top)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port between {_FIRST_PORT} and {top}")


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
