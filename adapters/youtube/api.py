"""The one chokepoint for every YouTube Data API call: OAuth, quota accounting, retries.

Every request goes through ``YouTubeAPI._call``, which

1. refuses a call today's budget cannot pay for (``QuotaExceeded`` without asking Google);
2. gets a fresh access token (refresh-token grant, renewed a minute before expiry, and once
   more on a 401);
3. charges the call's cost to the day's ledger *before* sending -- Google charges failed calls
   too -- in Redis (``bot.quota.ledger``, shared with the workers' reply budget), so a restart
   (or a second replica with the same OAuth client) does not forget what was spent; an insert
   is paid from the hold its turn reserved, or refused (``ReplyBudgetSpent``) when no hold
   covers it and it would eat into what reading the chat needs;
4. maps Google's error ``reason`` to what the caller must do: ``quotaExceeded`` -> stop until
   the reset; ``liveChatEnded``/``liveChatNotFound``/``liveChatDisabled``/``forbidden`` -> this
   chat is gone; ``rateLimitExceeded``, 429 and 5xx -> retried here with jittered backoff
   (honouring ``Retry-After``) through the injected ``sleep``; anything else -> a request error.

Why not the official client: ``google-api-python-client`` is synchronous (httplib2) and would
block the event loop, so the REST API is called with aiohttp. The chat itself is read over gRPC
(``liveChatMessages.streamList``, stream_list.py) when it can be; that connection takes its OAuth
token and its quota charge from here too (``access_token``, ``charge``), so both transports
share one token and one ledger.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

import aiohttp

from adapters.youtube import convert
from bot.quota.ledger import QuotaLedger
from bot.quota.view import Refused, Spend
from bot.resilience import Attempt, Failure, RetryPolicy, Sleep, parse_retry_after, retry
from bot.state import keys

log = logging.getLogger("chorus.youtube.api")

Clock = Callable[[], datetime]
T = TypeVar("T")

_REFRESH_EARLY = timedelta(seconds=60)
_CHAT_GONE = frozenset({"liveChatEnded", "liveChatNotFound", "liveChatDisabled", "forbidden"})
_QUOTA = frozenset({"quotaExceeded", "dailyLimitExceeded"})
_RETRY_REASONS = frozenset({"rateLimitExceeded", "userRateLimitExceeded", "backendError"})
_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


class YouTubeError(Exception):
    """A Data API call failed; ``reason`` is Google's ``errors[0].reason`` when there is one."""

    def __init__(self, message: str, *, status: int | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class QuotaExceeded(YouTubeError):
    """Today's quota is spent (Google said so, or the ledger knows it would be)."""


class ReplyBudgetSpent(YouTubeError):
    """A reply piece no hold covers would eat into the units kept for reading the chat."""


class ChatUnavailable(YouTubeError):
    """The live chat ended, was not found, is disabled, or this account may not use it."""


class YouTubeAuthError(YouTubeError):
    """The OAuth client or refresh token was rejected; the message names the variable to fix."""


class YouTubeUnavailable(YouTubeError):
    """Retries ran out (rate limit, 5xx or network)."""


def quota_key(project: str, day: str) -> str:
    """The day's quota ledger (``bot.keys.quota``). The quota belongs to the Google Cloud
    project, which the OAuth client id identifies; ``day`` is the Pacific-time quota day."""
    return keys.quota("youtube", project, day)


@dataclass(frozen=True)
class Credentials:
    client_id: str
    client_secret: str
    refresh_token: str = ""


@dataclass
class _Token:
    value: str
    expires_at: datetime


class YouTubeAPI:
    """The Data API endpoints the adapter uses, each a one-liner over ``_call``."""

    def __init__(
        self,
        credentials: Credentials,
        ledger: QuotaLedger,
        *,
        base_url: str,
        token_url: str,
        clock: Clock,
        sleep: Sleep = asyncio.sleep,
        policy: RetryPolicy | None = None,
        timeout: float = 30.0,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        # Created on first use (inside the running loop) unless injected; closed by aclose
        # only when created here.
        self._session = session
        self._owns_session = session is None
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._credentials = credentials
        self.ledger = ledger
        self._base = base_url.rstrip("/")
        self._token_url = token_url
        self._clock = clock
        self._sleep = sleep
        self._policy = policy or RetryPolicy(
            max_retries=4, base_delay=2.0, max_delay=60.0, max_retry_after=300.0
        )
        self._token: _Token | None = None
        self._token_lock = asyncio.Lock()

    async def aclose(self) -> None:
        if self._owns_session and self._session is not None:
            await self._session.close()
        self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    # -- endpoints ------------------------------------------------------------------------------
    async def my_channel(self) -> Mapping[str, Any] | None:
        """``channels.list?mine=true``: the bot's own channel (id, title, handle)."""
        page = await self._call(
            "channels.list", "GET", "/channels", {"part": "snippet", "mine": "true"}, kind="lookup"
        )
        return _first(page)

    async def active_broadcast(self) -> Mapping[str, Any] | None:
        """The authorised channel's live broadcast, if one is on air (``liveBroadcasts.list``)."""
        # broadcastStatus is one of the three mutually exclusive filters (id, mine,
        # broadcastStatus) and already means "the authorised user's"; broadcastType=all also
        # returns persistent (always-on) broadcasts, which the default "event" would not.
        params = {"part": "snippet", "broadcastStatus": "active", "broadcastType": "all"}
        page = await self._call(
            "liveBroadcasts.list", "GET", "/liveBroadcasts", params, kind="lookup"
        )
        for item in page.get("items") or []:
            if (item.get("snippet") or {}).get("liveChatId"):
                return dict(item)
        return None

    async def video(self, video_id: str) -> Mapping[str, Any] | None:
        """``videos.list`` with ``liveStreamingDetails`` (``activeLiveChatId``, start time)."""
        params = {"part": "liveStreamingDetails", "id": video_id}
        return _first(await self._call("videos.list", "GET", "/videos", params, kind="lookup"))

    async def list_messages(self, live_chat_id: str, page_token: str | None) -> Mapping[str, Any]:
        params = {"liveChatId": live_chat_id, "part": "snippet,authorDetails", "maxResults": "2000"}
        if page_token:
            params["pageToken"] = page_token
        cost = self.ledger.config.list_cost
        return await self._call(
            "liveChatMessages.list", "GET", "/liveChat/messages", params, cost=cost
        )

    async def insert_message(
        self, live_chat_id: str, text: str, *, hold: str | None = None
    ) -> Mapping[str, Any]:
        """Send one message, paid from ``hold`` (the units its turn reserved) when given."""
        body = convert.insert_body(live_chat_id, text)
        cost = self.ledger.config.insert_cost
        return await self._call(
            "liveChatMessages.insert",
            "POST",
            "/liveChat/messages",
            {"part": "snippet"},
            body=body,
            cost=cost,
            kind="reply",
            hold=hold,
        )

    # -- moderation: paid from the reply budget, like a message sent --------------------------
    async def delete_message(self, message_id: str) -> None:
        """``liveChatMessages.delete``: remove one chat message (owner or moderator only)."""
        await self._call(
            "liveChatMessages.delete",
            "DELETE",
            "/liveChat/messages",
            {"id": message_id},
            cost=self.ledger.config.moderation_cost,
            kind="reply",
        )

    async def insert_ban(
        self, live_chat_id: str, channel_id: str, seconds: int | None
    ) -> Mapping[str, Any]:
        """``liveChatBans.insert``: ban ``channel_id`` from the chat, for ``seconds``
        (``temporary``) or for good (``permanent``, ``seconds`` None); the ban resource."""
        snippet: dict[str, Any] = {
            "liveChatId": live_chat_id,
            "type": "permanent" if seconds is None else "temporary",
            "bannedUserDetails": {"channelId": channel_id},
        }
        if seconds is not None:
            snippet["banDurationSeconds"] = seconds
        return await self._call(
            "liveChatBans.insert",
            "POST",
            "/liveChat/bans",
            {"part": "snippet"},
            body={"snippet": snippet},
            cost=self.ledger.config.moderation_cost,
            kind="reply",
        )

    async def delete_ban(self, ban_id: str) -> None:
        """``liveChatBans.delete``: lift the ban ``ban_id`` (what ``insert_ban`` returned)."""
        await self._call(
            "liveChatBans.delete",
            "DELETE",
            "/liveChat/bans",
            {"id": ban_id},
            cost=self.ledger.config.moderation_cost,
            kind="reply",
        )

    # -- for calls made outside _call (the gRPC stream) ----------------------------------------
    async def access_token(self, *, renew: bool = False) -> str:
        """A valid access token; ``renew`` drops the cached one first (the server refused it)."""
        if renew:
            self._token = None
        return await self._access_token()

    async def charge(self, name: str, cost: int) -> None:
        """Charge a call before it is made; ``QuotaExceeded`` when today's budget cannot pay."""
        await self._charge(name, cost, "read", None)

    async def _charge(self, name: str, cost: int, kind: Spend, hold: str | None) -> None:
        if kind == "reply":
            try:
                await self.ledger.charge_insert(hold, cost)
            except Refused as exc:
                if exc.spent:
                    raise QuotaExceeded(f"{name}: {exc}", reason="quotaExceeded") from None
                raise ReplyBudgetSpent(f"{name}: {exc}", reason="replyBudget") from None
            return
        if self.ledger.usage.units + cost > self.ledger.config.daily_units:
            raise QuotaExceeded(f"{name}: today's YouTube quota is spent", reason="quotaExceeded")
        await self.ledger.charge(cost, kind=kind)

    # -- the chokepoint -------------------------------------------------------------------------
    async def _call(
        self,
        name: str,
        method: str,
        path: str,
        params: Mapping[str, str],
        *,
        body: Mapping[str, Any] | None = None,
        cost: int | None = None,
        kind: Spend = "read",
        hold: str | None = None,
    ) -> Mapping[str, Any]:
        cost = self.ledger.config.other_cost if cost is None else cost
        reauthorised = False

        async def attempt() -> Mapping[str, Any]:
            nonlocal reauthorised
            while True:
                if self.ledger.usage.units + cost > self.ledger.config.daily_units:
                    raise QuotaExceeded(
                        f"{name}: today's YouTube quota is spent", reason="quotaExceeded"
                    )
                token = await self._access_token()
                await self._charge(name, cost, kind, hold)
                headers = {"Authorization": f"Bearer {token}"}
                async with self._http().request(
                    method, self._base + path, params=params, json=body, headers=headers
                ) as resp:
                    if resp.status < 300:
                        return await _json(resp)
                    retry_after = parse_retry_after(dict(resp.headers))
                    reason, message = _error(await _json(resp))
                if resp.status == 401 and not reauthorised:
                    reauthorised = True
                    self._token = None  # expired or revoked early: refresh once and try again
                    continue
                if reason in _QUOTA:
                    await self.ledger.exhaust()
                    raise QuotaExceeded(f"{name}: {message}", status=resp.status, reason=reason)
                if reason in _CHAT_GONE:
                    raise ChatUnavailable(f"{name}: {message}", status=resp.status, reason=reason)
                retryable = resp.status in _RETRY_STATUS or reason in _RETRY_REASONS
                raise _Failed(resp.status, reason, message, retry_after, retry=retryable)

        def give_up(state: Attempt) -> YouTubeUnavailable:
            failure = state.failure
            return YouTubeUnavailable(
                f"{name}: gave up after {state.attempt} attempts "
                f"({failure.reason or failure.status})",
                status=failure.status,
                reason=failure.reason,
            )

        try:
            return await self._retry(attempt, name, give_up)
        except _Failed as exc:  # not retryable
            raise YouTubeError(
                f"{name}: HTTP {exc.status} {exc.reason}: {exc.message}",
                status=exc.status,
                reason=exc.reason,
            ) from None

    async def _retry(
        self,
        op: Callable[[], Awaitable[T]],
        name: str,
        give_up: Callable[[Attempt], YouTubeError],
    ) -> T:
        return await retry(
            op,
            _classify,
            self._policy,
            what=name,
            sleep=self._sleep,
            give_up=give_up,
            logger=log,
            message="youtube call failed; retrying",
            extra={"call": name},
        )

    # -- OAuth ----------------------------------------------------------------------------------
    async def _access_token(self) -> str:
        async with self._token_lock:
            token = self._token
            if token is None or self._clock() >= token.expires_at - _REFRESH_EARLY:
                token = self._token = await self._refresh()
            return token.value

    async def _refresh(self) -> _Token:
        """The refresh-token grant (RFC 6749 §6) against ``GOOGLE_OAUTH_TOKEN_URL``."""
        form = {
            "client_id": self._credentials.client_id,
            "client_secret": self._credentials.client_secret,
            "refresh_token": self._credentials.refresh_token,
            "grant_type": "refresh_token",
        }

        async def attempt() -> _Token:
            async with self._http().post(self._token_url, data=form) as resp:
                status = resp.status
                retry_after = parse_retry_after(dict(resp.headers))
                payload = await _json(resp)
            if status < 300 and payload.get("access_token"):
                lifetime = float(payload.get("expires_in") or 3600)
                log.info("youtube access token refreshed", extra={"expires_in_s": lifetime})
                return _Token(
                    str(payload["access_token"]), self._clock() + timedelta(seconds=lifetime)
                )
            error = str(payload.get("error") or "")
            if status < 500 and status != 429:
                raise YouTubeAuthError(_auth_message(error, payload), status=status, reason=error)
            raise _Failed(status, error, error, retry_after, retry=True)  # 429, 5xx

        def give_up(state: Attempt) -> YouTubeUnavailable:
            failure = state.failure
            return YouTubeUnavailable(
                f"the Google token endpoint is unavailable ({failure.reason or failure.status})"
            )

        return await self._retry(attempt, "oauth2.token", give_up)


class _Failed(Exception):
    """A Data API or token call answered with an error that is not one of the typed ones."""

    def __init__(
        self, status: int, reason: str, message: str, retry_after: float | None, *, retry: bool
    ) -> None:
        super().__init__(f"HTTP {status} {reason}")
        self.status, self.reason, self.message = status, reason, message
        self.failure = Failure(retry, status, retry_after, reason)


def _classify(exc: BaseException) -> Failure:
    """Retried: what the call site marked retryable (rate limits, 5xx) and the network. Quota,
    chat-gone and auth errors are raised as their own types and never retried."""
    if isinstance(exc, _Failed):
        return exc.failure
    if isinstance(exc, aiohttp.ClientError | TimeoutError):
        return Failure(True, None, None, type(exc).__name__)
    return Failure(False)


def _auth_message(error: str, payload: Mapping[str, Any]) -> str:
    detail = str(payload.get("error_description") or error or "rejected")
    if error == "invalid_grant":
        return (
            f"YOUTUBE_REFRESH_TOKEN was rejected ({detail}): it was revoked, or it expired "
            "(an OAuth app left in 'Testing' gets 7-day refresh tokens); get a new one (docs/platforms/youtube.md)"
        )
    if error in ("invalid_client", "unauthorized_client"):
        return (
            f"YOUTUBE_CLIENT_ID / YOUTUBE_CLIENT_SECRET were rejected ({detail}); copy them "
            "from https://console.cloud.google.com/apis/credentials"
        )
    return f"the Google token endpoint refused the refresh token ({detail})"


async def _json(resp: aiohttp.ClientResponse) -> dict[str, Any]:
    try:
        data = await resp.json(content_type=None)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _error(payload: Mapping[str, Any]) -> tuple[str, str]:
    """Google's ``(reason, message)`` from ``{"error": {"errors": [{"reason": ...}], ...}}``."""
    error = payload.get("error")
    if not isinstance(error, dict):
        return "", str(error or "no error body")
    details = error.get("errors") or [{}]
    first = details[0] if isinstance(details[0], dict) else {}
    reason = str(first.get("reason") or error.get("status") or "")
    return reason, str(error.get("message") or first.get("message") or reason)


def _first(page: Mapping[str, Any]) -> Mapping[str, Any] | None:
    items = page.get("items") or []
    return dict(items[0]) if items else None
