"""A loopback stand-in for the YouTube Data API v3 live chat endpoints and Google's OAuth token URL.

Speaks the wire format the adapter uses (paths under ``/youtube/v3``, Google's error body
``{"error": {"code", "message", "errors": [{"reason", "domain", "message"}]}}``) and counts
quota units the way Google does: per request, failed ones included. Tests script it with

- ``backlog`` (the first list page), ``pages`` (later pages, one per poll) or ``page_source``
  (a function of the poll number, for long simulations); ``raw_lists`` answer the next polls
  verbatim (whole response bodies, malformed ones included) before any of those;
- ``fail(endpoint, status, reason)`` to make the next call of an endpoint fail;
- ``broadcast_live`` / ``offline_at`` / ``revoke_tokens()`` for the chat's and token's state.

Google's consent page stands at ``/auth`` (``GOOGLE_OAUTH_AUTH_URL=server.auth_url``): it checks
the installed-app request (client id, a ``127.0.0.1`` redirect, ``response_type=code``, an
S256 PKCE challenge) and redirects the browser (302) to the redirect URL with ``code`` and
``state``, or with ``error=access_denied`` when ``consent`` is ``"deny"``. ``/token`` then takes
``grant_type=authorization_code`` only with the verifier whose S256 hash is the challenge, and
issues a new refresh token: from then on only that one refreshes.

Moderation (message delete, bans): ``youtube_moderation.py``.

Inserted messages are echoed into the next page as the bot's own, as YouTube does (and to
``on_insert`` listeners: the gRPC stand-in, youtube_grpc.py, echoes them into its stream).
"""

from __future__ import annotations

import base64
import hashlib
import itertools
from collections import Counter, defaultdict, deque
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from tests.loopback.base import LoopbackServer, Recorded, ScriptedFailure
from tests.loopback.youtube_moderation import LiveChatModeration

BOT_CHANNEL_ID = "UCchorusBot0000000000000"
BOT_TITLE = "Chorus"
BOT_HANDLE = "@chorusbot"
LIVE_CHAT_ID = "oQZoCxfO7oUMBf703MdPwXb4c3EwgfI2Po4sL1oBaKbMelkCBiOS5UPOzE62l7hbC249v8wSTXcyEcVFHklmClse41wwiyO97uUyrt"
VIDEO_ID = "dQw4w9WgXcQ"
COSTS = {
    "channels": 1,
    "liveBroadcasts": 1,
    "videos": 1,
    "list": 5,
    "insert": 50,
    "token": 0,
    "delete": 50,  # liveChatMessages.delete
    "ban": 50,  # liveChatBans.insert
    "unban": 50,  # liveChatBans.delete
}
_DOMAINS = {"quotaExceeded": "youtube.quota"}


def google_error(status: int, reason: str, message: str = "") -> dict[str, Any]:
    text = message or f"scripted {reason}"
    domain = _DOMAINS.get(reason, "youtube.liveChat")
    return {
        "error": {
            "code": status,
            "message": text,
            "errors": [{"message": text, "domain": domain, "reason": reason}],
        }
    }


def text_item(
    message_id: str,
    text: str,
    *,
    author_id: str = "UCviewer0000000000000000",
    name: str = "Viewer",
    published: str = "2025-06-02T17:00:00.000Z",
    owner: bool = False,
    moderator: bool = False,
    sponsor: bool = False,
    live_chat_id: str = LIVE_CHAT_ID,
) -> dict[str, Any]:
    """A ``textMessageEvent`` resource shaped like the documented fixtures."""
    return {
        "kind": "youtube#liveChatMessage",
        "etag": "etag",
        "id": message_id,
        "snippet": {
            "type": "textMessageEvent",
            "liveChatId": live_chat_id,
            "authorChannelId": author_id,
            "publishedAt": published,
            "hasDisplayContent": True,
            "displayMessage": text,
            "textMessageDetails": {"messageText": text},
        },
        "authorDetails": {
            "channelId": author_id,
            "channelUrl": f"http://www.youtube.com/channel/{author_id}",
            "displayName": name,
            "profileImageUrl": "https://yt3.ggpht.com/photo.jpg",
            "isVerified": False,
            "isChatOwner": owner,
            "isChatSponsor": sponsor,
            "isChatModerator": moderator,
        },
    }


class YouTubeServer(LiveChatModeration, LoopbackServer):
    def __init__(
        self,
        *,
        client_id: str = "test-client.apps.googleusercontent.com",
        client_secret: str = "test-secret",
        refresh_token: str = "1//test-refresh-token",
        polling_ms: int = 5000,
    ) -> None:
        super().__init__()
        self.client_id = client_id
        self.client_secret = client_secret
        self.refresh_token = refresh_token
        self.polling_ms = polling_ms
        self.token_expires_in = 3599
        self.live_chat_id = LIVE_CHAT_ID
        self.broadcast_live = True
        self.actual_start = "2025-06-02T17:00:00Z"
        self.offline_at: str | None = None
        self.backlog: list[dict[str, Any]] = []
        self.pages: deque[list[dict[str, Any]]] = deque()
        self.raw_lists: deque[Any] = deque()
        self.page_source: Callable[[int], list[dict[str, Any]]] | None = None
        self.units = 0
        self.calls: Counter[str] = Counter()
        self.inserted: list[dict[str, Any]] = []
        self.page_tokens: list[str | None] = []
        self.token_mismatches: list[tuple[str | None, str | None]] = []
        self._failures: defaultdict[str, deque[ScriptedFailure]] = defaultdict(deque)
        self._valid_tokens: set[str] = set()
        self._token_numbers = itertools.count(1)
        self._issued_page_token: str | None = None
        self._echo: list[dict[str, Any]] = []
        self.on_insert: list[Callable[[dict[str, Any]], None]] = []
        self.consent = "allow"  # what the signed-in account answers at /auth: allow or deny
        self._codes: dict[str, tuple[str, str]] = {}  # code -> (challenge, redirect_uri)
        self.bot_is_moderator = True  # the bot's channel moderates the chat (or owns it)
        self.chat_messages: set[str] = set()  # chatters' message ids that can be deleted
        self.bans: dict[str, dict[str, Any]] = {}  # ban id -> liveChatBan resource
        self.moderation_calls: list[Recorded] = []
        self._ban_ids = itertools.count(1)

    @property
    def api_base(self) -> str:
        return f"{self.url}/youtube/v3"

    @property
    def token_url(self) -> str:
        return f"{self.url}/token"

    @property
    def auth_url(self) -> str:
        return f"{self.url}/auth"

    def fail(
        self, endpoint: str, status: int, reason: str, headers: dict[str, str] | None = None
    ) -> None:
        """Make the next call of ``endpoint`` (list, insert, videos, ...) fail with ``reason``."""
        body = google_error(status, reason)
        if endpoint == "token":
            body = {"error": reason, "error_description": f"scripted {reason}"}
        self._failures[endpoint].append(ScriptedFailure(status, body, headers or {}))

    def revoke_tokens(self) -> None:
        self._valid_tokens.clear()

    def token_valid(self, token: str) -> bool:
        """Whether ``token`` is an access token this server issued and has not revoked."""
        return token in self._valid_tokens

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/auth", self._authorize),
            web.post("/token", self._token),
            web.get("/youtube/v3/channels", self._channels),
            web.get("/youtube/v3/liveBroadcasts", self._broadcasts),
            web.get("/youtube/v3/videos", self._videos),
            web.get("/youtube/v3/liveChat/messages", self._list),
            web.post("/youtube/v3/liveChat/messages", self._insert),
            *self.moderation_routes(),
        ]

    # -- plumbing -------------------------------------------------------------------------------
    async def _begin(self, request: web.Request, endpoint: str) -> web.Response | None:
        """Record and charge the request; an error response if auth or a script says so."""
        await self.record(request)
        self.calls[endpoint] += 1
        self.units += COSTS[endpoint]
        if endpoint != "token":
            auth = request.headers.get("Authorization", "")
            if auth.removeprefix("Bearer ") not in self._valid_tokens:
                return web.json_response(
                    google_error(
                        401, "authError", "Request had invalid authentication credentials."
                    ),
                    status=401,
                )
        if self._failures[endpoint]:
            failure = self._failures[endpoint].popleft()
            return web.json_response(failure.body, status=failure.status, headers=failure.headers)
        return None

    # -- endpoints ------------------------------------------------------------------------------
    async def _authorize(self, request: web.Request) -> web.Response:
        await self.record(request)
        query = request.query
        redirect = query.get("redirect_uri", "")
        if query.get("client_id") != self.client_id:
            return web.json_response({"error": "invalid_client"}, status=401)
        if (
            query.get("response_type") != "code"
            or query.get("code_challenge_method") != "S256"
            or not query.get("code_challenge")
            or not redirect.startswith("http://127.0.0.1:")
            or "youtube.force-ssl" not in query.get("scope", "")
        ):
            return web.json_response({"error": "invalid_request"}, status=400)
        answer = {"state": query.get("state", "")}
        if self.consent == "deny":
            answer["error"] = "access_denied"
        else:
            code = f"4/0Atest-code-{next(self._token_numbers)}"
            self._codes[code] = (query["code_challenge"], redirect)
            answer |= {"code": code, "scope": query["scope"]}
        raise web.HTTPFound(f"{redirect}?{urlencode(answer)}")

    def _exchange(self, form: Any) -> web.Response:
        """``grant_type=authorization_code``: the code, its redirect and the PKCE verifier."""
        challenge, redirect = self._codes.pop(str(form.get("code", "")), ("", ""))
        verifier = str(form.get("code_verifier", "")).encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(verifier).digest()).rstrip(b"=")
        if not challenge or digest.decode() != challenge or form.get("redirect_uri") != redirect:
            return web.json_response(
                {"error": "invalid_grant", "error_description": "Bad Request"}, status=400
            )
        n = next(self._token_numbers)
        token, self.refresh_token = f"ya29.test-access-token-{n}", f"1//issued-refresh-{n}"
        self._valid_tokens.add(token)
        return web.json_response(
            {
                "access_token": token,
                "expires_in": self.token_expires_in,
                "refresh_token": self.refresh_token,
                "scope": "https://www.googleapis.com/auth/youtube.force-ssl",
                "token_type": "Bearer",
            }
        )

    async def _token(self, request: web.Request) -> web.Response:
        if (early := await self._begin(request, "token")) is not None:
            return early
        form = await request.post()
        if (
            form.get("client_id") != self.client_id
            or form.get("client_secret") != self.client_secret
        ):
            return web.json_response(
                {"error": "invalid_client", "error_description": "Unauthorized"}, status=401
            )
        if form.get("grant_type") == "authorization_code":
            return self._exchange(form)
        if (
            form.get("grant_type") != "refresh_token"
            or form.get("refresh_token") != self.refresh_token
        ):
            return web.json_response(
                {
                    "error": "invalid_grant",
                    "error_description": "Token has been expired or revoked.",
                },
                status=400,
            )
        token = f"ya29.test-access-token-{next(self._token_numbers)}"
        self._valid_tokens.add(token)
        return web.json_response(
            {
                "access_token": token,
                "expires_in": self.token_expires_in,
                "scope": "https://www.googleapis.com/auth/youtube.force-ssl",
                "token_type": "Bearer",
            }
        )

    async def _channels(self, request: web.Request) -> web.Response:
        if (early := await self._begin(request, "channels")) is not None:
            return early
        assert request.query.get("mine") == "true"
        snippet = {"title": BOT_TITLE, "customUrl": BOT_HANDLE}
        return web.json_response(
            {
                "kind": "youtube#channelListResponse",
                "items": [{"id": BOT_CHANNEL_ID, "snippet": snippet}],
            }
        )

    async def _broadcasts(self, request: web.Request) -> web.Response:
        if (early := await self._begin(request, "liveBroadcasts")) is not None:
            return early
        items = []
        if self.broadcast_live:
            snippet = {
                "channelId": "UCowner0000000000000000",
                "title": "Test stream",
                "actualStartTime": self.actual_start,
                "liveChatId": self.live_chat_id,
            }
            items.append({"kind": "youtube#liveBroadcast", "id": VIDEO_ID, "snippet": snippet})
        return web.json_response({"kind": "youtube#liveBroadcastListResponse", "items": items})

    async def _videos(self, request: web.Request) -> web.Response:
        if (early := await self._begin(request, "videos")) is not None:
            return early
        if request.query.get("id") != VIDEO_ID:
            return web.json_response({"kind": "youtube#videoListResponse", "items": []})
        details: dict[str, Any] = {"actualStartTime": self.actual_start}
        if self.broadcast_live:
            details["activeLiveChatId"] = self.live_chat_id
        return web.json_response(
            {
                "kind": "youtube#videoListResponse",
                "items": [{"id": VIDEO_ID, "liveStreamingDetails": details}],
            }
        )

    async def _list(self, request: web.Request) -> web.Response:
        if (early := await self._begin(request, "list")) is not None:
            return early
        query = request.query
        if query.get("liveChatId") != self.live_chat_id:
            return web.json_response(google_error(404, "liveChatNotFound"), status=404)
        assert query.get("part") == "snippet,authorDetails", query.get("part")
        token = query.get("pageToken")
        self.page_tokens.append(token)
        if token != self._issued_page_token:
            self.token_mismatches.append((token, self._issued_page_token))
        number = self.calls["list"]
        if self.raw_lists and not (number == 1 and token is None):
            return web.json_response(self.raw_lists.popleft())
        if number == 1 and token is None:
            items = list(self.backlog)
        elif self.page_source is not None:
            items = self.page_source(number)
        else:
            items = self.pages.popleft() if self.pages else []
        items = self._echo + items
        self._echo = []
        self._issued_page_token = f"page-{number}"
        body: dict[str, Any] = {
            "kind": "youtube#liveChatMessageListResponse",
            "etag": "etag",
            "nextPageToken": self._issued_page_token,
            "pollingIntervalMillis": self.polling_ms,
            "pageInfo": {"totalResults": len(items), "resultsPerPage": len(items)},
            "items": items,
        }
        if self.offline_at:
            body["offlineAt"] = self.offline_at
        return web.json_response(body)

    async def _insert(self, request: web.Request) -> web.Response:
        if (early := await self._begin(request, "insert")) is not None:
            return early
        assert request.query.get("part") == "snippet"
        body = self.requests[-1].body
        snippet = body["snippet"]
        if snippet.get("liveChatId") != self.live_chat_id:
            return web.json_response(google_error(404, "liveChatNotFound"), status=404)
        text = snippet["textMessageDetails"]["messageText"]
        if not text or len(text) > 200:
            return web.json_response(google_error(400, "messageTextInvalid"), status=400)
        self.inserted.append(body)
        resource = text_item(
            f"LCC.sent-{len(self.inserted)}", text, author_id=BOT_CHANNEL_ID, name=BOT_TITLE
        )
        self._echo.append(resource)
        for listener in self.on_insert:
            listener(resource)
        return web.json_response(resource)
