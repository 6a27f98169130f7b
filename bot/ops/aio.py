"""Asyncio helpers the standard library lacks (Python 3.11): a reliable cancel, work that a
cancellation must not cut in half, a fast loop.

Why ``cancel_and_wait`` exists: in Python 3.11, when a cancellation arrives just as an
``asyncio.timeout`` block expires, the block may turn it into a ``TimeoutError`` and forget it
(``uncancel``; fixed in 3.12). redis-py wraps every blocking read in such a timeout and reports
the ``TimeoutError`` as a connection error, which our retry loops then retry. One ``cancel()``
can therefore be lost, and ``await task`` after it hangs for good. Cancelling again until the
task ends makes stopping reliable.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger("chorus.ops")

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


class Latch(asyncio.Event):
    """An ``asyncio.Event`` that is also a future (``future()``), so ``asyncio.wait`` can race
    other work against it without a task of its own.

    Why: the Redis Streams consumer races every read against the bus closing and against
    ``stop_consuming``; as ``Event.wait()`` tasks that was two tasks created, scheduled and
    cancelled per read, each costing passes of the event loop. The future is shared by every
    waiter, so nobody may cancel it; it is resolved by ``set`` and replaced after ``clear``."""

    _future: asyncio.Future[None] | None = None

    def set(self) -> None:
        super().set()
        if self._future is not None and not self._future.done():
            self._future.set_result(None)

    def clear(self) -> None:
        super().clear()
        if self._future is not None and self._future.done():
            self._future = None

    def future(self) -> asyncio.Future[None]:
        """Done once the event is set (already done if it is)."""
        if self._future is None:
            self._future = asyncio.get_running_loop().create_future()
            if self.is_set():
                self._future.set_result(None)
        return self._future


async def shielded(work: Awaitable[T]) -> T:
    """``work`` run to its end even when the caller is cancelled meanwhile (once or repeatedly,
    as ``cancel_and_wait`` does); the cancellation is raised after ``work`` has finished.

    Why not ``asyncio.shield`` alone: it protects the inner task but lets the caller go on at
    once, so a shutdown could close the connection under a commit still in flight.
    """
    task = asyncio.ensure_future(work)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.done():
                raise  # the work itself was cancelled (or ended as the caller was)
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return result


def on_stop_signals(stop: asyncio.Event, again: Callable[[], None] | None = None) -> None:
    """SIGTERM and SIGINT set ``stop``; another one after that calls ``again`` (a process
    draining its work on the first signal ends its grace on the second)."""

    def on_signal() -> None:
        if stop.is_set() and again is not None:
            log.warning("second signal: ending the shutdown grace now")
            again()
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on uvloop where it is installed (Linux and macOS: a dependency), which
    cuts the event loop's share of every message; the standard loop elsewhere."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


THRESHOLD = gc.get_threshold()  # the collector's own (young, older, full)
NO_FULL_COLLECTION = 1_000_000_000  # older collections between two full ones while starting


def starting() -> None:
    """No full garbage collection until ``started`` (or ``freeze_heap``); young ones go on.

    Why: start-up allocates some 160,000 objects (modules, settings, the app) that live as long
    as the process, and a full collection among them finds next to nothing, for a share of an
    idle ``chorus run``'s start-up CPU. Turned off altogether instead, the collector saved a
    little more but kept the garbage imports leave (``datetime``'s Python half, attrs' class
    builders), frozen for the life of the process (BENCHMARKS.md, "Figures behind the code's
    choices")."""
    gc.set_threshold(THRESHOLD[0], THRESHOLD[1], NO_FULL_COLLECTION)


def started() -> None:
    """Full collections again, as usual (see ``starting``)."""
    gc.set_threshold(*THRESHOLD)


def freeze_heap() -> None:
    """Take every object alive now (modules, settings, SDK types, the built app: about 200,000
    of them) out of the garbage collector's view, once a process has started.

    Why: they live as long as the process, yet each full collection walks all of them: with an
    instant model one happened every thousand messages or so, a tenth of the CPU those messages
    cost and a stall for whichever message it hit (BENCHMARKS.md, "Figures behind the code's
    choices"); frozen, the same collections walk only what the turns allocate (``gc.freeze``;
    bench/overhead.py does the same after its app starts). No ``gc.collect()`` first: that would
    add the same stall to the start; the little import-time garbage it would find just stays.
    Start-up is over, so full collections resume (``started``)."""
    gc.freeze()
    started()
