"""The Logs page: the recent log lines of every process (bot/state/log_lines.py), filtered.

Each process feeds its own lines (``CHORUS_LOG_FEED_LEVEL`` and up, secrets already masked by
the log's redactor: bot/ops/log_feed.py); the page reads the newest ``SCANNED`` of the
deployment's stream in one ``XREVRANGE`` and keeps those that pass the filters (least level,
logger, conversation, process), newest first, at most ``SHOWN``. Following live is the page
reloading itself every ``FOLLOW_SECONDS`` (no script: the dashboard has no build step).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bot.admin.views import Sources
from bot.state.log_lines import LogLines

SCANNED, SHOWN = 2000, 300
FOLLOW_SECONDS = 2
LEVELS = ("debug", "info", "warning", "error", "critical")


async def logs(src: Sources, query: Mapping[str, str]) -> dict[str, Any]:
    level = query.get("level", "").lower()
    least = LEVELS.index(level) if level in LEVELS else 0
    logger, conv = query.get("logger", "").strip(), query.get("conversation", "").strip()
    process = query.get("process", "").strip()
    lines = LogLines(src.redis, namespace=src.audit.namespace)
    found = await lines.newest(SCANNED)
    rows, processes = [], set()
    for _, entry in found:
        processes.add(entry.get("process", ""))
        rank = LEVELS.index(entry["level"]) if entry.get("level") in LEVELS else len(LEVELS)
        if rank < least:
            continue
        if logger and not entry.get("logger", "").startswith(logger):
            continue
        if conv and conv not in entry.get("conversation", "") and conv not in entry.get("line", ""):
            continue
        if process and process != entry.get("process", ""):
            continue
        rows.append(entry)
        if len(rows) >= SHOWN:
            break
    return {
        "rows": rows,
        "levels": LEVELS,
        "level": level,
        "logger": logger,
        "conversation": conv,
        "process": process,
        "processes": sorted(p for p in processes if p),
        "follow": query.get("follow", "") == "1",
        "follow_seconds": FOLLOW_SECONDS,
    }
