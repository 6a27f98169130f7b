"""Asyncio helpers the standard library lacks (Python 3.11): a reliable cancel, a fast loop.

Why ``cancel_and_wait`` exists: in Python 3.11, when a cancellation arrives just as an
``asyncio.timeout`` block expires, the block may turn it into a ``TimeoutError`` and forget it
(``uncancel``; fixed in 3.12). redis-py wraps every blocking read in such a timeout and reports
the ``TimeoutError`` as a connection error, which our retry loops then retry. One ``cancel()``
can therefore be lost, and ``await task`` after it hangs for good. Cancelling again until the
task ends makes stopping reliable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

RECANCEL_EVERY = 0.1  # seconds between repeated cancellations of a task that runs on


async def cancel_and_wait(task: asyncio.Future[Any], *, every: float = RECANCEL_EVERY) -> None:
    """Cancel ``task`` and wait until it has ended, cancelling it again every ``every`` seconds
    while it runs on (a swallowed cancellation). Its result or exception is consumed."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=every)
    if not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" warning


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on uvloop where it is installed (Linux and macOS: a dependency), which
    cuts the event loop's share of every message; the standard loop elsewhere."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)
