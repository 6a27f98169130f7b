"""The vendor-call benchmark (bench/vendor_call.py) on a short run: the variants it compares
send the same request and read the same answer from the same loopback API, whole and streamed,
and the interleaved blocks are measured for each. No timing is asserted; the figures go in
BENCHMARKS.md."""

from __future__ import annotations

import pytest

from bench import vendor_call
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.openai_server import OpenAIServer


@pytest.mark.parametrize("vendor", vendor_call.VENDORS)
async def test_both_variants_read_the_same_answers(vendor: str) -> None:
    server = AnthropicServer() if vendor == "anthropic" else OpenAIServer()
    words = " ".join(f"w{n}" for n in range(vendor_call.STREAM_WORDS))
    async with server:
        server.default_reply = lambda body: words if body.get("stream") else "ok"
        turn = vendor_call.request()
        for make, expected in ((vendor_call._caller, "ok"), (vendor_call._streamer, words)):
            for variant in vendor_call.VARIANTS:
                call, close = make(vendor, variant, server.base_url)
                try:
                    answer = await call(turn)
                finally:
                    await close()
                assert answer.text == expected, (make.__name__, variant)
        whole = [body for body in server.bodies if not body.get("stream")]
        streamed = [body for body in server.bodies if body.get("stream")]
        assert len(whole) == len(streamed) == 3
        assert all(body == whole[0] for body in whole)  # the same request every way
        assert all(body == streamed[0] for body in streamed)


@pytest.mark.e2e
async def test_the_streamed_blocks_are_measured_for_every_variant(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(vendor_call, "BLOCK", 3)
    monkeypatch.setattr(vendor_call, "BLOCKS", 2)
    monkeypatch.setattr(vendor_call, "WARMUP", 1)
    spent = await vendor_call.measure("openai", streamed=True)
    assert {variant: len(blocks) for variant, blocks in spent.items()} == dict.fromkeys(
        vendor_call.VARIANTS, 2
    )
    assert all(cpu > 0 for blocks in spent.values() for cpu in blocks)
