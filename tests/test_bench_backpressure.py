"""The backpressure benchmark (bench/backpressure.py) at a small size: the bound it reports
holds on both buses, and its memory reading is the process's own. No timing is asserted."""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest

from bench.backpressure import Run, rss_mb, run

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

LIMIT = 16


def test_rss_reads_this_process_memory() -> None:
    before = rss_mb()
    ballast = bytearray(64 * 1024 * 1024)  # touched below, so it is resident
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    assert rss_mb() >= before + 60
    del ballast


async def test_the_in_process_run_answers_everything_within_the_bound(real_redis_url: str) -> None:
    result = await run("in-process", real_redis_url, bus="memory", limit=LIMIT, n=1500)
    assert result.published == result.answered == 1500
    assert result.peak_in_flight <= LIMIT and result.peak_queued <= LIMIT
    assert result.peak_topic <= 1000  # the in-process topic's size
    assert result.steady > 0 and result.rss and "| in-process | 16 | 1,500 |" in result.row()


async def test_the_streams_run_publishes_everything_and_holds_within_the_bound(
    real_redis_url: str,
) -> None:
    result = await run("streams", real_redis_url, bus="redis", limit=LIMIT, n=1500)
    assert result.published == 1500 and result.answered <= 1500
    assert result.peak_in_flight <= LIMIT and result.peak_queued <= LIMIT
    assert Run.from_json(json.dumps(dataclasses.asdict(result))).row() == result.row()
