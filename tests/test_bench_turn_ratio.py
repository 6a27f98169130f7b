"""The whole-turn benchmark (bench/turn_ratio.py) on a short run, per vendor: a real piped
``chorus chat`` answers, and the bare SDK replays the very requests Chorus sent (the server
receives the same JSON twice). No timing is asserted; the figures go in BENCHMARKS.md."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bench import turn_ratio
from bench.startup import VENDORS

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@pytest.mark.e2e
@pytest.mark.parametrize("vendor", list(VENDORS))
async def test_the_replay_sends_exactly_the_requests_chorus_sent(
    vendor: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(turn_ratio, "WARMUP", 2)
    # CPU is read from /proc in clock ticks (10 ms): 40 turns of about 2 ms each span several
    # ticks, where 5 turns could fall inside one and read as no CPU at all
    monkeypatch.setattr(turn_ratio, "TURNS", 40)
    async with VENDORS[vendor][0]() as server:
        server.default_reply = lambda body: "It is one more."
        times, cpu = await turn_ratio.chorus_turns(server, str(tmp_path), vendor)
        assert len(times) == 40 and all(t > 0 for t in times) and cpu > 0
        sent = turn_ratio._chat_bodies(list(server.bodies))
        marks = [json.dumps(turn_ratio.last_turn(b)).count(turn_ratio.MARK) for b in sent]
        assert marks == [1] * 42  # one request per question, the insights agent's left out
        for how in turn_ratio.HOWS[vendor]:
            before = len(server.bodies)
            replayed, cpu = await turn_ratio.bare_replay(vendor, server.base_url, sent[2:], how)
            assert len(replayed) == 40 and cpu > 0
            # the replay warms up on the first requests again, then sends each one once more
            assert list(server.bodies)[before:] == [*sent[2:][:20], *sent[2:]], how
