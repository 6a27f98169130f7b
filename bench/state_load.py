"""How long the embedded store takes to load its data directory at start, to compact it, and
what keeping it on disk costs per answered message.

A data directory of ``KEYS`` keys shaped like Chorus's (memory buffers and history as strings
of a few hundred bytes with a TTL, per-user counters as hashes, recent lines as lists) is written
once (through the store itself, then compacted into a snapshot); then the store is opened on it
``RUNS`` times, each in a fresh process so nothing is warm but the disk cache, and the time from
opening to every key restored is reported (median), with the compaction that wrote it.

The cost per message is the instruction gate's in-process figure (``bench.instructions``: the
default store, on disk) beside the same path with the store in memory only (``memory://``);
issue 35 allows the first at most 15% above the second. Both count with valgrind, a few minutes.

    python -m bench.state_load            # prints Markdown tables
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import fakeredis

from bench import instructions
from bot.state import embedded

KEYS = 100_000
RUNS = 3
_OPEN = (
    "import sys, time; from pathlib import Path; from bot.state import embedded\n"
    "store = embedded.PersistentStore(Path(sys.argv[1]), compact_seconds=3600)\n"
    "print(store.keys_loaded, store.load_seconds); store.close()\n"
)


def fill(directory: Path, keys: int = KEYS) -> float:
    """Write ``keys`` keys into a store on ``directory``; the seconds its compaction took."""
    store = embedded.PersistentStore(directory, compact_seconds=3600)
    try:
        client = fakeredis.FakeRedis(server=store.server)
        pipe = client.pipeline(transaction=False)
        buffer = '{"pins": ["likes bees", "lives in Lisbon"], "notes": "' + "x" * 200 + '"}'
        for i in range(keys):
            kind = i % 10
            if kind < 7:
                pipe.set(f"chorus:mem:u{i}", buffer, ex=7 * 24 * 3600)
            elif kind < 9:
                pipe.hset(f"chorus:quota:u{i}", mapping={"m": i, "t": 1, "d": 2, "w": 3})
            else:
                pipe.rpush(f"chorus:hist:c{i}", *(f"line {n} of {i}" for n in range(10)))
            if i % 1000 == 999:
                pipe.execute()
        pipe.execute()
        started = time.perf_counter()
        store.compact()
        return time.perf_counter() - started
    finally:
        store.close()


def load_once(directory: Path) -> tuple[int, float]:
    done = subprocess.run(
        [sys.executable, "-c", _OPEN, str(directory)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    count, seconds = done.stdout.split()
    return int(count), float(seconds)


def measure(keys: int = KEYS, runs: int = RUNS) -> tuple[int, float, float, int]:
    """Keys loaded, median load seconds, compaction seconds, snapshot bytes."""
    with tempfile.TemporaryDirectory(prefix="chorus-load-") as tmp:
        directory = Path(tmp) / "state"
        compact = fill(directory, keys)
        size = sum(p.stat().st_size for p in directory.iterdir())
        loads = [load_once(directory) for _ in range(runs)]
    assert all(count == keys for count, _ in loads), loads
    return keys, statistics.median(s for _, s in loads), compact, size


def report(keys: int, load: float, compact: float, size: int) -> list[str]:
    return [
        "## Embedded store: load at start and compaction (`python -m bench.state_load`)",
        "",
        "| keys | load at start (median of 3) | compaction | data directory |",
        "|---:|---:|---:|---:|",
        f"| {keys:,} | {load:.2f} s | {compact:.2f} s | {size / 1e6:.1f} MB |",
    ]


def per_message() -> tuple[int, int]:
    """Instructions per answered message: the default store on disk, and in memory only."""
    instructions.compiled()
    return instructions.per_message("in-process"), instructions.per_message("in-memory")


def report_cost(on_disk: int, in_memory: int) -> list[str]:
    return [
        "",
        "| instructions per answered message | on disk (`embedded://`) | in memory only "
        "(`memory://`) | on disk over in memory (issue 35: at most +15%) |",
        "|---|---:|---:|---:|",
        f"| the gate's in-process path | {on_disk / 1e6:.2f} M | {in_memory / 1e6:.2f} M "
        f"| {on_disk / in_memory - 1:+.1%} |",
    ]


async def main() -> list[str]:
    lines = report(*await asyncio.to_thread(measure))
    return lines + report_cost(*await asyncio.to_thread(per_message))


if __name__ == "__main__":
    print("\n".join(asyncio.run(main())))
