"""A whole answered console turn against the bare SDK replaying the very same requests.

Why this shape: it is what a user pays on top of the model. Three processes, as in use: a
loopback OpenAI server (in this process), a real ``chorus chat`` (piped, its defaults: the
embedded store, the insights agent in-process), and a bare ``openai`` SDK client that afterwards
replays, one by one, the exact request bodies Chorus sent for the chat turns (same bytes on the
wire, same work for the server), twice: through ``client.post`` (the least the SDK does to
send them) and through ``client.chat.completions.create(**body)`` (what a bot calling the
SDK's documented method pays, its parameter transform included). A Chorus turn is timed from
writing the question to its stdin until the answer line is on its stdout, and the CPU seconds
its process spent over the measured turns are read from ``/proc``; a bare call is timed until
it returns. The server answers at once, so the ratio is Chorus's whole cost over the SDK's own:
with a real model's seconds on both sides it would be close to 1. The conversation grows to the
history limit (40 messages) during the warm-up, as a long chat does. Both sides are warmed
first, and the median of ``TURNS`` is reported.

    python -m bench.turn_ratio        # prints a Markdown table
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.loopback.openai_server import OpenAIServer

ROOT = Path(__file__).resolve().parent.parent
WARMUP, TURNS = 20, 200
MARK = "question-"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def chorus_turns(server: OpenAIServer, home: str) -> tuple[list[float], float]:
    """Seconds per answered turn of a piped ``chorus chat`` (warm-up excluded), and the CPU
    seconds per turn its process spent over those turns."""
    from bench.startup import cpu_seconds, spawn_chat

    proc = await spawn_chat(
        home,
        CHORUS_MODEL="openai:gpt-test",
        OPENAI_API_KEY="bench-key-0123456789",
        OPENAI_BASE_URL=server.base_url,
    )
    assert proc.stdin is not None and proc.stdout is not None
    times: list[float] = []
    cpu = 0.0
    try:
        for i in range(WARMUP + TURNS):
            if i == WARMUP:
                cpu = cpu_seconds(proc.pid)
            started = time.perf_counter()
            proc.stdin.write(f"{MARK}{i}: what is {i} plus one?\n".encode())
            await proc.stdin.drain()
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            if not line.strip():
                raise RuntimeError("chorus chat gave no answer")
            if i >= WARMUP:
                times.append(time.perf_counter() - started)
        cpu = (cpu_seconds(proc.pid) - cpu) / TURNS
    finally:
        proc.stdin.close()
        await asyncio.wait_for(proc.wait(), 60)
    return times, cpu


def _chat_bodies(bodies: list[Any]) -> list[dict[str, Any]]:
    """The chat turns' requests (the insights agent's and the summariser's, which ask for a
    JSON answer, are left out), in order."""
    chat = []
    for body in bodies:
        if "response_format" in body:
            continue
        last = body.get("messages", [{}])[-1]
        content = last.get("content")
        text = content if isinstance(content, str) else json.dumps(content)
        if last.get("role") == "user" and MARK in text:
            chat.append(body)
    return chat


async def bare_replay(base_url: str, bodies: list[dict[str, Any]], how: str) -> list[float]:
    """Seconds per call of a separate process replaying ``bodies`` with the bare SDK, through
    ``how``: ``post`` or ``create``."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(bodies, f)
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.turn_ratio", "--replay", how, base_url, f.name,
            stdout=asyncio.subprocess.PIPE, env=os.environ | {"PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        out, _ = await asyncio.wait_for(proc.communicate(), 300)
    finally:
        os.unlink(f.name)
    if proc.returncode != 0:
        raise RuntimeError("the bare replay failed")
    times: list[float] = json.loads(out.decode().strip().splitlines()[-1])
    return times


async def _replay_child(how: str, base_url: str, bodies: list[dict[str, Any]]) -> None:
    import openai
    from openai.types.chat import ChatCompletion

    client = openai.AsyncOpenAI(api_key="bench-key-0123456789", base_url=base_url, max_retries=0)
    times = []
    warm = bodies[:WARMUP]  # the first requests once more, untimed
    try:
        for i, body in enumerate([*warm, *bodies]):
            started = time.perf_counter()
            if how == "create":
                await client.chat.completions.create(**body)
            else:
                await client.post("/chat/completions", body=body, cast_to=ChatCompletion)
            if i >= len(warm):
                times.append(time.perf_counter() - started)
    finally:
        await client.close()
    print(json.dumps(times))


async def measure() -> dict[str, float]:
    async with OpenAIServer() as server:
        server.default_reply = lambda body: "It is one more."
        with tempfile.TemporaryDirectory() as home:
            chorus, cpu = await chorus_turns(server, home)
        bodies = _chat_bodies(list(server.bodies))[WARMUP:]
        if len(bodies) != TURNS:
            raise RuntimeError(f"expected {TURNS} chat requests, found {len(bodies)}")
        post = await bare_replay(server.base_url, bodies, "post")
        create = await bare_replay(server.base_url, bodies, "create")
    return {
        "chorus_p50_ms": statistics.median(chorus) * 1000,
        "chorus_p90_ms": _pct(chorus, 0.9) * 1000,
        "chorus_cpu_ms": cpu * 1000,
        "post_p50_ms": statistics.median(post) * 1000,
        "create_p50_ms": statistics.median(create) * 1000,
        "ratio_post": statistics.median(chorus) / statistics.median(post),
        "ratio_create": statistics.median(chorus) / statistics.median(create),
    }


async def main() -> list[str]:
    r = await measure()
    return [
        "## A whole console turn against the bare SDK replaying its requests (OpenAI)",
        "",
        "| whole `chorus chat` turn p50 (p90) | its CPU per turn | bare `post` p50 | ratio "
        "| bare `create` p50 | ratio |",
        "|---|---|---|---|---|---|",
        f"| {r['chorus_p50_ms']:.2f} ms ({r['chorus_p90_ms']:.2f}) | {r['chorus_cpu_ms']:.2f} ms "
        f"| {r['post_p50_ms']:.2f} ms | {r['ratio_post']:.2f} "
        f"| {r['create_p50_ms']:.2f} ms | {r['ratio_create']:.2f} |",
    ]


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--replay":
        replayed = json.loads(Path(sys.argv[4]).read_text())
        asyncio.run(_replay_child(sys.argv[2], sys.argv[3], replayed))
    else:
        print("\n".join(asyncio.run(main())))
