"""A loopback stand-in for Twitch: EventSub websocket, the Helix calls Chorus makes, and OAuth.

Point twitchio 3 at it with ``TWITCH_API_BASE_URL=server.helix_url``,
``TWITCH_AUTH_BASE_URL=server.auth_url`` and ``TWITCH_EVENTSUB_WS_URL=server.ws_url``.

- ``GET /ws`` -- EventSub websocket: a ``session_welcome`` on connect (then a ``session_keepalive``
  every ``keepalive_every`` seconds when set); ``notify`` delivers a
  ``notification`` to whichever connection holds the matching subscription; ``keepalive`` sends
  ``session_keepalive``; ``reconnect`` sends ``session_reconnect`` whose ``reconnect_url`` is
  ``/ws?reconnect=<session>``. Connecting there moves the session's subscriptions to the new
  connection (Twitch does: the client must not re-subscribe), welcomes it, then closes the old
  connection. ``same_session_on_reconnect`` picks whether the welcome keeps the session id.
  ``reconnect_with_traffic`` is the handover as Twitch runs it with chat in flight: while the new
  connection waits for its welcome (held by ``handover_gate``) events still go to the old one,
  which is closed only after the welcome; ``redeliver`` sends a notification again with the same
  ``message_id`` (Twitch delivers at least once), on whichever connection now holds it.
- ``POST /helix/eventsub/subscriptions`` -- needs a valid user token and a live session id; a
  session holds one user's subscriptions only (another user's token there is refused with 400),
  and ``channel.channel_points_custom_reward_redemption.add`` needs the broadcaster's own token
  with ``channel:read:redemptions`` or ``channel:manage:redemptions`` (else 403), as Twitch.
- ``GET /helix/users`` -- ``login``/``id`` lookups in ``users``.
- ``POST /helix/chat/messages`` -- records the body; answers ``is_sent: true``, or a queued
  ``drops`` entry (``is_sent: false`` with its ``drop_reason``); a reply threaded to a chat
  notice (``channel.chat.notification``) is refused with 400, as Twitch refuses it.
- ``/helix/moderation/chat`` and ``/helix/moderation/bans``: ``twitch_moderation.py``.
- EventSub conduits (``/helix/eventsub/conduits``, ``.../shards``, subscriptions with transport
  ``conduit``, delivery to one enabled shard): ``twitch_conduits.py``.
- ``GET /oauth2/validate`` and ``POST /oauth2/token`` (``client_credentials``, ``refresh_token``)
  under ``/id/``. ``revoke(token)`` makes Helix answer 401 "Invalid OAuth token" for it, as
  Twitch does for an expired token.

Shapes follow https://dev.twitch.tv/docs/eventsub/websocket-reference/ and the Helix reference;
the welcome, keepalive and reconnect messages are built from the recorded fixtures in
``tests/fixtures/twitch/``. Tests wait on ``changed`` (a condition notified on every state change)
through ``wait_until``, never by sleeping.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import WSCloseCode, web

from tests.loopback.base import LoopbackServer, Recorded
from tests.loopback.twitch_conduits import HelixConduits
from tests.loopback.twitch_moderation import HelixModeration

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "twitch"
LIMIT = 90.0  # a test's waits, by default: generous (a loaded 2-core machine, more workers than
# cores); each returns as soon as what it waits for happens
CLIENT_ID = "loopback-client-id"
CLIENT_SECRET = "loopback-client-secret"
REDEMPTION = "channel.channel_points_custom_reward_redemption.add"
REDEMPTION_SCOPES = frozenset({"channel:read:redemptions", "channel:manage:redemptions"})


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    return data


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Connection:
    number: int
    query: dict[str, str]
    ws: web.WebSocketResponse
    session_id: str = ""
    received: list[dict[str, Any]] = field(default_factory=list)  # what the server sent it
    closed: bool = False
    welcomed: bool = False


@dataclass
class Subscription:
    id: str
    type: str
    version: str
    condition: dict[str, str]
    session_id: str
    token: str
    conduit_id: str = ""  # transport conduit: delivered to one of its enabled shards
    user_id: str = ""  # whose user token made it (websocket transport)

    def wire(self) -> dict[str, Any]:
        transport = (
            {"method": "conduit", "conduit_id": self.conduit_id}
            if self.conduit_id
            else {"method": "websocket", "session_id": self.session_id}
        )
        return {
            "id": self.id,
            "status": "enabled",
            "type": self.type,
            "version": self.version,
            "condition": self.condition,
            "transport": transport,
            "created_at": _now(),
            "cost": 0,
        }


@dataclass
class UserToken:
    user_id: str
    login: str
    scopes: tuple[str, ...]
    expires_in: int = 14_400


class TwitchServer(HelixConduits, HelixModeration, LoopbackServer):
    def __init__(self, *, client_id: str = CLIENT_ID) -> None:
        super().__init__()
        self.client_id = client_id  # the application's (tests sharing a Redis differ by it)
        self.users: dict[str, dict[str, Any]] = {}  # id -> Helix user object
        self.tokens: dict[str, UserToken] = {}  # valid user access tokens
        self.app_tokens: set[str] = set()
        self.refresh_tokens: dict[str, str] = {}  # refresh token -> user id
        self.refreshed: list[tuple[str, str]] = []  # (old refresh, new access) per refresh
        self.connections: list[Connection] = []
        self.subscriptions: dict[str, Subscription] = {}
        self.sent: list[dict[str, Any]] = []  # bodies of accepted chat messages
        self.drops: deque[dict[str, str]] = deque()  # scripted drop_reason objects
        self.same_session_on_reconnect = False
        self.keepalive_every: float | None = None  # seconds: send session_keepalive, as Twitch
        self.handover_gate: asyncio.Event | None = None  # set: a reconnect's welcome waits for it
        self.waiting: Connection | None = None  # a reconnecting connection not yet welcomed
        self.notifications: dict[str, dict[str, Any]] = {}  # message_id -> the notification
        self.notice_ids: set[str] = set()  # chat notices' message ids: not repliable
        self.changed = asyncio.Condition()
        self.moderators: dict[str, set[str]] = {}  # broadcaster -> its moderators' ids
        self.chat_messages: dict[str, set[str]] = {}  # broadcaster -> deletable message ids
        self.bans: dict[tuple[str, str], int | None] = {}  # (broadcaster, user) -> duration
        self.moderation_calls: list[Recorded] = []
        self._ids = itertools.count(1)
        self._closing: set[asyncio.Task[bool]] = set()
        self.conduit_setup()

    # -- setup helpers ---------------------------------------------------------------------
    def add_user(self, user_id: str, login: str) -> dict[str, Any]:
        user = {
            "id": user_id,
            "login": login,
            "display_name": login.capitalize(),
            "type": "",
            "broadcaster_type": "",
            "description": "",
            "profile_image_url": "https://static-cdn.jtvnw.net/x.png",
            "offline_image_url": "",
            "view_count": 0,
            "created_at": "2016-12-14T20:32:28Z",
        }
        self.users[user_id] = user
        return user

    def grant(
        self,
        user_id: str,
        access: str,
        refresh: str,
        *,
        expires_in: int = 14_400,
        scopes: tuple[str, ...] = ("user:read:chat", "user:write:chat", "user:bot"),
    ) -> None:
        """Issue a user token pair (what the operator got from the OAuth flow)."""
        login = self.users[user_id]["login"]
        self.tokens[access] = UserToken(user_id, login, scopes, expires_in)
        self.refresh_tokens[refresh] = user_id

    def tokens_scopes(self, user_id: str) -> tuple[str, ...]:
        """The scopes ``user_id`` granted (a refresh keeps them)."""
        for token in self.tokens.values():
            if token.user_id == user_id:
                return token.scopes
        return ("user:read:chat", "user:write:chat", "user:bot")

    def revoke(self, access: str) -> None:
        """The access token expires: Helix and validate answer 401 from now on."""
        self.tokens.pop(access, None)

    @property
    def helix_url(self) -> str:
        return f"{self.url}/helix/"

    @property
    def auth_url(self) -> str:
        return f"{self.url}/id/"

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/ws"

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/ws", self._ws),
            web.post("/helix/eventsub/subscriptions", self._subscribe),
            web.get("/helix/users", self._users),
            web.post("/helix/chat/messages", self._chat),
            web.get("/id/oauth2/validate", self._validate),
            web.post("/id/oauth2/token", self._token),
            *self.moderation_routes(),
            *self.conduit_routes(),
        ]

    # -- driving the websocket from a test -------------------------------------------------
    async def wait_until(self, predicate: Callable[[], bool], limit: float = LIMIT) -> None:
        """Return once ``predicate()`` holds; a generous ``LIMIT`` by default, as it returns as
        soon as the predicate holds."""
        async with asyncio.timeout(limit), self.changed:
            await self.changed.wait_for(predicate)

    async def notify(self, sub_type: str, event: dict[str, Any]) -> int:
        """Deliver ``event`` to every subscription of ``sub_type`` for its broadcaster."""
        return len(await self.notify_ids(sub_type, event))

    async def notify_ids(self, sub_type: str, event: dict[str, Any]) -> list[str]:
        """``notify``, returning the EventSub message ids delivered."""
        delivered: list[str] = []
        for sub in list(self.subscriptions.values()):
            if sub.type != sub_type:
                continue
            if sub.condition.get("broadcaster_user_id") != event.get("broadcaster_user_id"):
                continue
            reward = sub.condition.get("reward_id")  # optional: one reward's redemptions only
            if reward and reward != (event.get("reward") or {}).get("id"):
                continue
            conn = None if sub.conduit_id else self._live(sub.session_id)
            if conn is None and not sub.conduit_id:
                continue
            message_id = str(uuid.uuid4())
            message: dict[str, Any] = {
                "metadata": {
                    "message_id": message_id,
                    "message_type": "notification",
                    "message_timestamp": _now(),
                    "subscription_type": sub.type,
                    "subscription_version": sub.version,
                },
                "payload": {"subscription": sub.wire(), "event": event},
            }
            self.notifications[message_id] = message
            if sub.type == "channel.chat.notification":
                self.notice_ids.add(str(event.get("message_id")))
            if conn is not None:
                await self._send(conn, message)
            elif not await self.deliver(sub.conduit_id, message):
                continue  # no enabled shard took it
            delivered.append(message_id)
        return delivered

    async def redeliver(self, message_id: str) -> None:
        """Send notification ``message_id`` again, unchanged, where its subscription is now."""
        message = self.notifications[message_id]
        sub = self.subscriptions[message["payload"]["subscription"]["id"]]
        conn = self._live(sub.session_id)
        assert conn is not None, f"no live connection holds subscription {sub.id}"
        await self._send(conn, message)

    async def reconnect_with_traffic(
        self, session_id: str, during: list[tuple[str, dict[str, Any]]], limit: float = 30.0
    ) -> list[str]:
        """A ``session_reconnect`` with events in flight: ``during`` ((type, event) pairs) is
        delivered on the old connection while the new one waits for its welcome; then the new
        one is welcomed and the old closed. Returns the message ids sent on the old connection.
        """
        self.handover_gate = gate = asyncio.Event()
        try:
            await self.reconnect(session_id)
            await self.wait_until(lambda: self.waiting is not None, limit)
            old = self._live(session_id)
            assert old is not None
            sent = [i for sub_type, event in during for i in await self.notify_ids(sub_type, event)]
            assert all(self.notifications[i] in old.received for i in sent)
            gate.set()
            await self.wait_until(lambda: self.waiting is None and old.closed, limit)
            return sent
        finally:
            self.handover_gate = None

    async def _keepalives(self, conn: Connection) -> None:
        assert self.keepalive_every is not None
        while not conn.closed:
            await asyncio.sleep(self.keepalive_every)
            message = fixture("twitch_session_keepalive")
            message["metadata"]["message_id"] = str(uuid.uuid4())
            message["metadata"]["message_timestamp"] = _now()
            try:
                await self._send(conn, message)
            except ConnectionError:
                return

    async def keepalive(self) -> None:
        message = fixture("twitch_session_keepalive")
        message["metadata"]["message_id"] = str(uuid.uuid4())
        message["metadata"]["message_timestamp"] = _now()
        for conn in self.connections:
            if not conn.closed:
                await self._send(conn, message)

    async def reconnect(self, session_id: str) -> str:
        """Send ``session_reconnect`` to the connection of ``session_id``; returns the URL."""
        conn = self._live(session_id)
        assert conn is not None, f"no live connection for session {session_id}"
        url = f"{self.ws_url}?reconnect={session_id}"
        message = fixture("twitch_session_reconnect")
        message["metadata"]["message_id"] = str(uuid.uuid4())
        message["metadata"]["message_timestamp"] = _now()
        message["payload"]["session"].update(
            id=session_id, reconnect_url=url, connected_at=_now(), keepalive_timeout_seconds=None
        )
        await self._send(conn, message)
        return url

    def live_sessions(self) -> list[str]:
        return [c.session_id for c in self.connections if not c.closed and c.session_id]

    def _live(self, session_id: str) -> Connection | None:
        for conn in reversed(self.connections):
            if conn.session_id == session_id and conn.welcomed and not conn.closed:
                return conn
        return None

    async def _send(self, conn: Connection, message: dict[str, Any]) -> None:
        conn.received.append(message)
        await conn.ws.send_str(json.dumps(message))

    async def _changed(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    # -- handlers ------------------------------------------------------------------------------
    async def _ws(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        conn = Connection(number=len(self.connections) + 1, query=dict(request.query), ws=ws)
        old_session = request.query.get("reconnect")
        old = self._live(old_session) if old_session else None
        if old is not None and self.same_session_on_reconnect:
            conn.session_id = old.session_id
        else:
            conn.session_id = f"session-{next(self._ids)}"
        self.connections.append(conn)
        if old is not None and self.handover_gate is not None:
            self.waiting = conn  # events still go to the old connection until the welcome
            await self._changed()
            await self.handover_gate.wait()
            self.waiting = None
        if old is not None:  # Twitch moves the subscriptions to the new connection
            for sub in self.subscriptions.values():
                if sub.session_id == old.session_id:
                    sub.session_id = conn.session_id
            self.shards_moved(old.session_id, conn.session_id)
        welcome = fixture("twitch_session_welcome")
        welcome["metadata"]["message_id"] = str(uuid.uuid4())
        welcome["metadata"]["message_timestamp"] = _now()
        welcome["payload"]["session"].update(id=conn.session_id, connected_at=_now())
        conn.welcomed = True
        await self._send(conn, welcome)
        if old is not None:  # closed once the new connection is welcomed, as Twitch does
            old.closed = True
            task = asyncio.create_task(old.ws.close(code=WSCloseCode.OK))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        await self._changed()
        pinger = asyncio.create_task(self._keepalives(conn)) if self.keepalive_every else None
        try:
            async for _ in ws:  # Twitch closes the connection (4001) on client messages
                await ws.close(code=4001)
        finally:
            if pinger is not None:
                pinger.cancel()
            conn.closed = True
            if self._live(conn.session_id) is None:  # a handover's new connection keeps them
                self.shards_disconnected(conn.session_id)
            await self._changed()
        return ws

    def _bearer(self, request: web.Request) -> str:
        return request.headers.get("Authorization", "").removeprefix("Bearer ").strip()

    def _unauthorized(self) -> web.Response:
        body = {"error": "Unauthorized", "status": 401, "message": "Invalid OAuth token"}
        return web.json_response(body, status=401)

    async def _subscribe(self, request: web.Request) -> web.Response:
        rec = await self.record(request)
        token = self._bearer(request)
        body = rec.body
        if body["transport"].get("method") == "conduit":
            return await self._subscribe_conduit(token, body)
        if token not in self.tokens:
            return self._unauthorized()
        session_id = body["transport"]["session_id"]
        if self._live(session_id) is None:
            message = "websocket transport session does not exist or has already disconnected"
            return web.json_response(
                {"error": "Bad Request", "status": 400, "message": message}, status=400
            )
        user = self.tokens[token]
        owners = {s.user_id for s in self.subscriptions.values() if s.session_id == session_id}
        if owners - {user.user_id}:
            message = "websocket session belongs to another user's subscriptions"
            return web.json_response(
                {"error": "Bad Request", "status": 400, "message": message}, status=400
            )
        if body["type"] == REDEMPTION and (
            body["condition"].get("broadcaster_user_id") != user.user_id
            or not set(user.scopes) & REDEMPTION_SCOPES
        ):
            message = "subscription missing proper authorization"
            return web.json_response(
                {"error": "Forbidden", "status": 403, "message": message}, status=403
            )
        sub = Subscription(
            id=str(uuid.uuid4()),
            type=body["type"],
            version=body["version"],
            condition=dict(body["condition"]),
            session_id=session_id,
            token=token,
            user_id=user.user_id,
        )
        self.subscriptions[sub.id] = sub
        await self._changed()
        answer = {"data": [sub.wire()], "total": 1, "total_cost": 0, "max_total_cost": 10}
        return web.json_response(answer, status=202)

    async def _subscribe_conduit(self, token: str, body: dict[str, Any]) -> web.Response:
        if token not in self.app_tokens:  # conduit subscriptions take an app access token
            return self._unauthorized()
        refused = self.conduit_refusal(body)
        if refused is not None:
            self.conduit_refused.append(body)
            await self._changed()  # wakes a wait_until on the refusal
            return refused
        sub = Subscription(
            id=str(uuid.uuid4()),
            type=body["type"],
            version=body["version"],
            condition=dict(body["condition"]),
            session_id="",
            token=token,
            conduit_id=str(body["transport"]["conduit_id"]),
        )
        self.subscriptions[sub.id] = sub
        await self._changed()
        answer = {"data": [sub.wire()], "total": 1, "total_cost": 0, "max_total_cost": 10_000}
        return web.json_response(answer, status=202)

    async def _users(self, request: web.Request) -> web.Response:
        await self.record(request)
        token = self._bearer(request)
        if token not in self.tokens and token not in self.app_tokens:
            return self._unauthorized()
        found = [
            user
            for user in self.users.values()
            if user["id"] in request.query.getall("id", [])
            or user["login"] in request.query.getall("login", [])
        ]
        return web.json_response({"data": found})

    async def _chat(self, request: web.Request) -> web.Response:
        rec = await self.record(request)
        token = self._bearer(request)
        if token not in self.tokens:
            return self._unauthorized()
        if rec.body.get("reply_parent_message_id") in self.notice_ids:
            message = "The request's input was not valid. Message cannot be replied to."
            body = {"data": [], "error": "Bad Request", "status": 400, "message": message}
            return web.json_response(body, status=400)
        if self.drops:
            reason = self.drops.popleft()
            result = {"message_id": "", "is_sent": False, "drop_reason": reason}
        else:
            self.sent.append(copy.deepcopy(rec.body))
            result = {"message_id": str(uuid.uuid4()), "is_sent": True, "drop_reason": None}
        await self._changed()
        return web.json_response({"data": [result]})

    async def _validate(self, request: web.Request) -> web.Response:
        await self.record(request)
        # twitchio rewrites validate's "OAuth <token>" to "Bearer <token>"; Twitch takes both.
        header = request.headers.get("Authorization", "")
        token = header.removeprefix("OAuth ").removeprefix("Bearer ").strip()
        if token in self.app_tokens:
            return web.json_response(
                {"client_id": self.client_id, "scopes": [], "expires_in": 5000}
            )
        user = self.tokens.get(token)
        if user is None:
            return web.json_response({"status": 401, "message": "invalid access token"}, status=401)
        return web.json_response(
            {
                "client_id": self.client_id,
                "login": user.login,
                "scopes": list(user.scopes),
                "user_id": user.user_id,
                "expires_in": user.expires_in,
            }
        )

    async def _token(self, request: web.Request) -> web.Response:
        await self.record(request)
        query = request.query
        if query.get("client_id") != self.client_id or query.get("client_secret") != CLIENT_SECRET:
            return web.json_response(
                {"status": 403, "message": "invalid client secret"}, status=403
            )
        grant = query.get("grant_type")
        if grant == "client_credentials":
            token = f"app-{next(self._ids)}"
            self.app_tokens.add(token)
            return web.json_response(
                {"access_token": token, "expires_in": 5000, "token_type": "bearer"}
            )
        if grant == "refresh_token":
            old = query.get("refresh_token", "")
            user_id = self.refresh_tokens.pop(old, None)
            if user_id is None:
                return web.json_response(
                    {"status": 400, "message": "Invalid refresh token"}, status=400
                )
            n = next(self._ids)
            access, refresh = f"access-{n}", f"refresh-{n}"
            self.grant(user_id, access, refresh, scopes=self.tokens_scopes(user_id))
            self.refreshed.append((old, access))
            await self._changed()
            return web.json_response(
                {
                    "access_token": access,
                    "refresh_token": refresh,
                    "expires_in": 14_400,
                    "scope": list(self.tokens[access].scopes),
                    "token_type": "bearer",
                }
            )
        return web.json_response({"status": 400, "message": "unsupported grant_type"}, status=400)


__all__ = ["CLIENT_ID", "CLIENT_SECRET", "REDEMPTION", "Connection", "TwitchServer", "fixture"]
