"""EventSub notifications twitchio cannot parse: counted, logged once a minute, skipped.

Why: twitchio 3 already catches an exception while it builds the event of a ``notification``
(a field missing or of another type) and goes on reading the socket, but it logs each one at
CRITICAL with a traceback, so a stream of malformed payloads floods the log with alarms for
what is a skipped message. ``NotificationGuard`` is a filter on twitchio's websocket logger
that turns that record into the form Discord's ``ParserGuard`` uses: one WARNING a minute
(naming the error type, never the payload: it is user data), a running count in ``skipped``,
the rest dropped. Every other twitchio record passes unchanged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

TWITCHIO_LOGGER = "twitchio.eventsub.websockets"
_CAUGHT = "Caught an unknown exception while proccessing a websocket 'notification' event"


class NotificationGuard(logging.Filter):
    LOG_EVERY = 60.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.skipped = 0
        self._logged_at: float | None = None
        self._clock = clock

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(_CAUGHT):
            return True
        self.skipped += 1
        now = self._clock()
        if self._logged_at is not None and now - self._logged_at < self.LOG_EVERY:
            return False
        self._logged_at = now
        error = record.exc_info[1] if record.exc_info else None
        record.msg, record.args, record.exc_info, record.exc_text = (
            "twitch notification skipped: twitchio could not parse it",
            (),
            None,
            None,
        )
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.error = type(error).__name__ if error is not None else "unknown"
        record.skipped = self.skipped
        return True


GUARD = NotificationGuard()


def install() -> NotificationGuard:
    """Attach the process's one guard to twitchio's websocket logger (idempotent)."""
    logger = logging.getLogger(TWITCHIO_LOGGER)
    if GUARD not in logger.filters:
        logger.addFilter(GUARD)
    return GUARD
