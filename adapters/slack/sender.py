"""The one chokepoint for every call Chorus makes to Slack.

Every Web API call, every ``response_url`` answer and every file download goes through
``SlackSender``, so rate limits, retries and backoff live in one place and call sites are
one-liners:

- **per channel, about one message per second** (Slack's documented posting limit): each
  channel has a next free slot; a send waits for its slot, so bursts are smoothed, not refused.
- **429 is retried after ``Retry-After``**. slack-sdk's ``AsyncWebClient`` retries only
  connection errors by default (no ``AsyncRateLimitErrorRetryHandler``), and its handlers sleep
  with ``asyncio.sleep``; doing it here lets tests inject ``sleep`` and assert the waits. A 429
  also pushes that channel's next slot back, so queued sends to it wait too.
- 5xx, ``internal_error``/``fatal_error`` and network errors are retried with jittered backoff
  (``bot.resilience``); anything else (``channel_not_found``, ``not_in_channel``,
  ``invalid_auth``...) raises at once: retrying cannot fix it.

- **per method and workspace** for what a streamed answer calls (``Windows``): Slack counts
  those per method, per workspace, per app, in tiers (``METHOD_RATES``, each with the page that
  documents it). A draft waits for room with part of each window kept for final answers
  (``pace``), and a final waits only for the window itself.

The sender sleeps only in the outbound worker that called it; bolt's event handlers never
wait on it for anything but a one-shot lookup with no retries.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse
from slack_sdk.webhook.async_client import AsyncWebhookClient

from adapters.slack.convert import PostArgs
from bot.resilience import (
    Attempt,
    Failure,
    GaveUp,
    RetryPolicy,
    Sleep,
    parse_retry_after,
    retry,
)

log = logging.getLogger("chorus.slack.sender")

T = TypeVar("T")

SEND_INTERVAL = 1.0
_RETRYABLE_ERRORS = frozenset(
    {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)
_MAX_CHANNEL_SLOTS = 10_000
# Calls per minute per workspace of the methods a streamed answer uses: each method's tier
# (https://docs.slack.dev/apis/web-api/rate-limits: Tier 2 is 20+ a minute, Tier 3 50+, Tier 4
# 100+), from the "Rate limits" fact of its reference page:
METHOD_RATES: dict[str, int] = {
    # https://api.slack.com/methods/chat.update: "Rate limits: Tier 3"
    "chat.update": 50,
    # https://docs.slack.dev/reference/methods/chat.appendStream: Tier 4 ("rate_limit: t4")
    "chat.appendStream": 100,
    # https://docs.slack.dev/reference/methods/chat.startStream lists no tier (checked 2026-11):
    # counted as Tier 2, the lowest tier a message-writing method has (chat.stopStream's)
    "chat.startStream": 20,
    # https://api.slack.com/methods/chat.stopStream: "Rate limits: Tier 2"
    "chat.stopStream": 20,
    # chat.delete and assistant.threads.setStatus: counted as Tier 3 (not re-checked)
    "chat.delete": 50,
    "assistant.threads.setStatus": 50,
}
DRAFT_SHARE = 0.8  # of a method's window that drafts may use; the rest is for final answers


class Windows:
    """Sliding one-minute windows of calls per method (``METHOD_RATES``)."""

    def __init__(
        self,
        rates: Mapping[str, int] | None = None,
        *,
        period: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rates = dict(METHOD_RATES if rates is None else rates)
        self.period = period
        self._clock = clock
        self._calls: dict[str, deque[float]] = {}

    def room(self, method: str, share: float = 1.0) -> float:
        """Seconds until a call of ``method`` fits within ``share`` of its window (0: now)."""
        limit = max(1, int(self.rates.get(method, 1_000_000) * share))
        calls = self._calls.setdefault(method, deque())
        now = self._clock()
        while calls and calls[0] <= now - self.period:
            calls.popleft()
        return 0.0 if len(calls) < limit else calls[-limit] + self.period - now

    async def take(self, method: str, share: float = 1.0) -> None:
        """Wait for room (real time: the window's), then count one call."""
        while True:
            wait = self.room(method, share)
            if wait <= 0:
                break
            await asyncio.sleep(wait + 0.01)
        self._calls[method].append(self._clock())


class SlackSendError(Exception):
    """A Slack call failed for good (not retryable, or retries exhausted)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        error: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.retry_after = retry_after


class SlackSender:
    """Rate-limited, retrying access to the Slack Web API for one bot token."""

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        interval: float = SEND_INTERVAL,
        policy: RetryPolicy | None = None,
        sleep: Sleep = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        http: aiohttp.ClientSession | None = None,
    ) -> None:
        self.client = client
        self.interval = interval
        self.policy = policy or RetryPolicy(
            max_retries=4, base_delay=1.0, max_retry_after=120.0, too_long="give_up"
        )
        self._sleep = sleep
        self._clock = clock
        self._next_slot: dict[str, float] = {}
        self._http = http
        self._owns_http = http is None
        self.windows = Windows(clock=clock)

    # -- call sites (one-liners) ------------------------------------------------------------
    async def post_message(self, post: PostArgs) -> AsyncSlackResponse:
        return await self.request(
            lambda: self.client.chat_postMessage(**post.as_kwargs()),
            channel=post.channel,
            what="chat.postMessage",
            idempotent=False,
        )

    async def pace(self, method: str) -> None:
        """Wait until a draft may call ``method`` (within ``DRAFT_SHARE`` of its window)."""
        while True:
            wait = self.windows.room(method, DRAFT_SHARE)
            if wait <= 0:
                return
            await asyncio.sleep(wait + 0.01)

    async def stream_call(self, method: str, **kwargs: Any) -> AsyncSlackResponse:
        """One call of a streamed answer (``chat.startStream``, ``chat.appendStream``,
        ``chat.stopStream``, ``chat.update``, ``assistant.threads.setStatus``) within its
        method's window; retried like any call unless it posts (``chat.startStream``)."""
        calls: dict[str, Callable[..., Awaitable[AsyncSlackResponse]]] = {
            "chat.startStream": self.client.chat_startStream,
            "chat.appendStream": self.client.chat_appendStream,
            "chat.stopStream": self.client.chat_stopStream,
            "chat.update": self.client.chat_update,
            "chat.delete": self.client.chat_delete,
            "assistant.threads.setStatus": self.client.assistant_threads_setStatus,
        }
        call = calls[method]
        await self.windows.take(method)
        return await self.request(
            lambda: call(**kwargs),
            what=method,
            idempotent=method not in ("chat.startStream", "chat.appendStream"),
        )

    async def respond(self, response_url: str, body: dict[str, Any], *, channel: str) -> None:
        """POST one slash-command answer to its ``response_url`` (valid 30 min, 5 uses)."""
        webhook = AsyncWebhookClient(response_url, timeout=self.client.timeout, retry_handlers=[])

        async def send() -> None:
            response = await webhook.send_dict(body)
            if response.status_code != 200:
                raise SlackSendError(
                    f"response_url answered HTTP {response.status_code}: {response.body[:200]}",
                    status=response.status_code,
                    error=response.body[:100] or None,
                    retry_after=parse_retry_after(dict(response.headers or {})),
                )

        await self.request(send, channel=channel, what="response_url", idempotent=False)

    async def user_info(self, user: str) -> Mapping[str, Any]:
        """``users.info`` once, no retries: it runs on the inbound path, where waiting is wrong."""
        response = await self.request(
            lambda: self.client.users_info(user=user), what="users.info", retries=0
        )
        found = response.get("user")
        return found if isinstance(found, Mapping) else {}

    async def download(self, url: str, *, token: str, cap: int) -> tuple[bytes, str | None]:
        """A private file's bytes (at most ``cap``) and its content type.

        Slack serves ``url_private`` only with ``Authorization: Bearer <bot token>``; without
        the ``files:read`` scope it answers 200 with an HTML sign-in page, hence the type check.
        """
        session = await self._session()
        headers = {"Authorization": f"Bearer {token}"}
        async with session.get(url, headers=headers, allow_redirects=True) as response:
            if response.status != 200:
                raise SlackSendError(
                    f"file download answered HTTP {response.status}", status=response.status
                )
            ctype = response.content_type or None
            if ctype == "text/html":
                raise SlackSendError(
                    "file download returned an HTML page; the app probably lacks the files:read "
                    "scope (reinstall it after adding the scope)"
                )
            if response.content_length is not None and response.content_length > cap:
                raise SlackSendError(f"file is {response.content_length} bytes, over {cap}")
            data = bytearray()
            async for chunk in response.content.iter_chunked(64 * 1024):
                data += chunk
                if len(data) > cap:
                    raise SlackSendError(f"file is over {cap} bytes")
            return bytes(data), ctype

    async def aclose(self) -> None:
        if self._http is not None and self._owns_http:
            await self._http.close()
        self._http = None

    # -- the chokepoint ----------------------------------------------------------------------
    async def request(
        self,
        op: Callable[[], Awaitable[T]],
        *,
        what: str,
        channel: str | None = None,
        retries: int | None = None,
        idempotent: bool = True,
    ) -> T:
        """Run ``op`` in ``channel``'s turn; retry what Slack or the network says is transient.

        A call that is not ``idempotent`` (posting a message) is not retried once it may have
        reached Slack: a timeout or a connection lost after sending could follow a post that
        went through, and Slack does not deduplicate posts. Only a refused connection (nothing
        was sent) and Slack's own answers (429, 5xx, transient errors) are retried for it."""
        policy = self.policy if retries is None else replace(self.policy, max_retries=retries)

        async def attempt() -> T:
            if channel is not None:
                await self._wait_for_slot(channel)
            return await op()

        async def wait(delay: float) -> None:
            if channel is None:
                await self._sleep(delay)
                return
            # With a channel the retry waits for its slot, pushed back so queued sends wait too.
            self._next_slot[channel] = max(self._next_slot.get(channel, 0.0), self._clock() + delay)

        def give_up(state: Attempt) -> SlackSendError:
            failure = state.failure
            if state.gave_up is GaveUp.TOO_LONG:
                return SlackSendError(
                    f"{what}: Slack asked to wait {state.delay:.0f} s, more than "
                    f"{policy.max_retry_after:.0f} s; giving up",
                    status=failure.status,
                    error=failure.reason or None,
                    retry_after=state.delay,
                )
            return SlackSendError(
                f"{what} failed after {state.attempt} attempts ({failure.reason or failure.status})",
                status=failure.status,
                error=failure.reason or None,
            )

        try:
            return await retry(
                attempt,
                _classify if idempotent else _classify_once,
                policy,
                what=what,
                sleep=wait,
                give_up=give_up,
                logger=log,
                message="slack call failed; retrying",
                extra={"call": what, "channel": channel},
            )
        except SlackSendError:
            raise
        except Exception as exc:  # not retryable: one error type for every caller
            raise _as_send_error(exc, what) from exc

    async def _wait_for_slot(self, channel: str) -> None:
        now = self._clock()
        slot = max(now, self._next_slot.get(channel, 0.0))
        self._next_slot[channel] = slot + self.interval
        if len(self._next_slot) > _MAX_CHANNEL_SLOTS:
            self._next_slot = {c: t for c, t in self._next_slot.items() if t > now}
        if slot > now:
            await self._sleep(slot - now)

    async def _session(self) -> aiohttp.ClientSession:
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
        return self._http


def _classify(exc: BaseException) -> Failure:
    """Retryable: 429, 5xx, Slack's transient ``error`` codes, the network. ``reason`` is
    Slack's ``error`` code (or the exception type), never a message that might echo a token."""
    if isinstance(exc, SlackApiError):
        response = exc.response
        status = getattr(response, "status_code", None)
        error = response.get("error") if hasattr(response, "get") else None
        retry_after = parse_retry_after(dict(getattr(response, "headers", None) or {}))
        retryable = status == 429 or (status is not None and status >= 500)
        return Failure(retryable or error in _RETRYABLE_ERRORS, status, retry_after, error or "")
    if isinstance(exc, SlackSendError):
        status = exc.status
        retryable = status is not None and (status == 429 or status >= 500)
        return Failure(retryable, status, exc.retry_after, exc.error or "")
    if isinstance(exc, aiohttp.ClientError | TimeoutError | ConnectionError):
        return Failure(True, None, None, type(exc).__name__)
    return Failure(False, None, None, type(exc).__name__)


def _classify_once(exc: BaseException) -> Failure:
    """``_classify`` for a call that must not run twice: a network failure after the request
    may have been sent is final; a connection that was never made is still retried."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return Failure(True, None, None, type(exc).__name__)
    if isinstance(exc, aiohttp.ClientError | TimeoutError | ConnectionError):
        return Failure(False, None, None, f"{type(exc).__name__} after sending; not retried")
    return _classify(exc)


def _as_send_error(exc: BaseException, what: str) -> SlackSendError:
    failure = _classify(exc)
    return SlackSendError(
        f"{what} failed: {failure.reason or failure.status or type(exc).__name__}",
        status=failure.status,
        error=failure.reason or None,
    )


def host_allowed(url: str, allowed_suffixes: tuple[str, ...]) -> bool:
    """Whether the bot token may be sent to ``url`` (a Slack file host, never anything else)."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("https", "http") or not host:
        return False
    if parts.scheme == "http" and host not in ("127.0.0.1", "localhost", "::1"):
        return False
    return any(host == s or host.endswith("." + s) for s in allowed_suffixes)


def file_hosts(api_base_url: str) -> tuple[str, ...]:
    """Hosts the bot token may be sent to for downloads: the API's domain and its subdomains.

    ``https://slack.com/api/`` -> ``slack.com`` (so ``files.slack.com``); GovSlack's
    ``https://slack-gov.com/api/`` -> ``slack-gov.com``; a loopback test server -> itself.
    """
    host = (urlsplit(api_base_url).hostname or "").lower()
    try:
        ipaddress.ip_address(host)
        return (host,)
    except ValueError:
        pass
    labels = host.split(".")
    parent = ".".join(labels[1:]) if len(labels) > 2 else host
    return tuple(dict.fromkeys((host, parent)))
