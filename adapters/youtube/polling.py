"""Following one live chat by polling ``liveChatMessages.list`` on the quota plan.

The fallback when the gRPC stream (chat_stream.py) cannot be used, and all of
``YOUTUBE_READ_MODE=poll``. Every poll costs ``YOUTUBE_COST_LIST`` units (5), failed ones too,
so the cadence is planned (``bot.quota.plan.plan_poll``, from a fresh read of the shared
ledger: at least a poll every ``YOUTUBE_POLL_FLOOR_SECONDS`` over the rest of the stream, faster
with half of what the reply budget leaves free, never faster than the server's
``pollingIntervalMillis``; replies never spend what reading needs). The first page of a chat
(no page token) is its backlog and is skipped; ``offlineAt``, a ``chatEndedEvent`` or a REST
error saying the chat is gone (``liveChatEnded``...) ends it. With ``until`` the poller hands the
chat back at that time with its page token, so the adapter can try the stream again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from adapters.youtube import convert
from adapters.youtube.api import (
    ChatUnavailable,
    Clock,
    QuotaExceeded,
    YouTubeAPI,
    YouTubeError,
    YouTubeUnavailable,
)
from adapters.youtube.chat_stream import OnRead, Publish
from bot.quota.plan import PollPlan, plan_poll
from bot.resilience import Sleep

log = logging.getLogger("chorus.youtube")

_DEFAULT_POLL_S = 5.0
_RETRY_LATER_S = 60.0
Resume = tuple[str | None, bool]  # the page token, and whether the next page is the backlog


class Poller:
    def __init__(self, api: YouTubeAPI, *, clock: Clock, sleep: Sleep = asyncio.sleep) -> None:
        self._api = api
        self._clock = clock
        self._sleep = sleep
        self.plan: PollPlan | None = None  # the last cadence, for quota_status

    async def read(
        self,
        live_chat_id: str,
        *,
        publish: Publish,
        wait_for_reset: Callable[[], Awaitable[None]],
        on_read: OnRead,
        quota_fields: Callable[[], dict[str, object]],
        page_token: str | None = None,
        backlog: bool = True,
        until: datetime | None = None,
    ) -> Resume | None:
        """Poll until the chat is over (None) or until ``until`` (where to resume)."""
        while True:
            try:
                page = await self._api.list_messages(live_chat_id, page_token)
            except QuotaExceeded:
                await wait_for_reset()
                continue
            except ChatUnavailable as exc:
                log.warning(
                    "youtube live chat is over or unavailable; stopped following it",
                    extra={"live_chat_id": live_chat_id, "reason": exc.reason},
                )
                return None
            except YouTubeUnavailable:
                on_read(False, 0.0)
                log.warning("youtube chat poll failed; retrying", exc_info=True)
                await self._sleep(_RETRY_LATER_S)
                continue
            except YouTubeError:
                on_read(False, 0.0)
                log.error("youtube chat poll refused; stopped following", exc_info=True)
                return None
            read = convert.read_page(page)
            if read.problems:
                log.warning("youtube chat page partly unreadable", extra={"skipped": read.problems})
            page_token = read.next_page_token or page_token
            ended = await publish(read.items, backlog)
            if backlog:
                log.info("skipped the chat backlog", extra={"messages": len(read.items)})
                backlog = False
            if ended or read.offline_at:
                log.info(
                    "youtube live chat ended",
                    extra={"live_chat_id": live_chat_id, "offline_at": read.offline_at},
                )
                return None
            ledger = self._api.ledger
            plan = self.plan = plan_poll(
                ledger.config,
                await ledger.fresh_budget(),
                server_interval=read.polling_interval or _DEFAULT_POLL_S,
            )
            if plan.limited_by == "exhausted":
                log.error(
                    "youtube quota is spent; polling paused until the daily reset (midnight "
                    "Pacific)",
                    extra=quota_fields(),
                )
            on_read(plan.limited_by != "exhausted", plan.delay)
            if until is not None and self._clock() >= until:
                return page_token, backlog
            await self._sleep(plan.delay)
