"""Run every benchmark and print a Markdown report (the figures recorded in BENCHMARKS.md)."""

from __future__ import annotations

import logging
import os
import platform
import sys

from bot.llm.guard import block_real_calls
from bot.ops import aio


async def _main() -> None:
    from bench import (
        admin,
        backpressure,
        cache,
        discord_gateway,
        gemini_call,
        identity,
        memory,
        overhead,
        recall,
        replay,
        safety,
        scaling,
        startup,
        state_load,
        streaming,
        summaries,
        turn_ratio,
        vendor_call,
        voice,
        walk,
    )

    sections = [
        await cache.main(),
        await memory.main(),
        await identity.main(memory.REAL),
        await recall.main(),
        await summaries.main(),
        await overhead.main(memory.REAL),
        replay.main(),
        safety.main(),
        await scaling.main(memory.REAL),
        await discord_gateway.main(memory.REAL),
        await vendor_call.main(),
        await gemini_call.main(),
        await backpressure.main(memory.REAL),
        await streaming.main(),
        await admin.main(),
        await startup.main(),
        await state_load.main(),
        await turn_ratio.main(),
        await walk.main(),
        await voice.main(),
    ]
    print(
        f"# Chorus benchmarks\n\nmachine: {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}; command: make bench\n"
    )
    for lines in sections:
        print("\n".join(lines) + "\n")


if __name__ == "__main__":
    block_real_calls()  # the benchmark talks to loopback servers only
    # The overhead runs use a loopback server without a prompt cache, so every turn would warn
    # "prompt cache not used"; caching itself is measured by bench/cache.py.
    logging.getLogger("chorus.agent").setLevel(logging.ERROR)
    sys.path.insert(0, os.getcwd())
    aio.run(_main())
