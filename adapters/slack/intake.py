"""The Slack adapter's inbound tasks: one per event Slack already got its acknowledgement for.

Why a class of its own: those tasks must keep two promises the ack made. Order: a channel's
events are converted side by side (the ``users.info`` lookup of a new user, an image download),
but each publishes only once the channel's previous event has, so they reach the bus in the
order Slack delivered them (a later event of a known user would otherwise overtake an earlier
one still being looked up). Shutdown: ``close`` gives them ``grace`` seconds to reach the bus
(a gateway's outbox holds or spools them) before cancelling what is left, which it logs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger("chorus.slack")

GRACE = 5.0  # seconds ``close`` waits for events Slack already got its ack for

Before = asyncio.Task[None] | None
Work = Callable[[Before], Coroutine[Any, Any, None]]


async def after(task: Before) -> None:
    """Wait until ``task`` (the channel's previous event) has ended, however it ended."""
    if task is not None and not task.done():
        await asyncio.wait({task})


class Intake:
    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()
        self._last: dict[str, asyncio.Task[None]] = {}  # channel -> its newest task

    def spawn(self, work: Work, channel: str, name: str) -> None:
        """Run ``work(before)`` as a task; it must ``await after(before)`` before publishing."""
        before = self._last.get(channel)
        task = asyncio.create_task(work(before), name=name)
        self._last[channel] = task
        self.tasks.add(task)

        def done(task: asyncio.Task[None]) -> None:
            self.tasks.discard(task)
            if self._last.get(channel) is task:
                del self._last[channel]

        task.add_done_callback(done)

    async def idle(self) -> None:
        """Wait until every event received so far is converted and published."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)

    async def close(self, grace: float = GRACE) -> None:
        """Let the tasks finish for up to ``grace`` seconds (call it once intake has stopped),
        then cancel the rest, logging how many acknowledged events they drop."""
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=grace)
        left = list(self.tasks)
        if left:
            log.error(
                "slack events acknowledged but not handed to the bus in time; dropped",
                extra={"count": len(left), "grace_s": grace},
            )
        for task in left:
            task.cancel()
        await asyncio.gather(*left, return_exceptions=True)
