"""The YouTube live chat adapter: find the chat, read it (streamed, or polled on a quota plan),
send replies.

Two tasks: the *poller* finds the live chat (``YOUTUBE_VIDEO_ID``'s, or the authorised
channel's active broadcast), skips the backlog (the first page: old messages are not answered),
then reads it. By default (``YOUTUBE_READ_MODE=auto``) it reads over the gRPC
``liveChatMessages.streamList`` stream, which spends no polling quota (chat_stream.py); when the
stream is unavailable it polls ``liveChatMessages.list`` with the page token on the quota plan
(polling.py), and after an outage tries the stream again every ``_STREAM_RETRY``. Both readers
publish through ``_publish``, which drops message ids already handled, so switching between
them repeats nothing. The *sender* consumes ``outbound:youtube``
and inserts each reply. All REST calls go through ``YouTubeAPI`` (api.py), the one chokepoint
for OAuth, retries and quota; the stream takes its token and quota charge from it too.

When the chat ends (``liveChatEnded``/``liveChatNotFound``/``liveChatDisabled``/``forbidden``, a
``chatEndedEvent`` or ``offlineAt``) the poller stops following it. Following a chat begins with
a ``stream_online`` channel event and its end publishes ``stream_offline``, for the plugins. With ``YOUTUBE_VIDEO_ID`` the
adapter is then done; for a channel it looks for the next broadcast every
``YOUTUBE_BROADCAST_CHECK_SECONDS``. ``quotaExceeded`` pauses everything until the quota day
resets (midnight Pacific). The quota is shared with the workers' reply budget through
``bot.quota.ledger`` (the adapter says which chat it reads and how; replies are paid from the
holds their turns reserved). ``quota_status`` exposes the day's spend and what the budget has
left for metrics, and a log line reports it, by kind, every five minutes. ``ready()`` (``/readyz``'s ``adapter:youtube``) is whether the
chat stream is open, or the last read of the API answered and the next one is not overdue:
False while the API keeps failing or the quota is spent, True again after the next good read.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from adapters.youtube import convert
from adapters.youtube.api import (
    ChatUnavailable,
    Clock,
    Credentials,
    QuotaExceeded,
    YouTubeAPI,
    YouTubeAuthError,
    YouTubeError,
    YouTubeUnavailable,
)
from adapters.youtube.chat_stream import SeenIds, StreamReader
from adapters.youtube.moderation import YouTubeModeration
from adapters.youtube.polling import Poller
from adapters.youtube.sender import Sender
from adapters.youtube.settings import check
from bot.bus.base import EventBus
from bot.bus.topics import DELETIONS, INBOUND
from bot.events import ChatMessage, MessageDeleted
from bot.quota.day import RESET_SLACK, next_reset, quota_day
from bot.quota.ledger import QuotaLedger
from bot.quota.plan import QuotaConfig, Reading
from bot.resilience import Sleep
from bot.settings import YouTubeSettings
from bot.state.connect import Client

log = logging.getLogger("chorus.youtube")

PLATFORM = convert.PLATFORM
_QUOTA_LOG_EVERY = timedelta(minutes=5)
_READ_GRACE = timedelta(seconds=60)  # how late the next read may be (its own retries)
_STOP_S = 10.0
_STREAM_RETRY = timedelta(minutes=10)  # polling after a stream outage tries the stream again
T = TypeVar("T")


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class QuotaStatus:
    """The day's quota, for metrics and the log (``units_remaining`` includes every reserve)."""

    day: str
    units_spent: int
    units_remaining: int
    inserts: int
    poll_interval_s: float | None
    limited_by: str | None
    resets_at: datetime
    reading: str | None = None  # "stream" or "poll" while a chat is followed
    held: int = 0  # reserved by replies decided, not yet sent
    reading_reserve: int = 0  # kept for reading the chat until the reset
    mention_reserve: int = 0  # kept for the mentions expected over the rest of the stream
    reply_units_left: int = 0  # what mentions may still use
    room_units: int = 0  # what unprompted turns may still use


@dataclass(frozen=True)
class _Chat:
    live_chat_id: str
    started_at: datetime


class YouTubeAdapter:
    platform = PLATFORM

    def __init__(
        self,
        bus: EventBus,
        settings: YouTubeSettings,
        api: YouTubeAPI,
        *,
        clock: Clock = _utcnow,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.bus = bus
        self.settings = settings
        self.api = api
        self.moderation = YouTubeModeration(api)  # delete, timeout, ban: quota-paid
        self._clock = clock
        self._sleep = sleep
        self._bot_channel_id = ""
        self._bot_names: tuple[str, ...] = ()
        self._seen = SeenIds()
        self._sender = Sender(
            bus,
            api,
            max_pieces=settings.max_pieces,
            seen=self._seen,
            quota_fields=self._quota_fields,
        )
        self._stream = (
            StreamReader(api, settings, clock=clock, sleep=sleep)
            if settings.read_mode != "poll"
            else None
        )
        self._polling = Poller(api, clock=clock, sleep=sleep)
        self._reading: str | None = None  # "stream" or "poll" while a chat is followed
        self._quota_logged_at: datetime | None = None
        self._quota_log: asyncio.Task[None] | None = None
        self._poller: asyncio.Task[None] | None = None
        self._sending: asyncio.Task[None] | None = None
        self._closing = False
        self._fresh_until: datetime | None = None  # ready until then (the next read is due)

    @classmethod
    def from_section(
        cls, settings: YouTubeSettings, bus: EventBus, redis: Client
    ) -> YouTubeAdapter:
        """The adapter of the settings root's YouTube section (``YOUTUBE_REFRESH_TOKEN`` is
        set); ``ConfigError`` when incomplete."""
        return cls.from_settings(bus, redis, settings)

    @classmethod
    def from_settings(
        cls,
        bus: EventBus,
        redis: Client,
        settings: YouTubeSettings,
        *,
        clock: Clock = _utcnow,
        sleep: Sleep = asyncio.sleep,
    ) -> YouTubeAdapter:
        check(settings)
        assert settings.client_id and settings.client_secret and settings.refresh_token
        credentials = Credentials(
            client_id=settings.client_id.strip(),
            client_secret=settings.client_secret.get_secret_value().strip(),
            refresh_token=settings.refresh_token.get_secret_value().strip(),
        )
        ledger = QuotaLedger(
            redis, QuotaConfig.from_settings(settings), project=credentials.client_id, clock=clock
        )
        api = YouTubeAPI(
            credentials,
            ledger,
            base_url=settings.api_base_url,
            token_url=settings.token_url,
            clock=clock,
            sleep=sleep,
            timeout=settings.http_timeout,
        )
        return cls(bus, settings, api, clock=clock, sleep=sleep)

    # -- lifecycle ------------------------------------------------------------------------------
    async def run(self) -> None:
        """Follow live chats until ``aclose`` (or until a configured video's chat is over)."""
        self._poller = asyncio.create_task(self._watch(), name="youtube-poller")
        self._sending = asyncio.create_task(self._sender.run(), name="youtube-sender")
        try:
            await self._poller
        except asyncio.CancelledError:
            if not self._closing:
                raise
        finally:
            await _cancel(self._sending)

    async def ready(self) -> bool:
        """Connected: the chat stream is open and answering, or the last read (a streamed
        response, a chat poll, or the broadcast lookup while no chat is live) succeeded and the
        next is not overdue. No request is made. (An open stream may push nothing for minutes
        in a quiet chat; it is still connected.)"""
        if self._closing:
            return False
        if self._stream is not None and self._stream.connected:
            return True
        fresh_until = self._fresh_until
        return fresh_until is not None and self._clock() <= fresh_until

    def _read(self, ok: bool, next_in: float = 0.0) -> None:
        """Record a read's outcome; ``next_in`` seconds until the next one is due."""
        self._fresh_until = self._clock() + timedelta(seconds=next_in) + _READ_GRACE if ok else None

    async def aclose(self) -> None:
        self._closing = True
        await _cancel(self._poller)
        await _cancel(self._sending)
        await _cancel(self._quota_log)
        await self.api.aclose()

    @property
    def quota_status(self) -> QuotaStatus:
        now = self._clock()
        usage, plan = self.api.ledger.usage, self._polling.plan
        budget = self.api.ledger.budget()
        return QuotaStatus(
            day=quota_day(now),
            units_spent=usage.units,
            units_remaining=max(0, self.api.ledger.config.daily_units - usage.units),
            inserts=usage.inserts,
            poll_interval_s=round(plan.delay, 3) if plan else None,
            limited_by=plan.limited_by if plan else None,
            resets_at=next_reset(now),
            reading=self._reading,
            held=usage.held,
            reading_reserve=budget.reading,
            mention_reserve=budget.mentions,
            reply_units_left=budget.replies_left,
            room_units=budget.room,
        )

    # -- finding the chat -----------------------------------------------------------------------
    async def _watch(self) -> None:
        await self.api.ledger.load()
        try:
            await self._retrying(self._identify)
            while True:
                chat = await self._retrying(self._find_chat)
                if chat is not None:
                    await self._follow(chat)
                    if self.settings.video_id:
                        log.info(
                            "the configured video's live chat is over; youtube adapter done",
                            extra={"video_id": self.settings.video_id},
                        )
                        return
                else:
                    self._read(True, self.settings.broadcast_check_seconds)
                    log.info(
                        "no active youtube live chat; looking again later",
                        extra={
                            "video_id": self.settings.video_id,
                            "check_s": self.settings.broadcast_check_seconds,
                        },
                    )
                await self._sleep(self.settings.broadcast_check_seconds)
        except YouTubeAuthError as exc:
            log.error("youtube adapter stopped: %s", exc)
            raise

    async def _identify(self) -> None:
        channel = await self.api.my_channel()
        if channel is None:
            raise YouTubeAuthError(
                "the Google account of YOUTUBE_REFRESH_TOKEN has no YouTube channel; "
                "authorise with the account (or brand account) of the bot's channel"
            )
        snippet = channel.get("snippet") or {}
        self._bot_channel_id = str(channel["id"])
        names = [self.settings.bot_name, snippet.get("title"), snippet.get("customUrl")]
        self._bot_names = tuple(str(n) for n in names if n)
        log.info(
            "youtube bot identity",
            extra={"channel_id": self._bot_channel_id, "names": list(self._bot_names)},
        )

    async def _find_chat(self) -> _Chat | None:
        if self.settings.video_id:
            video = await self.api.video(self.settings.video_id)
            details = (video or {}).get("liveStreamingDetails") or {}
            chat_id, started = details.get("activeLiveChatId"), details.get("actualStartTime")
        else:
            broadcast = await self.api.active_broadcast()
            snippet = (broadcast or {}).get("snippet") or {}
            chat_id, started = snippet.get("liveChatId"), snippet.get("actualStartTime")
        if not chat_id:
            return None
        return _Chat(str(chat_id), convert.parse_time(started) or self._clock())

    async def _retrying(self, lookup: Callable[[], Awaitable[T]]) -> T:
        """Run a lookup until it answers: waiting out a spent quota or an outage."""
        while True:
            try:
                return await lookup()
            except QuotaExceeded:
                await self._wait_for_reset()
            except YouTubeAuthError:
                raise
            except (YouTubeUnavailable, ChatUnavailable):
                self._read(False)
                log.warning("youtube lookup failed; retrying later", exc_info=True)
                await self._sleep(self.settings.broadcast_check_seconds)
            except YouTubeError:
                self._read(False)
                log.error("youtube lookup refused; retrying later", exc_info=True)
                await self._sleep(self.settings.broadcast_check_seconds)

    async def _wait_for_reset(self) -> None:
        now = self._clock()
        resets_at = next_reset(now)
        self._read(False)
        log.error(
            "youtube quota exhausted: polling paused until the daily reset (midnight Pacific)",
            extra={"resets_at": resets_at.isoformat(), **self._quota_fields()},
        )
        await self._sleep((resets_at - now + RESET_SLACK).total_seconds())

    # -- reading --------------------------------------------------------------------------------
    async def _follow(self, chat: _Chat) -> None:
        """Read one chat until it is over: streamed when possible, else polled."""
        ctx = convert.ChatContext(
            live_chat_id=chat.live_chat_id,
            bot_channel_id=self._bot_channel_id,
            bot_names=self._bot_names,
            unaddressed=self.settings.unaddressed,
        )
        log.info("following youtube live chat", extra={"live_chat_id": chat.live_chat_id})

        async def publish(items: Sequence[Mapping[str, Any]], backlog: bool) -> bool:
            return await self._publish(items, ctx, backlog=backlog)

        where: tuple[str | None, bool] | None = (None, True)  # page token, backlog
        await self.bus.publish(INBOUND, convert.stream_state(ctx, online=True))
        try:
            while where is not None:
                page_token, backlog = where
                stream_again: datetime | None = None
                if self._stream is not None and self._stream.disabled is None:
                    self._polling.plan = None
                    await self._reading_by(chat, "stream")
                    end = await self._stream.read(
                        chat.live_chat_id,
                        publish=publish,
                        wait_for_reset=self._wait_for_reset,
                        on_read=self._on_read,
                        page_token=page_token,
                        backlog=backlog,
                    )
                    if end.ended:
                        break
                    page_token, backlog = end.page_token, end.backlog
                    if end.retry_later:
                        stream_again = self._clock() + _STREAM_RETRY
                await self._reading_by(chat, "poll")
                where = await self._polling.read(
                    chat.live_chat_id,
                    publish=publish,
                    wait_for_reset=self._wait_for_reset,
                    on_read=self._on_read,
                    quota_fields=self._quota_fields,
                    page_token=page_token,
                    backlog=backlog,
                    until=stream_again,
                )
            await self.bus.publish(INBOUND, convert.stream_state(ctx, online=False))
        finally:
            self._reading = None

    async def _reading_by(self, chat: _Chat, reading: Reading) -> None:
        """Tell the shared ledger which chat is read, and how (the reply budget plans on it)."""
        self._reading = reading
        await self.api.ledger.follow(chat.started_at, reading)

    def _on_read(self, ok: bool, next_in: float) -> None:
        """A read of the chat (a streamed response, a poll) answered or failed."""
        self._read(ok, next_in)
        now = self._clock()
        if ok and (
            self._quota_logged_at is None or now - self._quota_logged_at >= _QUOTA_LOG_EVERY
        ):
            self._quota_logged_at = now
            self._quota_log = asyncio.create_task(self._log_quota(), name="youtube-quota-log")

    async def _log_quota(self) -> None:
        await self.api.ledger.fresh_budget()  # the spend by kind, what the budget has left
        log.info("youtube quota", extra=self._quota_fields())

    def _quota_fields(self) -> dict[str, object]:
        status = self.quota_status
        return {
            "quota_day": status.day,
            "units_spent": status.units_spent,
            "units_remaining": status.units_remaining,
            "inserts": status.inserts,
            "poll_interval_s": status.poll_interval_s,
            "limited_by": status.limited_by,
            "reading": status.reading,
            "units_by_kind": dict(self.api.ledger.by_kind),
            "held": status.held,
            "reading_reserve": status.reading_reserve,
            "mention_reserve": status.mention_reserve,
            "reply_units_left": status.reply_units_left,
            "room_units": status.room_units,
        }

    async def _publish(
        self, items: Sequence[Mapping[str, Any]], ctx: convert.ChatContext, *, backlog: bool
    ) -> bool:
        """Publish a page's events (not the backlog's, none twice); True when the chat ended."""
        ended = False
        for item in items:
            if convert.is_chat_end(item):
                ended = True
                continue
            message_id = item.get("id")
            if isinstance(message_id, str) and message_id:
                if message_id in self._seen:  # read before, or our own message echoed back
                    continue
                self._seen.add(message_id)
            if backlog:
                continue
            try:
                event = convert.to_event(item, ctx)
            except ValueError as exc:  # convert.Malformed, or the event model refusing a value
                log.warning(
                    "dropping a malformed youtube chat item",
                    extra={"message_id": str(item.get("id"))[:100], "reason": str(exc)[:300]},
                )
                continue
            if isinstance(event, ChatMessage):
                self._sender.remember(event.author.id, event.author.display_name)
                await self.bus.publish(INBOUND, event)
            elif isinstance(event, MessageDeleted):
                await self.bus.publish(DELETIONS, event)
        return ended


async def _cancel(task: asyncio.Task[None] | None) -> None:
    """Cancel ``task`` and wait for it, at most ``_STOP_S``: shutdown is never held up by a
    task stuck in a library that does not let go (it is left to end with the loop, logged)."""
    if task is None:
        return
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=_STOP_S)
    if not done:
        log.warning("youtube task did not stop when cancelled", extra={"task": task.get_name()})
    elif not task.cancelled() and task.exception() is not None:
        log.warning("youtube task failed while stopping", exc_info=task.exception())
