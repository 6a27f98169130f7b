"""``cancel_and_wait``: stopping a task whose first cancellation is swallowed (what Python
3.11's ``asyncio.timeout`` can do to a cancel that races its expiry inside redis-py); and
``Latch``, the event the Redis Streams consumer races its reads against without a task."""

from __future__ import annotations

import asyncio
import gc

from bot.ops.aio import Latch, cancel_and_wait, freeze_heap, started, starting


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


async def test_a_latch_ends_a_race_when_set_and_its_future_outlives_every_waiter() -> None:
    latch = Latch()
    tasks_before = len(asyncio.all_tasks())
    shared = latch.future()
    assert shared is latch.future() and not shared.done()  # one future for every waiter
    assert len(asyncio.all_tasks()) == tasks_before  # no task to wait on it
    slow = asyncio.ensure_future(asyncio.sleep(3600))
    waiting = asyncio.ensure_future(asyncio.wait({slow, shared}, return_when="FIRST_COMPLETED"))
    await asyncio.sleep(0)
    assert not waiting.done()
    latch.set()
    done, pending = await waiting
    assert done == {shared} and pending == {slow}
    assert latch.is_set() and not shared.cancelled()  # a waiter leaving does not cancel it
    slow.cancel()
    await latch.wait()  # still an event
    latch.clear()
    fresh = latch.future()
    assert fresh is not shared and not fresh.done()  # cleared: a new round
    latch.set()
    assert fresh.done()


async def test_a_latch_set_before_its_future_is_asked_for_gives_a_done_one() -> None:
    latch = Latch()
    latch.set()
    assert latch.future().done()
