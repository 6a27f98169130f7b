"""The one outbound chokepoint for Discord, and the typing indicators that go through it.

Every REST call the adapter makes (messages, typing, interaction responses) runs through
discord.py's own ``HTTPClient``, which already implements Discord's rate limits: per-route
buckets, the global limit, and a 429's ``retry_after`` (see its ``http.py``
``request()``). ``DiscordSender`` is the thin layer of ours on top of it:

* it serialises calls per key (a channel, or one interaction), so the pieces of a long answer
  arrive in order and two answers in one channel never interleave;
* it sees every 429 through an aiohttp trace hook and logs the wait (discord.py sleeps it);
* a 429 asking for longer than discord.py's ``max_ratelimit_timeout`` (30 s, its minimum)
  surfaces as ``discord.RateLimited``; we log it, wait with the injected ``sleep`` up to
  ``max_wait`` and retry, so a long limit delays an answer instead of dropping it;
* a dropped connection is retried with jittered backoff (``bot.resilience``). Message
  creates carry a deterministic nonce (see ``convert.reply_to_outgoing``), so a retry whose
  first attempt did reach Discord does not post twice.

* it keeps every channel's message calls (create, edit, delete) within Discord's observed
  limit of 5 per 5 seconds per channel (a sliding window: a sixth call waits), and lets a
  streamed answer's drafts (``pace``) use it only while a call is left for the final answer,
  so an edit never makes the answer late or draws a 429.

Quirk (discord.py 2.7 ``http.py``): a 429 without a ``Via`` header is taken for a Cloudflare
ban and raised as ``HTTPException`` without any retry.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import replace
from types import SimpleNamespace
from typing import TypeVar

import aiohttp
import discord

from bot.resilience import Attempt, Failure, RetryPolicy, Sleep, parse_retry_after, retry

log = logging.getLogger("chorus.discord.sender")

T = TypeVar("T")
_TOKEN_IN_PATH = re.compile(r"/(interactions|webhooks)/(\d+)/[^/]+")
DEFAULT_POLICY = RetryPolicy(max_retries=3, base_delay=1.0, max_delay=15.0)
TYPING_REFRESH = 8.0  # Discord shows "typing" for 10 s after each trigger
# Message calls per channel: Discord does not publish per-route numbers (read the headers, it
# says); 5 per 5 s is what bots observe for sends, and edits share the channel's bucket.
MESSAGE_RATE = (5, 5.0)
DRAFT_RESERVE = 1  # calls of the window a draft leaves for the final answer


def redact_path(path: str) -> str:
    """An API path with interaction and webhook tokens removed (never log tokens)."""
    return _TOKEN_IN_PATH.sub(r"/\1/\2/<token>", path)


def _classify(exc: BaseException) -> Failure:
    """What discord.py leaves to us: a long ``RateLimited`` (wait its ``retry_after``) and a
    dropped connection (backoff). HTTP errors are final: discord.py already retried them."""
    if isinstance(exc, discord.RateLimited):
        return Failure(
            retryable=True, status=429, retry_after=exc.retry_after, reason="rate limited"
        )
    if isinstance(exc, OSError | aiohttp.ClientConnectionError):
        return Failure(retryable=True, reason=f"connection: {type(exc).__name__}")
    return Failure(retryable=False)


class DiscordSender:
    """Runs outbound API calls one at a time per key and owns long rate-limit waits."""

    def __init__(
        self,
        *,
        sleep: Sleep = asyncio.sleep,
        max_wait: float = 300.0,
        policy: RetryPolicy = DEFAULT_POLICY,
        message_rate: tuple[int, float] = MESSAGE_RATE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sleep = sleep
        self.message_rate = message_rate
        self._clock = clock
        self._windows: dict[str, deque[float]] = {}  # channel key -> times of message calls
        # A rate limit longer than ``max_wait`` is given up on: the answer would be too late.
        self._policy = replace(policy, max_retry_after=max_wait, too_long="give_up")
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self.rate_limited = 0  # 429s seen, for metrics and tests

    def lock(self, key: str) -> _KeyLock:
        """Hold ``key`` across several calls (the pieces of one answer)."""
        return _KeyLock(self, key)

    async def call(self, key: str, op: Callable[[], Awaitable[T]], *, what: str) -> T:
        """Run ``op`` under ``key``'s lock, retrying what discord.py leaves to us."""
        async with self.lock(key):
            return await self.call_locked(op, what=what, key=key)

    async def pace(self, key: str, reserve: int = DRAFT_RESERVE) -> None:
        """Wait until ``key``'s window has room for a call with ``reserve`` calls left over
        (a draft's edit; the call itself is counted when it is made)."""
        await self._window_room(key, reserve)

    async def message_call(self, key: str, op: Callable[[], Awaitable[T]], *, what: str) -> T:
        """A message create, edit or delete in channel ``key`` (its lock held by the caller):
        within the channel's window, then as ``call_locked``."""
        await self._window_room(key, 0)
        window = self._windows.setdefault(key, deque())
        window.append(self._clock())
        return await self.call_locked(op, what=what, key=key)

    async def _window_room(self, key: str, reserve: int) -> None:
        limit, period = self.message_rate
        while True:
            window = self._windows.setdefault(key, deque())
            now = self._clock()
            while window and window[0] <= now - period:
                window.popleft()
            if len(window) < limit - reserve:
                if not window:
                    del self._windows[key]  # (an idle channel keeps nothing)
                return
            await asyncio.sleep(window[0] + period - now + 0.01)  # real time: the window's

    async def call_locked(self, op: Callable[[], Awaitable[T]], *, what: str, key: str) -> T:
        """``call`` for a caller that already holds ``lock(key)``.

        Retried here: ``RateLimited`` (a 429 longer than discord.py will sleep; we wait
        ``retry_after``) and a dropped connection (jittered backoff). Not retried: HTTP errors,
        which discord.py has already retried where that makes sense (5xx, 429).
        """
        extra = {"what": what, "key": key}

        def give_up(state: Attempt) -> None:
            log.error(
                "discord call failed; giving up",
                extra={**extra, "attempt": state.attempt, "delay_s": round(state.delay, 3)},
                exc_info=state.error,
            )

        return await retry(
            op,
            _classify,
            self._policy,
            what=what,
            sleep=self._sleep,
            give_up=give_up,
            logger=log,
            message="discord call failed; retrying",
            extra=extra,
        )

    def trace_config(self) -> aiohttp.TraceConfig:
        """An aiohttp hook for discord.py's session that logs every 429 it is about to wait."""
        trace = aiohttp.TraceConfig()

        async def on_end(
            session: aiohttp.ClientSession,
            context: SimpleNamespace,
            params: aiohttp.TraceRequestEndParams,
        ) -> None:
            response = params.response
            if response.status != 429:
                return
            self.rate_limited += 1
            headers = response.headers
            log.warning(
                "discord answered 429 (rate limited)",
                extra={
                    "method": params.method,
                    "path": redact_path(params.url.path),
                    "retry_after_s": parse_retry_after(dict(headers)),
                    "scope": headers.get("X-RateLimit-Scope"),
                    "global": headers.get("X-RateLimit-Global") == "true",
                    "via": bool(headers.get("Via")),
                },
            )

        trace.on_request_end.append(on_end)
        return trace

    # -- lock bookkeeping: a lock per key, dropped again when nobody holds or waits for it -----
    def _acquire_ref(self, key: str) -> asyncio.Lock:
        lock, users = self._locks.get(key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[key] = (lock, users + 1)
        return lock

    def _release_ref(self, key: str) -> None:
        lock, users = self._locks[key]
        if users <= 1:
            del self._locks[key]
        else:
            self._locks[key] = (lock, users - 1)


class _KeyLock:
    __slots__ = ("_key", "_lock", "_sender")

    def __init__(self, sender: DiscordSender, key: str) -> None:
        self._sender = sender
        self._key = key
        self._lock: asyncio.Lock | None = None

    async def __aenter__(self) -> None:
        self._lock = self._sender._acquire_ref(self._key)
        try:
            await self._lock.acquire()
        except BaseException:
            self._sender._release_ref(self._key)
            raise

    async def __aexit__(self, *exc: object) -> None:
        assert self._lock is not None
        self._lock.release()
        self._sender._release_ref(self._key)


class TypingIndicators:
    """ "Chorus is typing..." per addressed message, until its Reply arrives or a timeout.

    Each indicator is a task that triggers typing every ``TYPING_REFRESH`` seconds through the
    chokepoint; the tasks are kept by message id so ``stop`` can cancel the right one and
    ``aclose`` can cancel and await them all.
    """

    def __init__(
        self,
        sender: DiscordSender,
        trigger: Callable[[int], Awaitable[object]],
        *,
        timeout: float,
    ) -> None:
        self._sender = sender
        self._trigger = trigger
        self._timeout = timeout
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, message_id: str, channel_id: int) -> None:
        if message_id in self._tasks:
            return
        task = asyncio.create_task(self._run(channel_id), name=f"discord-typing-{message_id}")
        self._tasks[message_id] = task
        task.add_done_callback(lambda done: self._forget(message_id, done))

    def stop(self, message_id: str | None) -> None:
        task = self._tasks.pop(message_id, None) if message_id else None
        if task is not None:
            task.cancel()

    @property
    def active(self) -> int:
        return len(self._tasks)

    async def aclose(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, channel_id: int) -> None:
        try:
            async with asyncio.timeout(self._timeout):
                while True:
                    await self._sender.call(
                        f"typing:{channel_id}",
                        lambda: self._trigger(channel_id),
                        what="typing",
                    )
                    await asyncio.sleep(TYPING_REFRESH)  # a refresh interval, not a poll
        except TimeoutError:
            log.debug("typing indicator timed out", extra={"channel_id": channel_id})
        except discord.HTTPException:
            log.warning("typing indicator failed", extra={"channel_id": channel_id}, exc_info=True)

    def _forget(self, message_id: str, task: asyncio.Task[None]) -> None:
        if self._tasks.get(message_id) is task:
            del self._tasks[message_id]
