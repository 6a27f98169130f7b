"""A plugin timer on three ``chorus run --role worker`` processes over real Redis Streams: it
fires exactly once per period (2 s) across the workers, every period; when the worker that fired
last is SIGKILLed, the very next firing is another worker's (within one period), and the timer
goes on once per period. Read off the firings the plugin itself writes (its instant, its process)."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from pathlib import Path

from bot.state import connect, keys
from tests.loopback.anthropic_server import AnthropicServer
from tests.test_chat_e2e import spawn_chorus
from tests.test_worker_takeover_e2e import worker_env
from tests.waiting import until

PERIOD_MS = 2000
PLUGIN = "tests.plugin_samples.ticker"


def firings(log: Path) -> list[tuple[int, int]]:
    """(instant in ms, process id) of each firing so far."""
    if not log.exists():
        return []
    rows = [line.split() for line in log.read_text().splitlines() if line.strip()]
    return [(int(row[0]), int(row[1])) for row in rows]


async def test_a_timer_fires_once_per_period_across_workers_and_survives_a_kill(
    tmp_path: Path, real_redis_url: str, key_tag: str
) -> None:
    log = tmp_path / "ticks.log"
    async with AnthropicServer() as model:
        env = worker_env(tmp_path, real_redis_url, key_tag, model.base_url) | {
            "CHORUS_PLUGINS": PLUGIN,
            "TICKER_LOG": str(log),
            "TICKER_PERIOD": str(PERIOD_MS / 1000),
            "CHORUS_LOG_LEVEL": "WARNING",
        }
        workers = [await spawn_chorus(["run", "--role", "worker"], env, tmp_path) for _ in range(3)]
        try:
            await until(lambda: len(firings(log)) >= 6, limit=90)
            before = firings(log)
            victim_pid = before[-1][1]
            victim = next(w for w in workers if w.pid == victim_pid)
            victim.send_signal(signal.SIGKILL)
            await victim.wait()
            killed_at = len(firings(log))
            await until(lambda: len(firings(log)) >= killed_at + 4, limit=90)
        finally:
            for worker in workers:
                if worker.returncode is None:
                    worker.send_signal(signal.SIGTERM)
            outcomes = [await asyncio.wait_for(w.communicate(), 60) for w in workers]
            redis = await connect.open_redis(real_redis_url)
            await redis.delete(keys.plugin_data(PLUGIN, "all", (), "ticks"))
            await redis.aclose()
    survivors = [w for w in workers if w is not victim]
    for worker, (_, err) in zip(workers, outcomes, strict=True):
        if worker in survivors:
            assert worker.returncode == 0, err.decode()[-3000:]
    seen = firings(log)
    instants = [at for at, _ in seen]
    doubled = [at for at, n in Counter(instants).items() if n > 1]
    assert not doubled, seen  # exactly once per period, across the three workers
    assert instants == sorted(instants)
    gaps = {b - a for a, b in zip(instants, instants[1:], strict=False)}
    assert gaps == {PERIOD_MS}, seen  # no period skipped, before or after the kill
    assert len({pid for _, pid in seen}) >= 1
    last_by_victim = max(at for at, pid in seen if pid == victim_pid)
    after = [(at, pid) for at, pid in seen if at > last_by_victim]
    assert len(after) >= 3 and after[0][0] == last_by_victim + PERIOD_MS, seen  # within a period
    assert all(pid != victim_pid for _, pid in after)
