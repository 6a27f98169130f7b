"""``cancel_and_wait``: stopping a task whose first cancellation is swallowed (what Python
3.11's ``asyncio.timeout`` can do to a cancel that races its expiry inside redis-py)."""

from __future__ import annotations

import asyncio
import gc

from bot.ops.aio import cancel_and_wait, freeze_heap, started, starting


async def _stubborn(swallow: int, log: list[str]) -> None:
    """Swallows its first ``swallow`` cancellations (as the 3.11 race does), then obeys."""
    current = asyncio.current_task()
    assert current is not None
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            if swallow == 0:
                log.append("stopped")
                raise
            swallow -= 1
            current.uncancel()
            log.append("swallowed")


async def test_a_swallowed_cancellation_is_repeated_until_the_task_ends() -> None:
    log: list[str] = []
    task = asyncio.create_task(_stubborn(2, log))
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait(task, every=0.01), 5)
    assert task.cancelled()
    assert log == ["swallowed", "swallowed", "stopped"]


async def test_a_single_cancel_is_not_enough_for_such_a_task() -> None:
    """The failure ``cancel_and_wait`` exists for: one cancel, then waiting, does not end it."""
    log: list[str] = []
    task = asyncio.create_task(_stubborn(1, log))
    await asyncio.sleep(0)
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=0.05)
    assert not done and log == ["swallowed"]
    await cancel_and_wait(task, every=0.01)
    assert log == ["swallowed", "stopped"]


async def test_a_task_that_fails_while_stopping_does_not_leak_its_exception() -> None:
    async def fails_on_cancel() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed") from None

    task = asyncio.create_task(fails_on_cancel())
    await asyncio.sleep(0)
    await cancel_and_wait(task)
    assert isinstance(task.exception(), RuntimeError)


async def test_a_finished_task_is_left_alone() -> None:
    async def quick() -> int:
        return 7

    task = asyncio.create_task(quick())
    await task
    await cancel_and_wait(task)
    assert task.result() == 7


def test_freeze_heap_takes_the_live_objects_out_of_the_collectors_view() -> None:
    kept = [object() for _ in range(1000)]  # alive at the freeze: frozen with the rest
    try:
        freeze_heap()
        assert gc.get_freeze_count() >= len(kept)
        assert not any(obj is kept for obj in gc.get_objects())  # no longer walked
    finally:
        gc.unfreeze()  # the test process goes on collecting as before


def test_no_full_collection_while_starting_and_the_usual_ones_once_frozen() -> None:
    usual = gc.get_threshold()
    try:
        starting()
        young, older, full = gc.get_threshold()
        assert (young, older) == usual[:2] and full > 1_000_000  # young collections go on
        freeze_heap()  # start-up is over
        assert gc.get_threshold() == usual
        starting()
        started()  # a process that never freezes (a gateway, a failed start)
        assert gc.get_threshold() == usual
    finally:
        gc.unfreeze()
        gc.set_threshold(*usual)
