"""Client CPU of one model call as Chorus made it before issue 20's fifth pass and now.

Why: with an instant model, a worker's CPU per answered message is mostly the vendor call
(building the request, the SDK's own work, HTTP/1.1 through httpx2, parsing the answer), and
the scale-out benchmark cannot tell that part from the framework's. Here a turn at the
40-message history limit (about 10 KB: two system blocks, two tools, alternating turns) goes
through the real SDK to the loopback API in another process, and only this process's CPU is
counted. The variants run in interleaved blocks of ``BLOCK`` calls, so that a change of the
machine's speed hits both; the medians of the blocks are reported, and the median of the
blocks' ratios.

- ``before``: the SDK's stock client (httpx2 on anyio); Anthropic through ``messages.create``
  (which deep-copies the body), OpenAI through the client's ``post`` with the provider's body
  (which already skipped ``create``'s parameter transform); both answers built into the SDK's
  types.
- ``now``: the provider as ``from_settings`` builds it: the client on Chorus's own HTTP/1.1
  transport (``bot.llm.transport``), Anthropic's body encoded once and posted
  (``bot.llm.anthropic._create``) and its answer read off the JSON
  (``bot.llm.anthropic_parse.parse_message``).

A second table streams a 100-word answer (``STREAM_WORDS`` text deltas, one SSE event each),
both variants on Chorus's transport, so that it shows the reading of the events alone:

- ``before``: the provider's stream until the seventh pass, ``post`` with the SDK's
  ``AsyncStream`` building its pydantic event type for every event (the fold kept to the text
  deltas, less than the provider did, so the ratio errs towards ``before``);
- ``now``: ``provider.stream``, the events read off their JSON (``bot.llm.sse``).

Both run on uvloop, as ``chorus run`` does where it is installed.

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

from bot.llm.anthropic import _REQUEST_OPTIONS, AnthropicProvider, build_params, encode_body
from bot.llm.base import Provider
from bot.llm.clients import sdk_http_client
from bot.llm.openai import OpenAIProvider, sdk_client
from bot.llm.types import LLMRequest, LLMResponse, Message, TextPart, ToolSpec
from bot.resilience import RetryPolicy

ROOT = Path(__file__).resolve().parent.parent
BLOCK, BLOCKS, WARMUP = 200, 15, 50
VENDORS = ("anthropic", "openai")
VARIANTS = ("before", "now")
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


def _caller(vendor: str, variant: str, base_url: str) -> tuple[Call, Callable[[], Awaitable[None]]]:
    """One model call as Chorus made it before this pass (``before``) or makes it now."""
    if vendor == "anthropic":
        a_http = sdk_http_client(anthropic.DefaultAioHttpClient) if variant == "now" else None
        a_client = anthropic.AsyncAnthropic(
            api_key="bench", base_url=base_url, max_retries=0, timeout=60, http_client=a_http
        )
        if variant == "before":  # the provider's call until this pass: messages.create

            async def create(turn: LLMRequest) -> LLMResponse:
                message = await a_client.messages.create(**build_params(turn))
                text = "".join(
                    b.text for b in message.content if isinstance(b, anthropic.types.TextBlock)
                )
                return LLMResponse(parts=(TextPart(text=text),), stop_reason="end_turn")

            return create, a_client.close
        provider = AnthropicProvider(a_client, base_url=base_url, retry=RetryPolicy(max_retries=0))
        return provider.complete, a_client.close
    o_client = (
        sdk_client("bench", base_url, 60)  # as from_settings builds it
        if variant == "now"
        else openai.AsyncOpenAI(api_key="bench", base_url=base_url, max_retries=0, timeout=60)
    )
    chat = OpenAIProvider(o_client, base_url=base_url, retry=RetryPolicy(max_retries=0))
    if variant == "before":  # until this pass: the provider's body through ``post``, the
        # answer built into the SDK's ChatCompletion

        async def post(turn: LLMRequest) -> LLMResponse:
            completion = await o_client.post(
                "/chat/completions", body=chat._params(turn), cast_to=ChatCompletion
            )
            text = completion.choices[0].message.content or ""
            return LLMResponse(parts=(TextPart(text=text),), stop_reason="end_turn")

        return post, o_client.close
    return chat.complete, o_client.close


def _streamer(
    vendor: str, variant: str, base_url: str
) -> tuple[Call, Callable[[], Awaitable[None]]]:
    """One streamed answer read to its end, its events built into the SDK's types
    (``before``) or read off their JSON (``now``); both on Chorus's transport."""
    a_client: anthropic.AsyncAnthropic | None = None
    if vendor == "anthropic":
        a_client = anthropic.AsyncAnthropic(
            api_key="bench",
            base_url=base_url,
            max_retries=0,
            timeout=60,
            http_client=sdk_http_client(anthropic.DefaultAioHttpClient),
        )
        provider: AnthropicProvider | OpenAIProvider = AnthropicProvider(
            a_client, base_url=base_url, retry=RetryPolicy(max_retries=0)
        )
        close = a_client.close
    else:
        o_client = sdk_client("bench", base_url, 60)
        provider = OpenAIProvider(o_client, base_url=base_url, retry=RetryPolicy(max_retries=0))
        close = o_client.close

    async def now(turn: LLMRequest) -> LLMResponse:
        return await streamed_answer(provider, turn)

    async def before(turn: LLMRequest) -> LLMResponse:
        text: list[str] = []
        if a_client is not None:
            stream: Any = await a_client.post(
                "/v1/messages",
                content=encode_body(build_params(turn), stream=True),
                cast_to=anthropic.types.Message,
                options=_REQUEST_OPTIONS,
                stream=True,
                stream_cls=anthropic.AsyncStream[RawMessageStreamEvent],
            )
            async for event in stream:
                if event.type == "content_block_delta" and event.delta.type == "text_delta":
                    text.append(event.delta.text)
        else:
            assert isinstance(provider, OpenAIProvider)
            body = {**provider._params(turn), "stream": True}
            body["stream_options"] = {"include_usage": True}
            stream = await provider.client.post(
                "/chat/completions",
                body=body,
                cast_to=ChatCompletion,
                stream=True,
                stream_cls=openai.AsyncStream[ChatCompletionChunk],
            )
            async for chunk in stream:
                text.extend(c.delta.content or "" for c in chunk.choices if c.index == 0)
        return LLMResponse(parts=(TextPart(text="".join(text)),), stop_reason="end_turn")

    return (now if variant == "now" else before), close


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
            rows.append(f"| {vendor} | not measured: {exc!r} | | |")
            continue
        rows.append(ratio_row(vendor, spent))
    return rows


def ratio_header(first: str) -> list[str]:
    """The header of a table of ``ratio_row``s, ``first`` naming its first column."""
    return [
        f"| {first} | before (median of {BLOCKS} blocks of {BLOCK}) | now | now / before, "
        "median of the blocks (range) |",
        "|---|---|---|---|",
    ]


def ratio_row(label: str, spent: dict[str, list[float]]) -> str:
    """A table row: the variants' medians, and the median (range) of the blocks' ratios."""
    ratios = sorted(n / b for b, n in zip(spent["before"], spent["now"], strict=True))
    return (
        f"| {label} | {statistics.median(spent['before']):.0f} µs "
        f"| {statistics.median(spent['now']):.0f} µs "
        f"| {statistics.median(ratios):.2f} ({ratios[0]:.2f} to {ratios[-1]:.2f}) |"
    )


async def main() -> list[str]:
    header = ratio_header("vendor")
    return [
        "## The vendor call: client CPU per model call, before this pass and now",
        "",
        *header,
        *await _rows(streamed=False),
        "",
        f"## A streamed answer of {STREAM_WORDS} text deltas: client CPU per answer, the "
        "events built into the SDK's types (before) or read off their JSON (now)",
        "",
        *header,
        *await _rows(streamed=True),
    ]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        asyncio.run(_serve(sys.argv[2]))
    else:
        print("\n".join(uvloop.run(main())))
