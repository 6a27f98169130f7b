"""A plugin with a timer, for tests/test_plugin_timers_e2e.py: every ``TICKER_PERIOD`` seconds
(2 by default) it appends the firing's instant and its process id to ``TICKER_LOG``, and counts
the firings in its store."""

from __future__ import annotations

import os
from pathlib import Path

from bot.plugins import TimerContext, every

PERIOD = float(os.environ.get("TICKER_PERIOD", "2"))


def _write(line: str) -> None:
    path = os.environ.get("TICKER_LOG")
    if path:
        with Path(path).open("a", encoding="utf-8") as out:
            out.write(line)


@every(PERIOD)
async def tick(ctx: TimerContext) -> None:
    count = await ctx.store.shared.incr("ticks")
    _write(f"{round(ctx.at.timestamp() * 1000)} {os.getpid()} {count}\n")
