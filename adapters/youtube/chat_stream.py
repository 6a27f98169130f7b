"""Following one live chat over the gRPC stream: reconnect, resume, refresh, fall back.

The adapter hands a chat to ``StreamReader.read``, which returns when the chat is over
(``ended``) or when the stream cannot be used, with the page token and backlog state that
polling resumes from. In between:

- each response's items go to the adapter's ``publish`` (which drops ids it has handled,
  ``SeenIds``), and only then does its ``nextPageToken`` become the resume point: a reconnect
  asks for what was not yet published, so a message is neither lost nor answered twice;
- the first response of a connection without a page token is the chat's recent history, skipped
  like the first polled page (old messages are not answered);
- the server closing the stream is normal: reconnect from the token, paced by
  ``bot.quota.plan.plan_stream`` (reconnects are spread over what reading and mentions could
  use, at least one every five minutes), so a server closing the stream every few seconds
  cannot spend the day;
- ``UNAUTHENTICATED`` renews the OAuth token once and reconnects at once;
- transient statuses (UNAVAILABLE, ...) and a stream that closes without a single response are
  retried with ``RetryPolicy`` backoff;
- anything else, retries used up, or grpcio missing: fall back to polling (``YOUTUBE_READ_MODE``
  ``auto``), logged once with the reason. What will not change by itself (``UNIMPLEMENTED``,
  ``PERMISSION_DENIED``, a renewed token refused again, grpcio missing) turns streaming off
  for the adapter's life; after an outage the adapter tries the stream again later.
  With ``stream`` there is no fallback: the reader keeps retrying, at most ``max_delay`` apart,
  and the chat is never polled;
- ``offlineAt`` or a ``chatEndedEvent`` ends the chat, as when polling.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cachetools import LRUCache

from adapters.youtube import convert
from adapters.youtube.api import Clock, QuotaExceeded, YouTubeAPI, YouTubeUnavailable
from bot.quota.plan import plan_stream
from bot.resilience import RetryPolicy, Sleep
from bot.settings import YouTubeSettings

log = logging.getLogger("chorus.youtube")

# (items, backlog) -> whether the chat ended; the adapter publishes what it has not seen
Publish = Callable[[Sequence[Mapping[str, Any]], bool], Awaitable[bool]]
# (ok, seconds until the next read is due): for readiness and the quota log
OnRead = Callable[[bool, float], None]
_MIN_RECONNECT_S = 1.0
# Refusals that will not change by themselves: the method is off, or this project/token may not
# use it (the REST API, which the reader falls back to, may still allow polling).
_PERMANENT = frozenset({"UNIMPLEMENTED", "PERMISSION_DENIED", "UNAUTHENTICATED"})


@dataclass(frozen=True)
class StreamEnd:
    """Why ``read`` returned: the chat ended, or polling takes over from ``page_token``."""

    ended: bool
    page_token: str | None = None
    backlog: bool = True  # nothing read yet: the next first page is still the history
    reason: str = ""
    retry_later: bool = False  # the stream may work again (an outage, not a refusal)


@dataclass
class _Cursor:
    """Where the chat is read up to: the resume token, and whether the next response is the
    history (the backlog); ``answered`` counts the current connection's responses."""

    page_token: str | None
    backlog: bool
    answered: int = 0


class SeenIds:
    """The last ``size`` message ids handled (an ``LRUCache``: handling one again makes it the
    newest). A resumed stream or a switch between streaming and polling may deliver a message
    again; it is handled once."""

    def __init__(self, size: int = 10_000) -> None:
        self._ids: LRUCache[str, None] = LRUCache(size)

    def __contains__(self, message_id: object) -> bool:
        return isinstance(message_id, str) and message_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, message_id: str) -> None:
        self._ids[message_id] = None


class StreamReader:
    def __init__(
        self,
        api: YouTubeAPI,
        settings: YouTubeSettings,
        *,
        clock: Clock,
        sleep: Sleep = asyncio.sleep,
        policy: RetryPolicy | None = None,
    ) -> None:
        self._api = api
        self._settings = settings
        self._clock = clock
        self._sleep = sleep
        self._policy = policy or RetryPolicy(max_retries=5, base_delay=1.0, max_delay=300.0)
        self.disabled: str | None = None  # why streaming is off for good
        self.connected = False  # a stream is open and answering (for readiness)

    @property
    def fallback(self) -> bool:
        return self._settings.read_mode == "auto"

    async def read(
        self,
        live_chat_id: str,
        *,
        publish: Publish,
        wait_for_reset: Callable[[], Awaitable[None]],
        on_read: OnRead,
        page_token: str | None = None,
        backlog: bool = True,
    ) -> StreamEnd:
        """Follow the chat over the stream until it ends or polling must take over."""
        try:
            from adapters.youtube.stream_list import ChatStream, StreamError
        except ImportError as exc:  # grpcio is an optional extra
            return self._give_up(f"grpcio is not installed ({exc})", page_token, backlog, True)
        stream = ChatStream(self._settings.grpc_target, insecure=self._settings.grpc_insecure)
        cursor = _Cursor(page_token, backlog)
        failures, renew, renewed, backoff = 0, False, False, 0.0
        connected_at: datetime | None = None
        try:
            while True:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise asyncio.CancelledError  # a library swallowed our cancel: stop anyway
                if not renew:
                    await self._pace(connected_at, backoff)
                code = ""
                try:
                    access = await self._api.access_token(renew=renew)
                    await self._api.charge("liveChatMessages.streamList", self._cost)
                except QuotaExceeded:
                    await wait_for_reset()
                    continue
                except YouTubeUnavailable as exc:  # the token endpoint is down
                    failure, transient = f"token endpoint: {exc}", True
                else:
                    renew, backoff, connected_at, cursor.answered = False, 0.0, self._clock(), 0
                    responses = stream.pages(live_chat_id, cursor.page_token, access)
                    try:
                        async with aclosing(responses):
                            if await self._drain(responses, live_chat_id, cursor, publish, on_read):
                                return StreamEnd(True, cursor.page_token, cursor.backlog)
                    except StreamError as exc:
                        code, failure, transient = exc.code, str(exc), exc.transient
                    else:
                        failure, transient = "the stream closed without a response", True
                    finally:
                        self.connected = False
                    if cursor.answered:
                        failures, renewed = 0, False
                        if not code:  # the server closed a stream that was answering: normal
                            log.info(
                                "youtube chat stream closed by the server; resuming",
                                extra={
                                    "responses": cursor.answered,
                                    "page_token": cursor.page_token,
                                },
                            )
                            continue
                    if code == "UNAUTHENTICATED" and not renewed:
                        log.info("youtube chat stream: access token refused; renewing it")
                        renew = renewed = True
                        continue
                    if code in _PERMANENT and self.fallback:
                        return self._give_up(failure, cursor.page_token, cursor.backlog, True)
                failures += 1
                on_read(False, 0.0)
                if self.fallback and (not transient or self._policy.exhausted(failures)):
                    return self._give_up(failure, cursor.page_token, cursor.backlog, False)
                backoff = self._policy.delay(failures)
                log.warning(
                    "youtube chat stream failed; reconnecting",
                    extra={"reason": failure, "attempt": failures, "backoff_s": round(backoff, 3)},
                )
        finally:
            self.connected = False
            await stream.aclose()

    async def _drain(
        self,
        responses: AsyncIterator[dict[str, Any]],
        live_chat_id: str,
        cursor: _Cursor,
        publish: Publish,
        on_read: OnRead,
    ) -> bool:
        """Publish one connection's responses, moving the cursor past each only once it is
        published; True when the chat ended."""
        async for page in responses:
            cursor.answered += 1
            self.connected = True
            on_read(True, 0.0)
            read = convert.read_page(page)
            ended = await publish(read.items, cursor.backlog)
            if cursor.backlog:
                log.info("skipped the chat backlog", extra={"messages": len(read.items)})
                cursor.backlog = False
            cursor.page_token = read.next_page_token or cursor.page_token
            if ended or read.offline_at:
                log.info(
                    "youtube live chat ended",
                    extra={"live_chat_id": live_chat_id, "offline_at": read.offline_at},
                )
                return True
        return False

    @property
    def _cost(self) -> int:
        return self._api.ledger.config.stream_cost

    async def _pace(self, connected_at: datetime | None, backoff: float) -> None:
        """Wait out ``backoff``, and longer if the quota plan says a new connection must wait
        (each one is charged; the first connection is not paced)."""
        ledger = self._api.ledger
        budget = await ledger.fresh_budget() if connected_at else ledger.budget()
        now = self._clock()
        plan = plan_stream(ledger.config, budget, min_interval=_MIN_RECONNECT_S)
        paced = plan.delay - (now - connected_at).total_seconds() if connected_at else 0.0
        wait = max(backoff, paced)
        if wait <= 0:
            return
        if paced > backoff and plan.limited_by != "server":
            log.info(
                "youtube chat stream reconnects are paced to stay within the quota",
                extra={"wait_s": round(wait, 3), "limited_by": plan.limited_by},
            )
        await self._sleep(wait)

    def _give_up(
        self, reason: str, page_token: str | None, backlog: bool, permanent: bool
    ) -> StreamEnd:
        if permanent:
            self.disabled = reason
        log.warning(
            "youtube chat stream unavailable; reading by polling liveChatMessages.list",
            extra={"reason": reason, "until": "restart" if permanent else "retried later"},
        )
        return StreamEnd(False, page_token, backlog, reason, retry_later=not permanent)
