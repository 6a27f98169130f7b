"""Client CPU of one model call: the answer read into the SDK's own types, or off its JSON.

Why: with an instant model, a worker's CPU per answered message is mostly the vendor call, and
Chorus reads the Anthropic and OpenAI answers itself (``bot.llm.anthropic_parse``,
``bot.llm.openai_parse``, ``bot.llm.sse``) only for what that saves against the SDK building its
pydantic types. Here a turn at the 40-message history limit (about 10 KB: two system blocks, two
tools, alternating turns) goes through the real SDK on its ``DefaultAioHttpClient``, as
``from_settings`` builds it, to the loopback API in another process, and only this process's CPU
is counted. The variants run in interleaved blocks of ``BLOCK`` calls, so that a change of the
machine's speed hits both; the medians of the blocks are reported, and the median of the
blocks' ratios.

- ``create``: the SDK's documented call, ``messages.create`` / ``chat.completions.create`` with
  the provider's parameters, the answer (or each streamed event) read into the SDK's types;
- ``sdk``: the provider's request sent the way the provider sends it (Anthropic's body encoded
  once and posted, OpenAI's through the client's ``post``, neither walked by ``create``), the
  answer read into the SDK's own types: what reading the JSON saves on its own;
- ``chorus``: ``provider.complete`` / ``provider.stream`` as they are.

Of the SDK's types only the text is kept, less than the provider's fold reads, so the ratios err
towards the SDK.

The second table streams a ``STREAM_WORDS``-word answer (one SSE event per text delta). Both run
on uvloop, as ``chorus run`` does where it is installed.

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
from anthropic.types import RawMessageStreamEvent
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from bot.llm.anthropic import AnthropicProvider, build_params, encode_body
from bot.llm.anthropic import sdk_client as anthropic_client
from bot.llm.base import Provider
from bot.llm.openai import OpenAIProvider, sdk_client
from bot.llm.types import LLMRequest, LLMResponse, Message, TextPart, ToolSpec
from bot.resilience import RetryPolicy

ROOT = Path(__file__).resolve().parent.parent
BLOCK, BLOCKS, WARMUP = 200, 15, 50
VENDORS = ("anthropic", "openai")
VARIANTS = ("create", "sdk", "chorus")
STREAM_WORDS = 100


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
        long = " ".join(f"word{n}" for n in range(STREAM_WORDS))

        def reply(body: Any) -> str:
            server.requests.clear()  # nothing is inspected: keep the server's memory flat
            return long if body.get("stream") else "ok"

        server.default_reply = reply
        print(server.base_url, flush=True)
        await asyncio.Event().wait()


Call = Callable[[LLMRequest], Awaitable[LLMResponse]]


def _provider(vendor: str, base_url: str) -> AnthropicProvider | OpenAIProvider:
    """The provider over a client as ``from_settings`` builds it; closed by the caller."""
    retry = RetryPolicy(max_retries=0)
    if vendor == "anthropic":
        return AnthropicProvider(
            anthropic_client("bench", base_url, 60), base_url=base_url, retry=retry
        )
    return OpenAIProvider(sdk_client("bench", base_url, 60), base_url=base_url, retry=retry)


def _caller(vendor: str, variant: str, base_url: str) -> tuple[Call, Callable[[], Awaitable[None]]]:
    """One call as ``variant`` makes it (the module's docstring says how)."""
    provider = _provider(vendor, base_url)
    if variant == "chorus":
        return provider.complete, provider.client.close

    async def sdk(turn: LLMRequest) -> LLMResponse:
        if isinstance(provider, AnthropicProvider) and variant == "create":
            message = await provider.client.messages.create(**build_params(turn))
            text = "".join(
                b.text for b in message.content if isinstance(b, anthropic.types.TextBlock)
            )
        elif isinstance(provider, AnthropicProvider):
            message = await provider.client.post(
                "/v1/messages",
                content=encode_body(build_params(turn), stream=False),
                cast_to=anthropic.types.Message,
            )
            text = "".join(
                b.text for b in message.content if isinstance(b, anthropic.types.TextBlock)
            )
        elif variant == "create":
            completion = await provider.client.chat.completions.create(
                **provider.request_body(turn)
            )
            text = completion.choices[0].message.content or ""
        else:
            completion = await provider.client.post(
                "/chat/completions", body=provider.request_body(turn), cast_to=ChatCompletion
            )
            text = completion.choices[0].message.content or ""
        return LLMResponse(parts=(TextPart(text=text),), stop_reason="end_turn")

    return sdk, provider.client.close


def _streamer(
    vendor: str, variant: str, base_url: str
) -> tuple[Call, Callable[[], Awaitable[None]]]:
    """One streamed answer read to its end, as ``variant`` reads it."""
    provider = _provider(vendor, base_url)

    async def chorus(turn: LLMRequest) -> LLMResponse:
        return await streamed_answer(provider, turn)

    async def sdk(turn: LLMRequest) -> LLMResponse:
        text: list[str] = []
        stream: Any
        if isinstance(provider, AnthropicProvider):
            if variant == "create":
                stream = await provider.client.messages.create(**build_params(turn), stream=True)
            else:
                stream = await provider.client.post(
                    "/v1/messages",
                    content=encode_body(build_params(turn), stream=True),
                    cast_to=anthropic.types.Message,
                    stream=True,
                    stream_cls=anthropic.AsyncStream[RawMessageStreamEvent],
                )
        else:
            body = {**provider.request_body(turn), "stream": True}
            body["stream_options"] = {"include_usage": True}
            if variant == "create":
                stream = await provider.client.chat.completions.create(**body)
            else:
                stream = await provider.client.post(
                    "/chat/completions",
                    body=body,
                    cast_to=ChatCompletion,
                    stream=True,
                    stream_cls=openai.AsyncStream[ChatCompletionChunk],
                )
        async for event in stream:
            if isinstance(provider, OpenAIProvider):
                text.extend(c.delta.content or "" for c in event.choices if c.index == 0)
            elif event.type == "content_block_delta" and event.delta.type == "text_delta":
                text.append(event.delta.text)
        return LLMResponse(parts=(TextPart(text="".join(text)),), stop_reason="end_turn")

    return (chorus if variant == "chorus" else sdk), provider.client.close


async def streamed_answer(provider: Provider, turn: LLMRequest) -> LLMResponse:
    """``provider``'s stream for ``turn`` read to its end: the final response."""
    final: Any = None
    async for event in provider.stream(turn):
        final = event
    assert isinstance(final, LLMResponse)
    return final


async def interleaved(calls: dict[str, Call]) -> dict[str, list[float]]:
    """CPU microseconds of this process per call, per block of ``BLOCK`` calls of the turn,
    after ``WARMUP`` calls each; the variants' blocks interleaved, so that a change of the
    machine's speed hits them alike."""
    turn = request()
    for call in calls.values():
        for _ in range(WARMUP):
            await call(turn)
    spent: dict[str, list[float]] = {variant: [] for variant in calls}
    for _ in range(BLOCKS):
        for variant, call in calls.items():
            started = time.process_time()
            for _ in range(BLOCK):
                await call(turn)
            spent[variant].append((time.process_time() - started) / BLOCK * 1e6)
    return spent


async def measure(vendor: str, *, streamed: bool = False) -> dict[str, list[float]]:
    """CPU microseconds of this process per call (``streamed``: per streamed answer), per
    block of ``BLOCK`` calls, the variants' blocks interleaved (a change of the machine's speed
    hits both alike)."""
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
    closers: list[Callable[[], Awaitable[None]]] = []
    try:
        base_url = (await server.stdout.readline()).decode().strip()
        calls: dict[str, Call] = {}
        for variant in VARIANTS:
            make = _streamer if streamed else _caller
            calls[variant], close = make(vendor, variant, base_url)
            closers.append(close)
        return await interleaved(calls)
    finally:
        for close in closers:
            await close()
        server.kill()
        await server.wait()


async def _rows(streamed: bool) -> list[str]:
    rows = []
    for vendor in VENDORS:
        try:
            spent = await measure(vendor, streamed=streamed)
        except Exception as exc:
            rows.append(f"| {vendor} | not measured: {exc!r} | | | | |")
            continue
        rows.append(ratio_row(vendor, spent, VARIANTS))
    return rows


def ratio_header(first: str, variants: tuple[str, ...]) -> list[str]:
    """The header of a table of ``ratio_row``s, ``first`` naming its first column; the last
    variant is compared with each other one."""
    *others, last = variants
    return [
        f"| {first} | {variants[0]} (median of {BLOCKS} blocks of {BLOCK}) | "
        + " | ".join(variants[1:])
        + f" | {last} / {others[0]}, median of the blocks (range) | "
        + " | ".join(f"{last} / {other}" for other in others[1:])
        + " |",
        "|---" * (1 + len(variants) + len(others)) + "|",
    ]


def ratio_row(label: str, spent: dict[str, list[float]], variants: tuple[str, ...]) -> str:
    """A table row: each variant's median, then the median (range) of the blocks' ratios of the
    last variant to each other one."""
    *others, last = variants
    cells = [f"{statistics.median(spent[v]):,.0f} µs" for v in variants]
    for other in others:
        ratios = sorted(n / b for b, n in zip(spent[other], spent[last], strict=True))
        cells.append(f"{statistics.median(ratios):.2f} ({ratios[0]:.2f} to {ratios[-1]:.2f})")
    return f"| {label} | " + " | ".join(cells) + " |"


async def main() -> list[str]:
    header = ratio_header("vendor", VARIANTS)
    return [
        "## The vendor call: client CPU per model call on the SDK's aiohttp client, the SDK's "
        "documented call (create), the provider's request with the SDK's answer types (sdk), "
        "and the provider (chorus)",
        "",
        *header,
        *await _rows(streamed=False),
        "",
        f"## A streamed answer of {STREAM_WORDS} text deltas: client CPU per answer, the "
        "events built into the SDK's types (create, sdk) or read off their JSON (chorus)",
        "",
        *header,
        *await _rows(streamed=True),
    ]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        asyncio.run(_serve(sys.argv[2]))
    else:
        print("\n".join(uvloop.run(main())))
