"""The scale-out benchmark's CPU accounting (bench/scaling.py): the figures BENCHMARKS.md
records are only as good as these readings."""

from __future__ import annotations

import os
import sys
import time
from collections import Counter

import pytest

from bench.scaling import ScaleRun, _commands_table, _proc_cpu, _redis_commands, _redis_cpu
from bot.state import connect

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


async def test_redis_reports_its_cpu_and_the_commands_it_ran(real_redis_url: str) -> None:
    client = await connect.open_redis(real_redis_url)
    try:
        first, before = await _redis_cpu(client), await _redis_commands(client)
        for _ in range(200):
            await client.ping()
        second, after = await _redis_cpu(client), await _redis_commands(client)
    finally:
        await client.aclose()
    assert first is not None and second is not None
    assert second >= first > 0
    ran = after - before
    assert ran["ping"] >= 200  # other clients of a shared server may add their own
    assert ran["info"] >= 2  # our own readings are counted too


def test_scale_run_shares() -> None:
    cores = os.cpu_count() or 1
    run = ScaleRun(
        workers=2,
        messages=500,
        elapsed=2.0,
        worker_cpu=1.5,
        redis_cpu=0.1,
        harness_cpu=0.4,
        commands=Counter(),
    )
    assert run.rate == 250
    assert run.per_message_ms(run.worker_cpu) == pytest.approx(3.0)
    assert run.worker_cores == pytest.approx(0.75)
    assert run.machine_busy == pytest.approx(2.0 / (2.0 * cores))
    blind = ScaleRun(
        workers=1,
        messages=10,
        elapsed=1.0,
        worker_cpu=None,
        redis_cpu=0.1,
        harness_cpu=0.1,
        commands=Counter(),
    )
    assert blind.machine_busy is None and blind.worker_cores is None
    assert blind.per_message_ms(None) is None


def test_commands_table_lists_per_message_counts_of_both_runs() -> None:
    def run(workers: int, messages: int, commands: dict[str, int]) -> ScaleRun:
        return ScaleRun(
            workers=workers,
            messages=messages,
            elapsed=1.0,
            worker_cpu=None,
            redis_cpu=None,
            harness_cpu=0.0,
            commands=Counter(commands),
        )

    one = run(1, 100, {"xadd": 200, "xack": 200, "ping": 1})
    two = run(2, 200, {"xadd": 400, "xack": 402, "hello": 20})
    rows = _commands_table(one, two)
    assert "| xack | 2.00 | 2.01 |" in rows
    assert "| xadd | 2.00 | 2.00 |" in rows
    assert "| hello | 0.00 | 0.10 |" in rows
    assert not any(r.startswith("| ping ") for r in rows)  # 0.01 per message: below the floor
    assert rows[-1] == "| all commands | 4.01 | 4.11 |"
