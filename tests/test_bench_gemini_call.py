"""The Gemini call benchmark (bench/gemini_call.py) on a short run: the three variants read the
same answer from the same loopback API, whole and streamed, from the same request, and the
interleaved blocks are measured for each. No timing is asserted; the figures go in
BENCHMARKS.md."""

from __future__ import annotations

import pytest

from bench import gemini_call, vendor_call
from tests.loopback.gemini_server import GeminiServer


async def test_every_variant_reads_the_same_answers() -> None:
    server = GeminiServer()
    words = " ".join(f"w{n}" for n in range(vendor_call.STREAM_WORDS))
    async with server:
        server.default_reply = lambda body: words
        turn = vendor_call.request()
        for streamed in (False, True):
            for variant in gemini_call.VARIANTS:
                call, provider = gemini_call.caller(variant, server.base_url, streamed=streamed)
                try:
                    answer = await call(turn)
                finally:
                    await provider.aclose()
                assert answer.text == words, (streamed, variant)
        paths = [rec.path.rsplit(":", 1)[-1] for rec in server.requests]
        assert paths == ["generateContent"] * 3 + ["streamGenerateContent"] * 3
        assert all(body == server.bodies[0] for body in server.bodies)


@pytest.mark.e2e
async def test_the_blocks_are_measured_for_every_variant(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vendor_call, "BLOCK", 3)
    monkeypatch.setattr(vendor_call, "BLOCKS", 2)
    monkeypatch.setattr(vendor_call, "WARMUP", 1)
    spent = await gemini_call.measure(streamed=True)
    assert {variant: len(blocks) for variant, blocks in spent.items()} == dict.fromkeys(
        gemini_call.VARIANTS, 2
    )
    assert all(cpu > 0 for blocks in spent.values() for cpu in blocks)
