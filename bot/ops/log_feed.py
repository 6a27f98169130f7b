"""Each process's log lines, fed to Redis for the dashboard's Logs page.

A ``logging.Handler`` on the root logger keeps every line at or above
``CHORUS_LOG_FEED_LEVEL`` (``WARNING`` unless asked) in a bounded queue, formatted and redacted
by the same formatter and redactor as the process's own log (bot/ops/logs.py), so the page
shows exactly what the log shows, secrets masked. A task writes what is queued to the
deployment's capped stream (bot/state/log_lines.py) every ``FLUSH_SECONDS``, in one pipeline.

Why a queue and a task rather than a write per line: ``emit`` runs inside whatever code logs,
on the event loop or in a worker thread, and must never wait on Redis; a burst beyond
``QUEUE_MAX`` lines between two flushes drops the oldest (counted in the next line written).
A Redis that is away loses the batch, never the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
from collections import deque

from bot.ops.aio import cancel_and_wait
from bot.ops.logs import StructuredFormatter, redactor
from bot.state.connect import Client
from bot.state.log_lines import LogLines

FLUSH_SECONDS = 0.5
QUEUE_MAX = 1000
LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}


def process_name(role: str = "") -> str:
    """``host/pid`` (and the role), how the page tells processes apart."""
    name = f"{socket.gethostname()}/{os.getpid()}"
    return f"{name} {role}" if role else name


class LogFeed(logging.Handler):
    """The handler and its flushing task: ``start()`` on the loop, ``aclose()`` at the end."""

    def __init__(self, redis: Client, *, namespace: str, level: str, process: str) -> None:
        super().__init__(LEVELS.get(level.upper(), logging.WARNING))
        self.lines = LogLines(redis, namespace=namespace)
        self.process = process
        self.setFormatter(StructuredFormatter(redactor(), "text"))
        self.pending: deque[dict[str, str]] = deque(maxlen=QUEUE_MAX)
        self.dropped = 0
        self.guard = threading.Lock()
        self.task: asyncio.Task[None] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("chorus.ops.log_feed"):
            return  # its own troubles are not fed back into it
        try:
            line = self.format(record)
        except Exception:  # a record that cannot be formatted: the stderr log says so
            return
        entry = {
            "at": str(int(record.created * 1000)),
            "level": record.levelname.lower(),
            "logger": record.name,
            "process": self.process,
            "conversation": str(getattr(record, "conversation", "") or ""),
            "line": line,
        }
        with self.guard:
            if len(self.pending) == self.pending.maxlen:
                self.dropped += 1
            self.pending.append(entry)

    def start(self) -> None:
        logging.getLogger().addHandler(self)
        self.task = asyncio.create_task(self._run(), name="log-feed")

    async def flush_now(self) -> None:
        with self.guard:
            batch, self.pending = list(self.pending), deque(maxlen=QUEUE_MAX)
            dropped, self.dropped = self.dropped, 0
        if dropped and batch:
            batch[-1]["line"] += f" (and {dropped} earlier lines dropped: too many at once)"
        await self.lines.append(batch)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            with contextlib.suppress(Exception):  # Redis away: this batch is lost, not the process
                await self.flush_now()

    async def aclose(self) -> None:
        logging.getLogger().removeHandler(self)
        if self.task is not None:
            await cancel_and_wait(self.task)
            self.task = None
        with contextlib.suppress(Exception):
            await self.flush_now()
