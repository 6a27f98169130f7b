"""A whole answered console turn against the bare SDK replaying the very same requests, per vendor.

Why this shape: it is what a user pays on top of the model. Three processes, as in use: the
vendor's loopback API (in this process), a real ``chorus chat`` (piped, its defaults: the
embedded store, the insights agent in-process, the SDK on its own aiohttp transport), and a
bare SDK client on its stock transport that afterwards replays, one by one, the exact request
bodies Chorus sent for the chat turns (the same JSON on the wire, the same work for the
server): through the SDK's documented call (``create``: ``messages.create``,
``chat.completions.create``, Gemini's ``generate_content`` with the SDK's typed contents), and,
for Anthropic and OpenAI, through the client's ``post`` with the answer read into the SDK's
type (``post``: the least the SDK does to send them; google-genai has no such call). A Chorus
turn is timed from writing the question to its stdin until the answer line is on its stdout,
and the CPU seconds its process spent over the measured turns are read from ``/proc``; a bare
call is timed until it returns, and its process's CPU over the measured calls is counted too.
The server answers at once, so the ratio is Chorus's whole cost over the SDK's own: with a real
model's seconds on both sides it would be close to 1. The CPU ratio leaves the server out and is
far steadier on a busy machine than the wall clock. The
conversation grows to the history limit (40 messages) during the warm-up, as a long chat does.
Both sides are warmed first, and the median of ``TURNS`` is reported.

    python -m bench.turn_ratio        # prints a Markdown table
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.startup import VENDORS

ROOT = Path(__file__).resolve().parent.parent
WARMUP, TURNS = 20, 200
MARK = "question-"
# The bare SDK's ways of sending a body again, per vendor.
HOWS = {"anthropic": ("create", "post"), "openai": ("create", "post"), "gemini": ("create",)}


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def chorus_turns(server: Any, home: str, vendor: str) -> tuple[list[float], float]:
    """Seconds per answered turn of a piped ``chorus chat`` with ``vendor``'s SDK against
    ``server`` (warm-up excluded), and the CPU seconds per turn its process spent over them."""
    from bench.startup import cpu_seconds, spawn_chat

    _, model, key_env, url_env = VENDORS[vendor]
    proc = await spawn_chat(
        home, CHORUS_MODEL=model, **{key_env: "bench-key-0123456789", url_env: server.base_url}
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


def _structured(body: dict[str, Any]) -> bool:
    """A request for a JSON answer (the insights agent's, the summariser's), on any vendor."""
    generation = body.get("generationConfig") or {}
    return (
        "response_format" in body
        or "output_config" in body
        or generation.get("responseMimeType") == "application/json"
    )


def last_turn(body: dict[str, Any]) -> dict[str, Any]:
    """The last message of a request's conversation (``messages``, or Gemini's ``contents``)."""
    turns = body.get("messages") or body.get("contents") or [{}]
    last: dict[str, Any] = turns[-1]
    return last


def _chat_bodies(bodies: list[Any]) -> list[dict[str, Any]]:
    """The chat turns' requests (those asking for a JSON answer are left out), in order."""
    chat = []
    for body in bodies:
        last = last_turn(body)
        if not _structured(body) and last.get("role") == "user" and MARK in json.dumps(last):
            chat.append(body)
    return chat


async def bare_replay(
    vendor: str, base_url: str, bodies: list[dict[str, Any]], how: str
) -> tuple[list[float], float]:
    """Seconds per call of a separate process replaying ``bodies`` with ``vendor``'s bare SDK,
    through ``how`` (``HOWS``), and that process's CPU seconds per call."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(bodies, f)
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.turn_ratio", "--replay", vendor, how, base_url, f.name,
            stdout=asyncio.subprocess.PIPE, env=os.environ | {"PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        out, _ = await asyncio.wait_for(proc.communicate(), 300)
    finally:
        os.unlink(f.name)
    if proc.returncode != 0:
        raise RuntimeError("the bare replay failed")
    found = json.loads(out.decode().strip().splitlines()[-1])
    return list(found["times"]), float(found["cpu"])


async def _replay_child(vendor: str, how: str, base_url: str, bodies: list[dict[str, Any]]) -> None:
    send, close = _bare_sender(vendor, how, base_url)
    times = []
    warm = bodies[:WARMUP]  # the first requests once more, untimed
    try:
        for body in warm:
            await send(body)
        cpu = time.process_time()
        for body in bodies:
            started = time.perf_counter()
            await send(body)
            times.append(time.perf_counter() - started)
        cpu = (time.process_time() - cpu) / len(bodies)
    finally:
        await close()
    print(json.dumps({"times": times, "cpu": cpu}))


def _bare_sender(
    vendor: str, how: str, base_url: str
) -> tuple[Callable[[dict[str, Any]], Awaitable[object]], Callable[[], Awaitable[None]]]:
    """How the bare SDK (its stock transport, its own retries off) sends a body, and its close."""
    key = "bench-key-0123456789"
    if vendor == "anthropic":
        import anthropic

        a_client = anthropic.AsyncAnthropic(api_key=key, base_url=base_url, max_retries=0)
        known = set(inspect.signature(a_client.messages.create).parameters)

        async def anthropic_send(body: dict[str, Any]) -> object:
            if how == "post":
                return await a_client.post(
                    "/v1/messages", body=body, cast_to=anthropic.types.Message
                )
            extra = {k: v for k, v in body.items() if k not in known}
            args = {k: v for k, v in body.items() if k in known}
            return await a_client.messages.create(**args, extra_body=extra or None)

        return anthropic_send, a_client.close
    if vendor == "openai":
        import openai
        from openai.types.chat import ChatCompletion

        o_client = openai.AsyncOpenAI(api_key=key, base_url=base_url, max_retries=0)

        async def openai_send(body: dict[str, Any]) -> object:
            if how == "post":
                return await o_client.post("/chat/completions", body=body, cast_to=ChatCompletion)
            return await o_client.chat.completions.create(**body)

        return openai_send, o_client.close
    from google import genai
    from google.genai import types

    from tests.gemini_typed import typed_from_body

    g_client = genai.Client(
        vertexai=False,
        api_key=key,
        http_options=types.HttpOptions(
            base_url=base_url, retry_options=types.HttpRetryOptions(attempts=1)
        ),
    )
    model = VENDORS[vendor][1].partition(":")[2]

    async def gemini_send(body: dict[str, Any]) -> object:
        contents, config = typed_from_body(body)
        return await g_client.aio.models.generate_content(
            model=model, contents=contents, config=config
        )

    async def gemini_close() -> None:
        await g_client.aio.aclose()
        g_client.close()

    return gemini_send, gemini_close


async def measure(vendor: str) -> dict[str, float]:
    """The medians and ratios of one vendor's run: ``chorus_*`` and, per way of sending in
    ``HOWS``, ``{how}_p50_ms``, ``ratio_{how}``, ``{how}_cpu_ms`` and ``cpu_ratio_{how}``."""
    server = VENDORS[vendor][0]()
    async with server:
        server.default_reply = lambda body: "It is one more."
        with tempfile.TemporaryDirectory() as home:
            chorus, cpu = await chorus_turns(server, home, vendor)
        bodies = _chat_bodies(list(server.bodies))[WARMUP:]
        if len(bodies) != TURNS:
            raise RuntimeError(f"expected {TURNS} chat requests, found {len(bodies)}")
        bare = {
            how: await bare_replay(vendor, server.base_url, bodies, how) for how in HOWS[vendor]
        }
    found = {
        "chorus_p50_ms": statistics.median(chorus) * 1000,
        "chorus_p90_ms": _pct(chorus, 0.9) * 1000,
        "chorus_cpu_ms": cpu * 1000,
    }
    for how, (times, bare_cpu) in bare.items():
        found[f"{how}_p50_ms"] = statistics.median(times) * 1000
        found[f"ratio_{how}"] = statistics.median(chorus) / statistics.median(times)
        found[f"{how}_cpu_ms"] = bare_cpu * 1000
        found[f"cpu_ratio_{how}"] = cpu / bare_cpu
    return found


async def main() -> list[str]:
    lines = [
        "## A whole console turn against the bare SDK replaying its requests, per vendor",
        "",
        "| vendor | whole `chorus chat` turn p50 (p90) | its CPU per turn | bare `create` p50, "
        "CPU per call | Chorus / `create`, wall (CPU) | bare `post` p50, CPU per call "
        "| Chorus / `post`, wall (CPU) |",
        "|---|---|---|---|---|---|---|",
    ]
    for vendor in VENDORS:
        try:
            r = await measure(vendor)
        except Exception as exc:
            lines.append(f"| {vendor} | not measured: {exc!r} | | | | | |")
            continue
        cells = [
            f"{r['chorus_p50_ms']:.2f} ms ({r['chorus_p90_ms']:.2f})",
            f"{r['chorus_cpu_ms']:.2f} ms",
        ]
        for how in ("create", "post"):
            if how not in HOWS[vendor]:
                cells += ["(no such call)", ""]
                continue
            cells += [
                f"{r[f'{how}_p50_ms']:.2f} ms, {r[f'{how}_cpu_ms']:.2f} ms",
                f"{r[f'ratio_{how}']:.2f} ({r[f'cpu_ratio_{how}']:.2f})",
            ]
        lines.append(f"| {vendor} | " + " | ".join(cells) + " |")
    return lines


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--replay":
        replayed = json.loads(Path(sys.argv[5]).read_text())
        asyncio.run(_replay_child(sys.argv[2], sys.argv[3], sys.argv[4], replayed))
    else:
        print("\n".join(asyncio.run(main())))
