"""The whole-turn benchmark (bench/turn_ratio.py) on a short run: a real piped ``chorus chat``
answers, and the bare SDK replays the very requests Chorus sent (the server receives the same
JSON twice). No timing is asserted; the figures go in BENCHMARKS.md."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench import turn_ratio
from tests.loopback.openai_server import OpenAIServer

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


async def test_the_replay_sends_exactly_the_requests_chorus_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(turn_ratio, "WARMUP", 2)
    # CPU is read from /proc in clock ticks (10 ms): 40 turns of about 2 ms each span several
    # ticks, where 5 turns could fall inside one and read as no CPU at all
    monkeypatch.setattr(turn_ratio, "TURNS", 40)
    async with OpenAIServer() as server:
        server.default_reply = lambda body: "It is one more."
        times, cpu = await turn_ratio.chorus_turns(server, str(tmp_path))
        assert len(times) == 40 and all(t > 0 for t in times) and cpu > 0
        sent = turn_ratio._chat_bodies(list(server.bodies))
        assert [b["messages"][-1]["content"][0]["text"].count(turn_ratio.MARK) for b in sent] == [
            1
        ] * 42  # one request per question, the insights agent's left out
        before = len(server.bodies)
        replayed = await turn_ratio.bare_replay(server.base_url, sent[2:], "post")
        assert len(replayed) == 40
        # the replay warms up on the first requests again, then sends each one once more
        assert list(server.bodies)[before:] == [*sent[2:][:20], *sent[2:]]
