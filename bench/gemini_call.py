"""Client CPU of one Gemini call, its answer read into the SDK's objects (before) or off its JSON.

Why: until issue 20's eighth pass the Gemini provider read every answer as ``generate_content``
does, into google-genai's pydantic ``GenerateContentResponse``, and a stream chunk by chunk the
same way, after the SDK had loaded each chunk's JSON, dumped it back to text and loaded it
again (``async_request_streamed``). Now ``bot.llm.gemini_parse`` folds the JSON itself. The
request side is the same in both (``bot.llm.gemini_wire.request_body``, sent through the SDK
client's request layer), so the difference is the reading alone. As in ``bench.vendor_call``
(whose turn at the 40-message history limit this uses): the loopback API runs in another
process, only this process's CPU is counted, and the variants run in interleaved blocks.

- ``before``: ``async_request`` / ``async_request_streamed`` and the SDK's own reading of each
  answer or chunk (``_GenerateContentResponse_from_mldev`` and ``_from_response``), of which
  only the text is kept (less than the old fold did, so the ratio errs towards ``before``);
- ``now``: ``GeminiProvider.complete`` / ``stream`` as they are.

    python -m bench.gemini_call        # prints a Markdown table
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import uvloop
from google.genai import types
from google.genai.models import _GenerateContentResponse_from_mldev

from bench.vendor_call import (
    ROOT,
    STREAM_WORDS,
    VARIANTS,
    interleaved,
    ratio_header,
    ratio_row,
    streamed_answer,
)
from bot.llm.gemini import GeminiProvider
from bot.llm.gemini_wire import model_path, request_body
from bot.llm.types import LLMRequest, LLMResponse, TextPart
from bot.resilience import RetryPolicy
from bot.settings import LLMSettings

Call = Callable[[LLMRequest], Awaitable[LLMResponse]]


async def _serve() -> None:
    """Child process: the loopback Gemini API, answering ``STREAM_WORDS`` words at once until
    killed (a stream sends them a word per chunk)."""
    from tests.loopback.gemini_server import GeminiServer

    server = GeminiServer()
    async with server:
        words = " ".join(f"word{n}" for n in range(STREAM_WORDS))

        def reply(body: Any) -> str:
            server.requests.clear()  # nothing is inspected: keep the server's memory flat
            return words

        server.default_reply = reply
        print(server.base_url, flush=True)
        await asyncio.Event().wait()


def _sdk_text(payload: dict[str, Any]) -> str:
    fields = _GenerateContentResponse_from_mldev(payload, None, None)
    response = types.GenerateContentResponse._from_response(response=fields, kwargs={})
    content = response.candidates[0].content if response.candidates else None
    return "".join(p.text or "" for p in (content.parts if content else None) or [])


def caller(variant: str, base_url: str, *, streamed: bool) -> tuple[Call, GeminiProvider]:
    """One call, whole or streamed, as the provider made it before this pass or makes it now;
    the provider (and its client) as ``from_settings`` builds them, to be closed by the caller."""
    settings = LLMSettings(gemini_api_key="bench", gemini_base_url=base_url)  # type: ignore[arg-type]
    provider = GeminiProvider.from_settings(settings, retry=RetryPolicy(max_retries=0))
    api = provider._client.aio._api_client

    async def now(turn: LLMRequest) -> LLMResponse:
        if streamed:
            return await streamed_answer(provider, turn)
        return await provider.complete(turn)

    async def before(turn: LLMRequest) -> LLMResponse:
        path = model_path(turn.model)
        if streamed:
            stream = await api.async_request_streamed(
                "post", f"{path}:streamGenerateContent?alt=sse", request_body(turn), None
            )
            text = "".join([_sdk_text(json.loads(chunk.body)) async for chunk in stream])
        else:
            answer = await api.async_request("post", f"{path}:generateContent", request_body(turn))
            text = _sdk_text(json.loads(answer.body or "{}"))
        return LLMResponse(parts=(TextPart(text=text),), stop_reason="end_turn")

    return (now if variant == "now" else before), provider


async def measure(*, streamed: bool) -> dict[str, list[float]]:
    """CPU microseconds of this process per call, per block (``vendor_call.interleaved``)."""
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.gemini_call", "--serve",
        stdout=asyncio.subprocess.PIPE, cwd=ROOT,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert server.stdout is not None
    providers: list[GeminiProvider] = []
    try:
        base_url = (await server.stdout.readline()).decode().strip()
        calls: dict[str, Call] = {}
        for variant in VARIANTS:
            calls[variant], provider = caller(variant, base_url, streamed=streamed)
            providers.append(provider)
        return await interleaved(calls)
    finally:
        for provider in providers:
            await provider.aclose()
        server.kill()
        await server.wait()


async def main() -> list[str]:
    rows = []
    for streamed in (False, True):
        kind = f"streamed, {STREAM_WORDS} chunks" if streamed else "whole"
        try:
            spent = await measure(streamed=streamed)
        except Exception as exc:
            rows.append(f"| {kind} | not measured: {exc!r} | | |")
            continue
        rows.append(ratio_row(kind, spent))
    return [
        f"## A Gemini answer of {STREAM_WORDS} words: client CPU per call, read into the SDK's "
        "objects (before) or off its JSON (now)",
        "",
        *ratio_header("answer"),
        *rows,
    ]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        asyncio.run(_serve())
    else:
        print("\n".join(uvloop.run(main())))
