"""The recent log lines of every process of a deployment, for the dashboard's Logs page.

A stream capped at ``LOG_LINES_MAX`` entries (``XADD MAXLEN ~``): each process appends what its
log feed gathered (bot/ops/log_feed.py) in one pipeline, at most a few times a second; the
dashboard reads the newest entries (``XREVRANGE``) and filters them. Each entry's fields are
plain text: ``at`` (epoch ms), ``level``, ``logger``, ``process``, ``conversation`` (or empty)
and ``line``, the log line exactly as the process's log prints it, secrets already masked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bot.state import keys
from bot.state.connect import Client

LOG_LINES_MAX = 5000


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class LogLines:
    def __init__(self, redis: Client, *, namespace: str = "main") -> None:
        self.redis = redis
        self.key = keys.log_lines(namespace)

    async def append(self, entries: Sequence[Mapping[str, str]]) -> None:
        if not entries:
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            for entry in entries:
                pipe.xadd(self.key, dict(entry), maxlen=LOG_LINES_MAX, approximate=True)  # type: ignore[arg-type]
            await pipe.execute()

    async def newest(self, count: int) -> list[tuple[str, dict[str, str]]]:
        """The newest ``count`` entries, newest first: (stream id, fields)."""
        found: list[tuple[Any, dict[Any, Any]]]
        found = await self.redis.xrevrange(self.key, count=count)  # type: ignore[assignment]
        return [
            (_text(entry_id), {_text(k): _text(v) for k, v in (fields or {}).items()})
            for entry_id, fields in found or []
        ]
