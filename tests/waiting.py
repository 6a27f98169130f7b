"""Waiting for a state that no event announces (another task's or process's, a server's, an
SDK's): ask a check again and again until it holds, within a limit, and fail saying what was
waited for. One helper for every test that polls, so each wait reads the same way and reports
a timeout the same way."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import TypeVar, overload

T = TypeVar("T")


@overload
async def until(
    check: Callable[[], Awaitable[T | None]],
    *,
    limit: float = ...,
    every: float = ...,
    what: str | Callable[[], str] = ...,
) -> T: ...


@overload
async def until(
    check: Callable[[], T | None],
    *,
    limit: float = ...,
    every: float = ...,
    what: str | Callable[[], str] = ...,
) -> T: ...


async def until(
    check: Callable[[], object],
    *,
    limit: float = 10.0,
    every: float = 0.05,
    what: str | Callable[[], str] = "",
) -> object:
    """The first truthy answer of ``check()`` (a plain or an async callable; never ``None``), asked every
    ``every`` seconds (0: each time the event loop comes back, for in-process tasks). Past
    ``limit`` seconds, even inside a check that hangs, an ``AssertionError`` names ``what``."""
    deadline = asyncio.timeout(limit)
    try:
        async with deadline:
            while True:
                found = check()
                if inspect.isawaitable(found):
                    found = await found
                if found:
                    return found
                await asyncio.sleep(every)
    except TimeoutError:
        if not deadline.expired():
            raise  # the check's own timeout, not the wait's
        said = what() if callable(what) else what
        raise AssertionError(f"not within {limit:g} s" + (f": {said}" if said else "")) from None
