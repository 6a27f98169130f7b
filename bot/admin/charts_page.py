"""The Charts page: answers, errors, latency percentiles, tokens, cost and cache share over the
last 24 hours (15-minute points from the per-minute rollups) or 7 days (hourly points from the
per-hour rollups), read by bot/state/rollups.py and drawn as inline SVG (bot/admin/charts.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from bot.admin.charts import line_chart
from bot.admin.views import Sources
from bot.state import rollups

SPANS = ("24h", "7d")
SERIES = (  # (series, label, unit)
    ("answers", "answers", "per point"),
    ("errors", "errors", "per point"),
    ("p50", "latency p50", "ms"),
    ("p95", "latency p95", "ms"),
    ("p99", "latency p99", "ms"),
    ("tokens", "tokens (in + out)", "per point"),
    ("cost", "estimated cost", "USD"),
    ("cache_share", "prompt-cache read share", "of input"),
)


async def charts(src: Sources, span: str, now: datetime) -> dict[str, Any]:
    span = span if span in SPANS else "24h"
    read = rollups.last_24_hours if span == "24h" else rollups.last_7_days
    rollup = await read(src.redis, now)
    first = rollup.points[0].at.strftime("%Y-%m-%d %H:%M")
    last = rollup.points[-1].at.strftime("%Y-%m-%d %H:%M UTC")
    total = rollup.total
    return {
        "span": span,
        "spans": SPANS,
        "step_minutes": int(rollup.step.total_seconds() // 60),
        "charts": [
            (name, line_chart(rollup.series(name), label, unit, first, last))
            for name, label, unit in SERIES
        ],
        "total": {
            "answers": total.answers,
            "errors": total.errors,
            "tokens": total.tokens,
            "cost": total.cost,
            "cache_share": total.cache_share,
            "p50": total.latency(0.5),
            "p95": total.latency(0.95),
        },
    }
