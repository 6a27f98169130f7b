"""Client CPU of one Gemini call: the SDK's typed request and answer, against Chorus's JSON.

Why: ``bot.llm.gemini_wire`` writes the request's REST JSON itself and hands it to the public
``generate_content`` in ``HttpOptions.extra_body``, and ``bot.llm.gemini_parse`` folds a whole
answer off its JSON (``should_return_http_response``); both stay only for what they save
against the SDK's own typed path. As in ``bench.vendor_call`` (whose turn at the 40-message
history limit this uses): the loopback API runs in another process, only this process's CPU is
counted, and the variants run in interleaved blocks. Three variants, all on the SDK's own
aiohttp session:

- ``typed``: the documented call, ``generate_content(model, contents, config)`` with the SDK's
  ``Content`` and ``GenerateContentConfig`` (``tests/gemini_typed.py``), the answer read into its
  ``GenerateContentResponse`` and its text kept;
- ``sdk answer``: Chorus's request (``extra_body``), the answer read into the SDK's type: what
  ``gemini_parse`` saves on its own;
- ``chorus``: ``GeminiProvider.complete`` / ``stream`` as they are. A stream's chunks arrive as
  the SDK's types whatever the request (google-genai offers no raw stream), so there the last
  two differ only by the fold.

    python -m bench.gemini_call        # prints a Markdown table
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import uvloop
from google.genai import types

from bench.vendor_call import (
    ROOT,
    STREAM_WORDS,
    interleaved,
    ratio_header,
    ratio_row,
    streamed_answer,
)
from bot.llm import gemini_wire
from bot.llm.gemini import GeminiProvider
from bot.llm.types import LLMRequest, LLMResponse, TextPart
from bot.resilience import RetryPolicy
from bot.settings import LLMSettings
from tests.gemini_typed import sdk_request

Call = Callable[[LLMRequest], Awaitable[LLMResponse]]
VARIANTS = ("typed", "sdk answer", "chorus")


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


def caller(variant: str, base_url: str, *, streamed: bool) -> tuple[Call, GeminiProvider]:
    """One call, whole or streamed, as ``variant`` makes it; the provider (and its client, as
    ``from_settings`` builds them) to be closed by the caller."""
    settings = LLMSettings(gemini_api_key="bench", gemini_base_url=base_url)  # type: ignore[arg-type]
    provider = GeminiProvider.from_settings(settings, retry=RetryPolicy(max_retries=0))
    models = provider.client.aio.models

    async def chorus(turn: LLMRequest) -> LLMResponse:
        if streamed:
            return await streamed_answer(provider, turn)
        return await provider.complete(turn)

    async def sdk(turn: LLMRequest) -> LLMResponse:
        config: types.GenerateContentConfigOrDict
        if variant == "typed":
            contents, config = sdk_request(turn)
        else:
            contents = [gemini_wire.STAND_IN]
            config = gemini_wire.call_config(gemini_wire.request_body(turn), whole=False)
        if streamed:
            chunks = await models.generate_content_stream(
                model=turn.model, contents=contents, config=config
            )
            text = "".join([chunk.text or "" async for chunk in chunks])
        else:
            answer = await models.generate_content(
                model=turn.model, contents=contents, config=config
            )
            text = answer.text or ""
        return LLMResponse(parts=(TextPart(text=text),), stop_reason="end_turn")

    return (chorus if variant == "chorus" else sdk), provider


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
            rows.append(ratio_row(kind, await measure(streamed=streamed), VARIANTS))
        except Exception as exc:
            rows.append(f"| {kind} | not measured: {exc!r} | | | | |")
    return [
        f"## A Gemini answer of {STREAM_WORDS} words: client CPU per call, the SDK's typed "
        "call against Chorus's JSON",
        "",
        *ratio_header("answer", VARIANTS),
        *rows,
    ]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        asyncio.run(_serve())
    else:
        print("\n".join(uvloop.run(main())))
