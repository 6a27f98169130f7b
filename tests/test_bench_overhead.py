"""The overhead benchmark (bench/overhead.py) on a short run, per vendor: Chorus answers through
the whole pipeline, and the bare SDK replays the very requests Chorus sent (the server receives
the same JSON twice). No timing is asserted; the figures go in BENCHMARKS.md."""

from __future__ import annotations

import pytest

from bench import overhead
from bench.startup import VENDORS


@pytest.mark.parametrize("vendor", list(VENDORS))
async def test_the_bare_sdk_replays_exactly_the_requests_chorus_sent(
    vendor: str, key_tag: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(overhead, "WARMUP", 2)
    async with VENDORS[vendor][0]() as server:
        server.default_reply = lambda body: "ok"
        totals, llm = await overhead._chorus(
            server, 4, f"memory://ovh-{key_tag}", "memory", vendor=vendor
        )
        assert len(totals) == len(llm) == 4 and all(
            t > m > 0 for t, m in zip(totals, llm, strict=True)
        )
        sent = list(server.bodies)
        assert len(sent) == 6  # one request per message, warm-up included
        times = await overhead.replay(vendor, server.base_url, sent)
        assert len(times) == 6 and all(t > 0 for t in times)
        assert list(server.bodies)[6:] == sent
