"""Client CPU of one vendor SDK call, on httpx2's stock transport and on Chorus's.

Why: with an instant model, a worker's CPU per answered message is mostly the vendor call
(building the request, the SDK's own work, HTTP/1.1 through httpx2, parsing the answer), and
the scale-out benchmark cannot tell that part from the framework's. Here Chorus's provider
(``complete``: ``build_params``, the real SDK, ``parse_message``) sends a turn at the
40-message history limit (about 10 KB: two system blocks, two tools, alternating turns) to the
loopback API in another process, and only this process's CPU is counted. Each round times ``CALLS`` calls per variant, the variants taking
turns so that a change of the machine's speed hits both; the median over the rounds is
reported, and the median of the rounds' ratios.

The variants: ``stock`` is the SDK's default client; ``chorus`` is the client ``from_settings``
builds (``bot.llm.netio.sdk_http_client``: the SDK's default client class on the asyncio
network backend). Both run on uvloop, as ``chorus run`` does where it is installed.

    python -m bench.vendor_call        # prints a Markdown table
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anthropic
import openai
import uvloop

from bot.llm.anthropic import AnthropicProvider
from bot.llm.base import SDKProvider
from bot.llm.netio import sdk_http_client
from bot.llm.openai import OpenAIProvider
from bot.llm.types import LLMRequest, Message, TextPart, ToolSpec
from bot.resilience import RetryPolicy

ROOT = Path(__file__).resolve().parent.parent
CALLS, ROUNDS, WARMUP = 1000, 5, 50
VENDORS = ("anthropic", "openai")
VARIANTS = ("stock", "chorus")


def request() -> LLMRequest:
    """A turn at the 40-message history limit: two system blocks, two tools, 41 turns."""
    system = ("You are Chorus, a helpful assistant in a community chat. " * 40).strip()
    turns = tuple(
        Message(
            role="user" if n % 2 == 0 else "assistant",
            parts=(TextPart(text=f"message {n}: " + "a line of chat about the stream " * 4),),
        )
        for n in range(41)
    )
    tools = tuple(
        ToolSpec(
            name=name,
            description=f"{name}: looks something up for the user. " * 3,
            parameters={
                "type": "object",
                "properties": {"query": {"type": "string", "description": "what to look up"}},
                "required": ["query"],
            },
        )
        for name in ("web_search", "recall")
    )
    half = len(system) // 2
    return LLMRequest(
        model="bench-model",
        system=(TextPart(text=system[:half]), TextPart(text=system[half:])),
        messages=turns,
        tools=tools,
    )


async def _serve(vendor: str) -> None:
    """Child process: the loopback API, answering "ok" at once until killed."""
    from tests.loopback.anthropic_server import AnthropicServer
    from tests.loopback.openai_server import OpenAIServer

    server = AnthropicServer() if vendor == "anthropic" else OpenAIServer()
    async with server:

        def reply(body: Any) -> str:
            server.requests.clear()  # nothing is inspected: keep the server's memory flat
            return "ok"

        server.default_reply = reply
        print(server.base_url, flush=True)
        await asyncio.Event().wait()


def _provider(
    vendor: str, variant: str, base_url: str
) -> tuple[SDKProvider, Callable[[], Awaitable[None]]]:
    """The provider as ``from_settings`` builds it, on the SDK's stock client or Chorus's."""
    if vendor == "anthropic":
        a_http = sdk_http_client(anthropic.DefaultAsyncHttpxClient) if variant == "chorus" else None
        a_client = anthropic.AsyncAnthropic(
            api_key="bench", base_url=base_url, max_retries=0, http_client=a_http
        )
        provider = AnthropicProvider(a_client, base_url=base_url, retry=RetryPolicy(max_retries=0))
        return provider, a_client.close
    o_http = sdk_http_client(openai.DefaultAsyncHttpxClient) if variant == "chorus" else None
    o_client = openai.AsyncOpenAI(
        api_key="bench", base_url=base_url, max_retries=0, http_client=o_http
    )
    return OpenAIProvider(
        o_client, base_url=base_url, retry=RetryPolicy(max_retries=0)
    ), o_client.close


async def _calls(vendor: str, variant: str, base_url: str) -> float:
    """CPU microseconds of this process per call, over ``CALLS`` calls after a warm-up."""
    provider, close = _provider(vendor, variant, base_url)
    turn = request()
    try:
        for _ in range(WARMUP):
            await provider.complete(turn)
        started = time.process_time()
        for _ in range(CALLS):
            await provider.complete(turn)
        return (time.process_time() - started) / CALLS * 1e6
    finally:
        await close()


async def measure(vendor: str) -> dict[str, list[float]]:
    server = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.vendor_call",
        "--serve",
        vendor,
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
    )
    assert server.stdout is not None
    try:
        base_url = (await server.stdout.readline()).decode().strip()
        spent: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for _ in range(ROUNDS):
            for variant in VARIANTS:
                spent[variant].append(await _calls(vendor, variant, base_url))
        return spent
    finally:
        server.kill()
        await server.wait()


async def main() -> list[str]:
    lines = [
        "## The vendor call: client CPU per SDK call, stock transport against Chorus's",
        "",
        f"| vendor | stock (median of {ROUNDS} x {CALLS}) | Chorus's | Chorus's / stock, "
        "median of the rounds (range) |",
        "|---|---|---|---|",
    ]
    for vendor in VENDORS:
        try:
            spent = await measure(vendor)
        except Exception as exc:
            lines.append(f"| {vendor} | not measured: {exc!r} | | |")
            continue
        ratios = sorted(c / s for s, c in zip(spent["stock"], spent["chorus"], strict=True))
        lines.append(
            f"| {vendor} | {statistics.median(spent['stock']):.0f} µs "
            f"| {statistics.median(spent['chorus']):.0f} µs "
            f"| {statistics.median(ratios):.2f} ({ratios[0]:.2f} to {ratios[-1]:.2f}) |"
        )
    return lines


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        asyncio.run(_serve(sys.argv[2]))
    else:
        print("\n".join(uvloop.run(main())))
