"""Start to first answer per vendor, and the resident memory of a chat and of an idle run.

Why it is measured this way: a user's first impression is how long ``chorus chat`` takes to
answer a piped question, so the clock runs from spawning the real process (``python -m
bot.cli chat``, the same interpreter the ``chorus`` script runs) until its first answer line is on
stdout, with the vendor's real SDK talking to a loopback server that answers at once. The peak
resident memory (``VmHWM``) is read from ``/proc`` at that moment, while the process still runs.
An idle ``chorus run`` (no platform configured, so the console and the health server) is read
once ``/readyz`` answers and a second has passed. Beside each vendor's chat, a fresh
interpreter that only imports the vendor's SDK shows the floor under it (``import_cpu``): what
is left above that floor is Chorus's own part of the start-up. Median of ``RUNS`` spawns; the
milliseconds depend on the machine (compare runs taken in one session), the megabytes much
less. So the same split is also counted in instructions, which do not depend on the machine
(valgrind's cachegrind, ``chat_instructions`` and ``import_instructions``): a one-question chat
from start to exit, after one uncounted chat has written the bytecode a real install has. The
instruction-count gate (``bench.instructions``) judges the part above the SDK's import.

    python -m bench.startup            # prints a Markdown table
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import IO, Any

import aiohttp

from bench.instructions import cachegrind, refs
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.gemini_server import GeminiServer
from tests.loopback.openai_server import OpenAIServer

ROOT = Path(__file__).resolve().parent.parent
RUNS = 5
VENDORS: dict[str, tuple[Any, str, str, str]] = {
    "anthropic": (
        AnthropicServer,
        "anthropic:claude-test",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
    ),
    "openai": (OpenAIServer, "openai:gpt-test", "OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "gemini": (GeminiServer, "gemini:gemini-test", "GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL"),
}


def _env(home: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in {"PATH", "LANG"}}
    env.update(
        CHORUS_BLOCK_REAL_LLM="1",
        CHORUS_REDIS_URL="memory://",
        CHORUS_HEALTH_PORT="0",
        PYTHONPATH=str(ROOT),
        HOME=home,
    )
    return env


async def spawn_chat(
    home: str,
    *,
    prefix: Sequence[str] = (),
    stderr: IO[bytes] | int = subprocess.DEVNULL,
    **env: str,
) -> asyncio.subprocess.Process:
    """A real piped ``chorus chat`` (the embedded store, no health server) with ``env`` added,
    run under ``prefix`` (a command such as valgrind's): stdin and stdout are pipes, stderr
    goes to ``stderr`` (dropped by default)."""
    return await asyncio.create_subprocess_exec(
        *prefix, sys.executable, "-m", "bot.cli", "chat",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=stderr, env=_env(home) | env, cwd=home,
    )  # fmt: skip


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds a running process has used (``/proc/<pid>/stat``): far
    steadier than its wall clock on a loaded machine, though cache contention still moves it."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def status_kib(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` (KiB) of a running process, from ``/proc/<pid>/status``."""
    found: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0])
    return found


@contextlib.asynccontextmanager
async def asked(
    vendor: str,
    *,
    prefix: Sequence[str] = (),
    stderr: IO[bytes] | int = subprocess.DEVNULL,
    limit: float = 60,
    **env: str,
) -> AsyncIterator[tuple[asyncio.subprocess.Process, float]]:
    """A piped ``chorus chat`` with ``vendor``'s SDK against a fresh loopback server, asked one
    question: yields the process once its first answer line is on stdout, with the seconds
    since spawn; then closes its stdin and waits (``limit`` seconds at most) for it to end."""
    server_cls, model, key_env, url_env = VENDORS[vendor]
    server = server_cls()
    await server.start()
    try:
        with tempfile.TemporaryDirectory() as home:
            started = time.perf_counter()
            proc = await spawn_chat(
                home,
                prefix=prefix,
                stderr=stderr,
                CHORUS_MODEL=model,
                **{key_env: "bench-key-0123456789", url_env: server.base_url},
                **env,
            )
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(b"hello\n")
            await proc.stdin.drain()
            line = await asyncio.wait_for(proc.stdout.readline(), limit)
            if not line.strip():
                raise RuntimeError(f"{vendor}: no answer on stdout")
            yield proc, time.perf_counter() - started
            proc.stdin.close()
            await asyncio.wait_for(proc.wait(), limit)
    finally:
        await server.close()


async def first_answer(vendor: str) -> tuple[float, float, float]:
    """Seconds from spawn to the first answer line of a piped ``chorus chat``, its peak
    resident MiB at that moment, and the CPU seconds it had used by then."""
    async with asked(vendor) as (proc, elapsed):
        return elapsed, status_kib(proc.pid)["VmHWM"] / 1024, cpu_seconds(proc.pid)


async def chat_instructions(vendor: str) -> int:
    """Instructions of a one-question piped ``chorus chat`` with ``vendor``, start to exit
    (``PYTHONHASHSEED`` fixed), after one uncounted chat wrote any bytecode still missing."""
    await first_answer(vendor)
    with (
        tempfile.TemporaryDirectory(prefix="chorus-ic-") as tmp,
        tempfile.TemporaryFile() as err,  # a file: a pipe nobody reads could fill and stall
    ):
        prefix = cachegrind(f"{tmp}/out")
        async with asked(vendor, prefix=prefix, stderr=err, limit=900, PYTHONHASHSEED="0") as (
            proc,
            _,
        ):
            pass
        err.seek(0)
        return refs(proc.returncode, err.read().decode(errors="replace"), f"a {vendor} chat")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


SDK_MODULES = {"anthropic": "anthropic", "openai": "openai", "gemini": "google.genai"}


def import_instructions(module: str) -> int:
    """Instructions of a fresh ``python -c 'import <module>'`` (the chats' interpreter and
    environment, ``PYTHONHASHSEED`` fixed): the floor under a chat's, in instructions."""
    with tempfile.TemporaryDirectory(prefix="chorus-ic-") as tmp:
        command = [*cachegrind(f"{tmp}/out"), sys.executable, "-c", f"import {module}"]
        env = _env(tempfile.gettempdir()) | {"PYTHONHASHSEED": "0"}
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    return refs(done.returncode, done.stderr, f"a fresh interpreter importing {module}")


def import_cpu(module: str) -> float:
    """CPU seconds of a fresh ``python -c 'import <module>'`` (the same interpreter and
    environment as the chats): the floor under a chat's first answer that Chorus cannot lower
    while the vendor's SDK is its client."""
    code = f"import {module}"
    env = _env(tempfile.gettempdir())  # what the chats get
    pid = os.posix_spawn(sys.executable, [sys.executable, "-c", code], env)
    _, status, usage = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{code!r} failed in a fresh interpreter")
    return usage.ru_utime + usage.ru_stime


async def idle_run() -> tuple[float, float]:
    """Resident and peak MiB of ``chorus run`` (no platform: the console and health server)
    a second after it is ready."""
    port = _free_port()
    with tempfile.TemporaryDirectory() as home:
        env = _env(home)
        env.update(
            CHORUS_MODEL="openai:gpt-test", OPENAI_API_KEY="bench-key", CHORUS_HEALTH_PORT=str(port)
        )
        env["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"  # never called: nobody writes
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot.cli", "run",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL, env=env, cwd=home,
        )  # fmt: skip
        try:
            async with aiohttp.ClientSession() as session:
                deadline = time.monotonic() + 60
                while True:
                    try:
                        async with session.get(f"http://127.0.0.1:{port}/readyz") as resp:
                            if resp.status == 200:
                                break
                    except aiohttp.ClientError:
                        pass
                    if time.monotonic() > deadline or proc.returncode is not None:
                        raise RuntimeError("chorus run never became ready")
                    await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)
            kib = status_kib(proc.pid)
            return kib["VmRSS"] / 1024, kib["VmHWM"] / 1024
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 60)


async def main(runs: int = RUNS) -> list[str]:
    lines = [
        "## Start-up: `chorus chat` from spawn to first answer",
        "",
        f"| vendor | start to first answer p50 (min..max of {runs}) | CPU to first answer p50 "
        "| the SDK's import alone, CPU p50 | Chorus's own part: the CPU above it, p50 (min..max) "
        "| peak RSS at first answer |",
        "|---|---|---|---|---|---|",
    ]
    for vendor in VENDORS:
        results, floors = [], []
        for _ in range(runs):  # each chat beside its floor, so a change of speed hits both
            results.append(await first_answer(vendor))
            floors.append(await asyncio.to_thread(import_cpu, SDK_MODULES[vendor]))
        secs = [r[0] for r in results]
        peak = statistics.median(r[1] for r in results)
        cpu = statistics.median(r[2] for r in results)
        own = sorted(r[2] - floor for r, floor in zip(results, floors, strict=True))
        lines.append(
            f"| {vendor} | {statistics.median(secs):.2f} s ({min(secs):.2f}..{max(secs):.2f}) "
            f"| {cpu:.2f} s | {statistics.median(floors):.2f} s "
            f"| {statistics.median(own):.2f} s ({own[0]:.2f}..{own[-1]:.2f}) | {peak:.0f} MiB |"
        )
    lines += [
        "",
        "| vendor | instructions, one-question chat (start to exit) | the SDK's import alone "
        "| above it: Chorus's start-up | the SDK import's share |",
        "|---|---|---|---|---|",
    ]
    for vendor in VENDORS:
        chat = await chat_instructions(vendor)
        floor = await asyncio.to_thread(import_instructions, SDK_MODULES[vendor])
        lines.append(
            f"| {vendor} | {chat / 1e6:,.0f} M | {floor / 1e6:,.0f} M "
            f"| {(chat - floor) / 1e6:,.0f} M | {floor / chat:.0%} |"
        )
    idle = [await idle_run() for _ in range(3)]
    lines += [
        "",
        "| idle `chorus run` (console + health server), median of 3 | VmRSS | VmHWM |",
        "|---|---|---|",
        f"| every extra installed | {statistics.median(i[0] for i in idle):.0f} MiB "
        f"| {statistics.median(i[1] for i in idle):.0f} MiB |",
    ]
    return lines


if __name__ == "__main__":
    print("\n".join(asyncio.run(main())))
