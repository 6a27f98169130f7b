"""What the retry tests share (tests/test_resilience.py and test_resilience_policy.py): a
fake clock, scripted operations that fail on cue, and a classifier.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bot.resilience import (
    Failure,
)

NOW = 1_700_000_000.0


class FakeTime:
    """A clock that only moves when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 100.0
        self.delays: list[float] = []

    async def sleep(self, delay: float) -> None:
        self.delays.append(delay)
        self.now += delay

    def clock(self) -> float:
        return self.now


class Boom(Exception):
    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.reason)
        self.failure = failure


class GiveUpError(Exception):
    pass


def classify(exc: BaseException) -> Failure:
    if isinstance(exc, Boom):
        return exc.failure
    return Failure(retryable=False, reason="bug")


def script(*outcomes: Exception | str) -> tuple[Callable[[], Awaitable[str]], list[int]]:
    """An op that raises or returns the next outcome per call; ``calls`` counts the calls."""
    queue = list(outcomes)
    calls: list[int] = []

    async def op() -> str:
        calls.append(1)
        item = queue.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    return op, calls


FLAKY = Boom(Failure(retryable=True, status=503, reason="unavailable"))
