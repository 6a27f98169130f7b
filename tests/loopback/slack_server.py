"""A loopback stand-in for Slack: the Web API, private files, response_url and Socket Mode.

Point the real ``slack_sdk.AsyncWebClient`` at ``server.api_url`` (the value for
``SLACK_API_BASE_URL``, ending in ``/api/``). Shapes follow the Web API reference
(https://docs.slack.dev/reference/methods): every answer is HTTP 200 ``{"ok": true, ...}``, an
error is HTTP 200 ``{"ok": false, "error": "invalid_auth"}``, and rate limiting is HTTP 429 with
``Retry-After`` and ``{"ok": false, "error": "ratelimited"}``.

- ``POST /api/auth.test`` -> the bot's identity for a token in ``bot_tokens``, else
  ``invalid_auth``;
- ``POST /api/chat.postMessage`` -> recorded, answered with a fresh ``ts``; queued
  ``failures`` (``server.rate_limit(seconds)``) are answered first;
- the methods of a streamed answer: ``chat.startStream`` (needs ``thread_ts``; outside a DM
  ``recipient_user_id`` and ``recipient_team_id``; ``unknown_method`` while ``streaming`` is
  off), ``chat.appendStream`` / ``chat.stopStream`` (``message_not_in_streaming_state`` once
  stopped), ``chat.update``, ``chat.delete``, ``assistant.threads.setStatus``. ``messages`` is
  every live message as it is now (``text``, or the streamed ``markdown``), ``method_calls``
  the time of every Web API call (for rate checks);
- ``GET|POST /api/users.info`` -> ``users[user]`` or a plain member;
- ``POST /api/apps.connections.open`` -> a ``ws://`` URL of this server for an app token in
  ``app_tokens``, else ``invalid_auth``;
- ``GET /files/<name>`` -> ``files[name]`` with ``Authorization: Bearer <bot token>``, 403
  without it;
- ``POST /response/<id>`` -> recorded (a slash command's ``response_url``);
- ``GET /socket`` -> a Socket Mode websocket: ``hello`` on connect, then the envelopes pushed
  with ``send_envelope``; acks are recorded. ``drop_socket()`` closes it from the server side;
  while ``refuse_sockets`` is set new connections get 503 (counted in ``refused_sockets``).

An app installed in many workspaces (``add_workspace``): ``GET /oauth/v2/authorize`` is the
consent page a browser is sent to (it "approves" at once: 302 to ``redirect_uri`` with a
one-time ``code`` and the ``state`` it was given; ``team=`` picks the workspace, as Slack's own
parameter does); ``POST /api/oauth.v2.access`` checks the client id and secret (HTTP Basic, as
slack-sdk sends them) and exchanges the code for a bot token of that workspace (with
``refresh_token`` and ``expires_in`` where ``rotating``), or a refresh token for a new token pair
(``grant_type=refresh_token``; the refresh token works once). Each token answers ``auth.test``
with its own workspace's identity, and ``chat.postMessage`` into a channel of one workspace
(``channel_teams``) with another workspace's token is ``channel_not_found``; a revoked token
(``revoke_team``) is ``invalid_auth``. An Enterprise Grid org (``add_org``) installs org-wide
(``team=`` its enterprise id): ``oauth.v2.access`` answers ``is_enterprise_install: true``, the
``enterprise`` and no ``team``, and the org's token posts into the channels of every workspace
of the org (``team_orgs``), of no other.

Tests await ``wait_for(predicate)`` (a condition notified on every request), never sleep.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode

from aiohttp import WSMsgType, web

from tests.loopback.base import LoopbackServer, Recorded, ScriptedFailure

BOT_USER_ID = "UBOT0001"
BOT_ID = "BBOT0001"
TEAM_ID = "T111"
WAIT_LIMIT = 5.0
CLIENT_ID = "1111.2222"
CLIENT_SECRET = "loopback-client-secret"
APP_ID = "A0CHORUS"


@dataclass
class Workspace:
    """One workspace the app can be installed in, and what the loopback issued for it."""

    team_id: str
    name: str
    bot_user_id: str
    bot_id: str
    rotating: bool = False
    tokens: list[str] = field(default_factory=list)  # every bot token issued, oldest first
    refresh_tokens: set[str] = field(default_factory=set)  # still usable
    expires_in: int = 43200  # of the token an install issues
    refreshed_expires_in: int = 43200  # of the tokens a refresh issues
    org: bool = False  # an Enterprise Grid org installed org-wide (team_id: its enterprise id)


class SlackServer(LoopbackServer):
    def __init__(self, *, bot_token: str = "xoxb-test-token", app_token: str = "xapp-test") -> None:
        super().__init__()
        self.bot_tokens = {bot_token}
        self.app_tokens = {app_token}
        self.users: dict[str, dict[str, Any]] = {}
        self.files: dict[str, tuple[bytes, str]] = {}
        self.acks: list[dict[str, Any]] = []
        self.socket_connections = 0
        self.refuse_sockets = False
        self.refused_sockets = 0
        self._ts = itertools.count(1)
        self._changed: asyncio.Condition | None = None
        self._sockets: list[web.WebSocketResponse] = []
        self.stall_posts: asyncio.Event | None = None  # set: chat.postMessage waits for it
        self.streaming = True  # the app may use chat.startStream (else: unknown_method)
        self.messages: dict[str, dict[str, Any]] = {}  # ts -> the message as it is now
        self.method_calls: list[tuple[float, str]] = []  # (monotonic, method)
        self.workspaces: dict[str, Workspace] = {}
        self.channel_teams: dict[str, str] = {}  # channel -> team, for per-team token checks
        self.team_orgs: dict[str, str] = {}  # team -> the enterprise (org) it belongs to
        self._codes: dict[str, str] = {}  # one-time OAuth code -> team
        self._token_teams: dict[str, str] = {}  # issued bot token -> team

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/api/auth.test", self._auth_test),
            web.get("/oauth/v2/authorize", self._authorize),
            web.post("/api/oauth.v2.access", self._oauth_access),
            web.post("/api/chat.postMessage", self._post_message),
            web.post(
                "/api/{method:chat\\.[a-zA-Z]+Stream|chat\\.update|chat\\.delete}", self._stream
            ),
            web.post("/api/assistant.threads.setStatus", self._stream),
            web.route("*", "/api/users.info", self._users_info),
            web.post("/api/apps.connections.open", self._connections_open),
            web.get("/files/{name}", self._file),
            web.post("/response/{id}", self._response),
            web.get("/socket", self._socket),
        ]

    # -- helpers for tests ------------------------------------------------------------------
    def add_workspace(
        self, team_id: str, *, channels: tuple[str, ...] = (), rotating: bool = False
    ) -> Workspace:
        """A workspace the app can be installed in, owning ``channels``."""
        n = len(self.workspaces) + 1
        space = Workspace(team_id, f"Team {n}", f"UBOT{n:04d}", f"BBOT{n:04d}", rotating)
        self.workspaces[team_id] = space
        self.channel_teams.update({channel: team_id for channel in channels})
        return space

    def add_org(self, enterprise_id: str, teams: dict[str, tuple[str, ...]]) -> Workspace:
        """An Enterprise Grid org of ``teams`` (team -> its channels), installed org-wide."""
        org = self.add_workspace(enterprise_id)
        org.org = True
        for team, channels in teams.items():
            self.team_orgs[team] = enterprise_id
            self.channel_teams.update({channel: team for channel in channels})
        return org

    @property
    def authorize_url(self) -> str:
        return f"{self.url}/oauth/v2/authorize"

    def revoke_team(self, team_id: str) -> None:
        """Every token of the workspace stops working (the app was uninstalled there)."""
        for token in self.workspaces[team_id].tokens:
            self._token_teams.pop(token, None)
        self.workspaces[team_id].refresh_tokens.clear()

    def token_team(self, token: str) -> str | None:
        return self._token_teams.get(token)

    @property
    def api_url(self) -> str:
        return f"{self.url}/api/"

    def file_url(self, name: str) -> str:
        return f"{self.url}/files/{name}"

    def response_url(self, name: str = "") -> str:
        return f"{self.url}/response/{name or uuid.uuid4().hex}"

    def rate_limit(self, seconds: int) -> None:
        self.failures.append(
            ScriptedFailure(
                429, {"ok": False, "error": "ratelimited"}, {"Retry-After": str(seconds)}
            )
        )

    def calls(self, path: str) -> list[Recorded]:
        return [r for r in self.requests if r.path == path]

    @property
    def posts(self) -> list[dict[str, Any]]:
        return [r.body for r in self.calls("/api/chat.postMessage")]

    @property
    def responses(self) -> list[dict[str, Any]]:
        return [r.body for r in self.requests if r.path.startswith("/response/")]

    async def wait_for(self, predicate: Callable[[], bool], limit: float = WAIT_LIMIT) -> None:
        """Until ``predicate()`` holds after some request (bounded by ``limit`` seconds)."""
        changed = self._condition()
        async with asyncio.timeout(limit), changed:
            await changed.wait_for(predicate)

    async def wait_acked(self, envelope_id: str) -> None:
        await self.wait_for(lambda: any(a.get("envelope_id") == envelope_id for a in self.acks))

    async def send_envelope(self, kind: str, payload: dict[str, Any]) -> str:
        """Push one Socket Mode envelope (``events_api``, ``slash_commands``) to the client."""
        envelope_id = uuid.uuid4().hex
        socket = self._sockets[-1]
        await socket.send_json(
            {
                "envelope_id": envelope_id,
                "type": kind,
                "payload": payload,
                "accepts_response_payload": kind != "events_api",
                "retry_attempt": 0,
                "retry_reason": "",
            }
        )
        return envelope_id

    async def drop_socket(self) -> None:
        """Close the live websocket from the server side, as Slack does on a refresh."""
        for socket in list(self._sockets):
            await socket.close()

    # -- handlers ---------------------------------------------------------------------------
    def _condition(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    async def _notify(self) -> None:
        changed = self._condition()
        async with changed:
            changed.notify_all()

    async def _record(self, request: web.Request) -> Recorded:
        rec = await self.record(request)
        if isinstance(rec.body, str) and "=" in rec.body:
            rec.body = dict(parse_qsl(rec.body))  # form-encoded Web API arguments
        return rec

    def _token(self, request: web.Request) -> str:
        return request.headers.get("Authorization", "").removeprefix("Bearer ").strip()

    async def _auth_test(self, request: web.Request) -> web.Response:
        await self._record(request)
        await self._notify()
        team = self._token_teams.get(self._token(request))
        if team is not None:
            space = self.workspaces[team]
            answer = {
                "ok": True,
                "url": f"https://{team.lower()}.slack.com/",
                "team": space.name,
                "user": "chorus",
                "team_id": team,
                "user_id": space.bot_user_id,
                "bot_id": space.bot_id,
                "is_enterprise_install": space.org,
            }
            if space.org:  # an org-wide token: the org for team and enterprise
                answer["enterprise_id"] = team
            return web.json_response(answer)
        if self._token(request) not in self.bot_tokens:
            return web.json_response({"ok": False, "error": "invalid_auth"})
        return web.json_response(
            {
                "ok": True,
                "url": "https://chorus-test.slack.com/",
                "team": "Chorus Test",
                "user": "chorus",
                "team_id": TEAM_ID,
                "user_id": BOT_USER_ID,
                "bot_id": BOT_ID,
                "is_enterprise_install": False,
            }
        )

    async def _post_message(self, request: web.Request) -> web.Response:
        self.method_calls.append((time.monotonic(), "chat.postMessage"))
        rec = await self._record(request)
        try:
            if self.stall_posts is not None:  # recorded, then no answer until released
                await self._notify()
                await self.stall_posts.wait()
            failure = self.next_failure()
            if failure is not None:
                return failure
            token = self._token(request)
            body = rec.body or {}
            team = self._token_teams.get(token)
            if team is None and token not in self.bot_tokens:
                return web.json_response({"ok": False, "error": "invalid_auth"})
            owner = self.channel_teams.get(str(body.get("channel")))
            if owner is not None and team not in (owner, self.team_orgs.get(owner)):
                # not a channel of this token's workspace (or of its org)
                return web.json_response({"ok": False, "error": "channel_not_found"})
            ts = f"1700000000.{next(self._ts):06d}"
            self.messages[ts] = {
                "channel": body.get("channel"),
                "thread_ts": body.get("thread_ts"),
                "text": body.get("text"),
            }
            return web.json_response(
                {
                    "ok": True,
                    "channel": body.get("channel"),
                    "ts": ts,
                    "message": {"text": body.get("text"), "user": BOT_USER_ID, "ts": ts},
                }
            )
        finally:
            await self._notify()

    async def _authorize(self, request: web.Request) -> web.Response:
        """Slack's consent page, approved at once: back to the app with a code and the state."""
        await self._record(request)
        await self._notify()
        query = request.query
        team = query.get("team") or next(iter(self.workspaces), "")
        if query.get("client_id") != CLIENT_ID or team not in self.workspaces:
            return web.Response(status=400, text="invalid_client_id or unknown team")
        code = uuid.uuid4().hex
        self._codes[code] = team
        target = query.get("redirect_uri") or ""
        params = urlencode({"code": code, "state": query.get("state", "")})
        raise web.HTTPFound(f"{target}?{params}")

    async def _oauth_access(self, request: web.Request) -> web.Response:
        rec = await self._record(request)
        await self._notify()
        body = rec.body if isinstance(rec.body, dict) else {}
        basic = request.headers.get("Authorization", "").removeprefix("Basic ")
        expected = base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
        if basic != expected:
            return web.json_response({"ok": False, "error": "invalid_client_id"})
        if body.get("grant_type") == "refresh_token":
            refresh = str(body.get("refresh_token"))
            found = [s for s in self.workspaces.values() if refresh in s.refresh_tokens]
            if not found:
                return web.json_response({"ok": False, "error": "invalid_refresh_token"})
            found[0].refresh_tokens.discard(refresh)
            return web.json_response(self.issue(found[0], refreshed=True))
        team = self._codes.pop(str(body.get("code")), None)
        if team is None:
            return web.json_response({"ok": False, "error": "invalid_code"})
        return web.json_response(self.issue(self.workspaces[team]))

    def issue(self, space: Workspace, *, refreshed: bool = False) -> dict[str, Any]:
        token = f"xoxb-{space.team_id.lower()}-{len(space.tokens) + 1}-{uuid.uuid4().hex[:8]}"
        space.tokens.append(token)
        self._token_teams[token] = space.team_id
        answer: dict[str, Any] = {
            "ok": True,
            "access_token": token,
            "token_type": "bot",
            "scope": "app_mentions:read,chat:write,users:read",
            "bot_user_id": space.bot_user_id,
            "app_id": APP_ID,
            "team": {"id": space.team_id, "name": space.name},
            "enterprise": None,
            "is_enterprise_install": False,
            "authed_user": {"id": "UINSTALLER"},
        }
        if space.org:  # org-wide: the enterprise, no team
            answer.update(team=None, enterprise={"id": space.team_id, "name": space.name})
            answer["is_enterprise_install"] = True
        if space.rotating:
            refresh = f"xoxe-1-{uuid.uuid4().hex}"
            space.refresh_tokens.add(refresh)
            lifetime = space.refreshed_expires_in if refreshed else space.expires_in
            answer.update(refresh_token=refresh, expires_in=lifetime)
        return answer

    def chatter_message(self, channel: str, user: str, text: str) -> str:
        """A message someone else wrote in ``channel``: its ts."""
        ts = f"1700000000.{next(self._ts):06d}"
        self.messages[ts] = {"channel": channel, "thread_ts": None, "text": text, "user": user}
        return ts

    def thread_texts(self, channel: str) -> list[str]:
        """What each live message of ``channel`` shows now (text, or streamed Markdown)."""
        return [
            m["text"] if m["text"] is not None else m["markdown"]
            for m in self.messages.values()
            if m["channel"] == channel
        ]

    async def _stream(self, request: web.Request) -> web.Response:
        method = request.path.removeprefix("/api/")
        self.method_calls.append((time.monotonic(), method))
        rec = await self._record(request)
        try:
            body = rec.body if isinstance(rec.body, dict) else {}
            body = {
                **rec.query,
                **body,
            }  # slack-sdk sends some methods' arguments (chat.delete) in the query
            return web.json_response(self._streamed(method, body))
        finally:
            await self._notify()

    def _streamed(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        channel = body.get("channel")
        if method == "assistant.threads.setStatus":
            return {"ok": True}
        if method == "chat.startStream":
            if not self.streaming:
                return {"ok": False, "error": "unknown_method"}
            if not body.get("thread_ts"):
                return {"ok": False, "error": "invalid_arguments"}
            if not str(channel).startswith("D"):
                for field in ("recipient_user_id", "recipient_team_id"):
                    if not body.get(field):
                        return {"ok": False, "error": f"missing_{field}"}
            ts = f"1700000000.{next(self._ts):06d}"
            self.messages[ts] = {
                "channel": channel,
                "thread_ts": body["thread_ts"],
                "text": None,
                "markdown": body.get("markdown_text") or "",
                "streaming": True,
            }
            return {"ok": True, "channel": channel, "ts": ts}
        message = self.messages.get(str(body.get("ts")))
        if message is None or message["channel"] != channel:
            return {"ok": False, "error": "message_not_found"}
        if method in ("chat.appendStream", "chat.stopStream"):
            if not message.get("streaming"):
                return {"ok": False, "error": "message_not_in_streaming_state"}
            message["markdown"] += body.get("markdown_text") or ""
            message["streaming"] = method == "chat.appendStream"
        elif method == "chat.update":
            if message.get("streaming"):
                return {"ok": False, "error": "message_not_in_streaming_state"}
            message["text"] = body.get("text")
        elif method == "chat.delete":
            if message.get("user", BOT_USER_ID) != BOT_USER_ID:  # a bot token: its own only
                return {"ok": False, "error": "cant_delete_message"}
            del self.messages[str(body.get("ts"))]
        return {"ok": True, "channel": channel, "ts": body.get("ts")}

    async def _users_info(self, request: web.Request) -> web.Response:
        rec = await self._record(request)
        await self._notify()
        user = request.query.get("user") or (rec.body or {}).get("user", "")
        info = self.users.get(user, {"id": user, "name": user.lower(), "profile": {}})
        return web.json_response({"ok": True, "user": info})

    async def _connections_open(self, request: web.Request) -> web.Response:
        await self._record(request)
        await self._notify()
        if self._token(request) not in self.app_tokens:
            return web.json_response({"ok": False, "error": "invalid_auth"})
        ws_url = self.url.replace("http://", "ws://") + "/socket"
        return web.json_response({"ok": True, "url": ws_url})

    async def _file(self, request: web.Request) -> web.Response:
        await self._record(request)
        await self._notify()
        token = self._token(request)
        if token not in self.bot_tokens and token not in self._token_teams:
            return web.Response(status=403, text="forbidden")
        found = self.files.get(request.match_info["name"])
        if found is None:
            return web.Response(status=404)
        data, mime = found
        return web.Response(body=data, content_type=mime)

    async def _response(self, request: web.Request) -> web.Response:
        await self._record(request)
        try:
            failure = self.next_failure()
            if failure is not None:
                return failure
            return web.Response(text="ok")
        finally:
            await self._notify()

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        if self.refuse_sockets:
            self.refused_sockets += 1
            await self._notify()
            return web.Response(status=503, text="socket mode unavailable")
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        self._sockets.append(socket)
        self.socket_connections += 1
        await socket.send_json(
            {"type": "hello", "num_connections": 1, "connection_info": {"app_id": "A111"}}
        )
        await self._notify()
        try:
            async for message in socket:
                if message.type == WSMsgType.TEXT:
                    self.acks.append(json.loads(message.data))
                    await self._notify()
        finally:
            self._sockets.remove(socket)
            await self._notify()
        return socket
