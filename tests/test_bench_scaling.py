"""The scale-out benchmark's CPU accounting (bench/scaling.py): the figures BENCHMARKS.md
records are only as good as these readings."""

from __future__ import annotations

import os
import sys
import time

import pytest

from bench.scaling import ScaleRun, _proc_cpu, _redis_cpu
from bot import store

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _burn(cpu_seconds: float) -> None:
    until = time.process_time() + cpu_seconds
    while time.process_time() < until:
        sum(range(1000))


def test_proc_cpu_follows_the_process_own_cpu_clock() -> None:
    before_proc, before_own = _proc_cpu(os.getpid()), time.process_time()
    _burn(0.3)
    after_proc, after_own = _proc_cpu(os.getpid()), time.process_time()
    assert before_proc is not None and after_proc is not None
    tick = 1 / os.sysconf("SC_CLK_TCK")
    # /proc counts whole clock ticks; two readings can each be off by one
    assert abs((after_proc - before_proc) - (after_own - before_own)) <= 2 * tick + 0.02


def test_proc_cpu_of_a_process_that_is_gone_is_unknown() -> None:
    assert _proc_cpu(2**22 + 12345) is None  # above Linux's pid_max ceiling


async def test_redis_reports_its_cpu_and_it_only_grows(real_redis_url: str) -> None:
    client = await store.connect(real_redis_url)
    try:
        first = await _redis_cpu(client)
        for _ in range(200):
            await client.ping()
        second = await _redis_cpu(client)
    finally:
        await client.aclose()
    assert first is not None and second is not None
    assert second >= first > 0


def test_scale_run_shares() -> None:
    cores = os.cpu_count() or 1
    run = ScaleRun(
        workers=2,
        messages=500,
        elapsed=2.0,
        worker_cpu=1.5,
        redis_cpu=0.1,
        harness_cpu=0.4,
    )
    assert run.rate == 250
    assert run.per_message_ms(run.worker_cpu) == pytest.approx(3.0)
    assert run.worker_cores == pytest.approx(0.75)
    assert run.machine_busy == pytest.approx(2.0 / (2.0 * cores))
    blind = ScaleRun(
        workers=1, messages=10, elapsed=1.0, worker_cpu=None, redis_cpu=0.1, harness_cpu=0.1
    )
    assert blind.machine_busy is None and blind.worker_cores is None
    assert blind.per_message_ms(None) is None
