"""The EventSub conduit routes of the loopback Twitch (``tests/loopback/twitch_server.py``).

As https://dev.twitch.tv/docs/api/reference/conduits and
https://dev.twitch.tv/docs/eventsub/handling-conduit-events describe them (app access token on
every call, 401 otherwise):

- ``POST /helix/eventsub/conduits`` (``shard_count`` in the body or the query) -- the new
  conduit, its shards ``0..n-1`` without transport (status ``websocket_disconnected``);
- ``GET /helix/eventsub/conduits`` -- the client's conduits;
- ``PATCH /helix/eventsub/conduits`` (``id`` and ``shard_count`` in the body or the query) --
  Update Conduits: growing adds shards without a transport (``websocket_disconnected``),
  shrinking drops the shards from the new count up (their notifications stop at once);
- ``GET /helix/eventsub/conduits/shards?conduit_id`` -- each shard, its status and transport;
- ``PATCH /helix/eventsub/conduits/shards`` (``conduit_id`` in the body or the query, ``shards``
  ``[{id, transport: {method: websocket, session_id}}]``) -- 202 with ``data`` (the shards
  updated, now ``enabled``) and ``errors`` (a session that is not a live, welcomed connection:
  ``websocket_session_not_found``; a shard id the conduit has not: ``invalid shard id``);
- ``POST /helix/eventsub/subscriptions`` with transport ``conduit`` -- app token only; the
  chat types need the ``user_id`` of the condition (the bot) to have granted ``user:read:chat``
  and ``user:bot``, and the broadcaster to have granted ``channel:bot`` (``channel_bot``) or made
  the bot a moderator, else 403 ``subscription missing proper authorization``; the same type,
  condition and conduit twice is 409;
- ``GET`` / ``DELETE /helix/eventsub/subscriptions`` -- list (``conduit_id``, ``user_id`` or
  ``type``) and delete by ``id``.

Delivery (``deliver``): Twitch hands a conduit subscription's notification to one *enabled*
shard of its choice and, if that shard does not take it, retries once on one other shard. Here
the choice is random among the enabled shards (``rng``, seeded); a shard whose connection is gone
is disabled (``websocket_disconnected``) and another is tried. A connection closing disables the
shards it carried; a ``session_reconnect`` handover moves them to the new connection.
"""

from __future__ import annotations

import itertools
import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from tests.loopback.base import Recorded
    from tests.loopback.twitch_server import Connection

CHAT_TYPES = frozenset(
    {
        "channel.chat.message",
        "channel.chat.message_delete",
        "channel.chat.clear_user_messages",
        "channel.chat.notification",
    }
)
MISSING_AUTH = "subscription missing proper authorization"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _error(status: int, message: str) -> web.Response:
    names = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found"}
    names[409] = "Conflict"
    body = {"error": names[status], "status": status, "message": message}
    return web.json_response(body, status=status)


@dataclass
class Shard:
    id: str
    session_id: str = ""
    status: str = "websocket_disconnected"
    connected_at: str = ""

    def wire(self) -> dict[str, Any]:
        transport: dict[str, Any] = {"method": "websocket", "session_id": self.session_id}
        if self.session_id:
            transport["connected_at"] = self.connected_at
        return {"id": self.id, "status": self.status, "transport": transport}


@dataclass
class Conduit:
    id: str
    shards: list[Shard] = field(default_factory=list)

    def wire(self) -> dict[str, Any]:
        return {"id": self.id, "shard_count": len(self.shards)}

    def enabled(self) -> list[Shard]:
        return [s for s in self.shards if s.status == "enabled"]


class HelixConduits:
    """Handlers mixed into ``TwitchServer``; the server provides tokens, sockets and recording."""

    app_tokens: set[str]
    users: dict[str, dict[str, Any]]
    moderators: dict[str, set[str]]
    subscriptions: dict[str, Any]
    requests: list[Recorded]

    if TYPE_CHECKING:

        async def record(self, request: web.Request) -> Recorded: ...

        def _bearer(self, request: web.Request) -> str: ...

        def _unauthorized(self) -> web.Response: ...

        async def _changed(self) -> None: ...

        def _live(self, session_id: str) -> Connection | None: ...

        async def _send(self, conn: Connection, message: dict[str, Any]) -> None: ...

        def tokens_scopes(self, user_id: str) -> tuple[str, ...]: ...

    def conduit_setup(self) -> None:
        self.conduits: dict[str, Conduit] = {}
        self.channel_bot: set[str] = set()  # broadcasters who granted the app channel:bot
        self.deliveries: list[tuple[str, str]] = []  # (message id, shard id) per delivery
        self.conduit_refused: list[dict[str, Any]] = []  # the bodies of refused subscriptions
        self.rng = random.Random(41)
        self._conduit_ids = itertools.count(1)

    def conduit_routes(self) -> list[web.RouteDef]:
        return [
            web.post("/helix/eventsub/conduits", self._create_conduit),
            web.get("/helix/eventsub/conduits", self._get_conduits),
            web.patch("/helix/eventsub/conduits", self._update_conduit),
            web.get("/helix/eventsub/conduits/shards", self._get_shards),
            web.patch("/helix/eventsub/conduits/shards", self._update_shards),
            web.get("/helix/eventsub/subscriptions", self._list_subscriptions),
            web.delete("/helix/eventsub/subscriptions", self._delete_subscription),
        ]

    # -- state seen by tests -----------------------------------------------------------------
    def shard_sessions(self) -> dict[str, str]:
        """Every enabled shard of every conduit -> the session id carrying it."""
        return {f"{c.id}/{s.id}": s.session_id for c in self.conduits.values() for s in c.enabled()}

    def conduit_subscribed(self, broadcaster: str) -> set[str]:
        return {
            s.type
            for s in self.subscriptions.values()
            if s.conduit_id and s.condition.get("broadcaster_user_id") == broadcaster
        }

    # -- socket life ---------------------------------------------------------------------------
    def shards_moved(self, old_session: str, new_session: str) -> None:
        for conduit in self.conduits.values():
            for shard in conduit.shards:
                if shard.session_id == old_session and shard.status == "enabled":
                    shard.session_id = new_session

    def shards_disconnected(self, session_id: str) -> None:
        for conduit in self.conduits.values():
            for shard in conduit.shards:
                if shard.session_id == session_id and shard.status == "enabled":
                    shard.status = "websocket_disconnected"

    async def deliver(self, conduit_id: str, message: dict[str, Any]) -> bool:
        """Send ``message`` to one enabled shard, retrying once on another if it is gone."""
        conduit = self.conduits.get(conduit_id)
        if conduit is None:
            return False
        tried: set[str] = set()
        for _ in range(2):
            choices = [s for s in conduit.enabled() if s.id not in tried]
            if not choices:
                return False
            shard = self.rng.choice(choices)
            tried.add(shard.id)
            conn = self._live(shard.session_id)
            if conn is None:
                shard.status = "websocket_disconnected"
                continue
            try:
                await self._send(conn, message)
            except ConnectionError:
                shard.status = "websocket_disconnected"
                continue
            self.deliveries.append((message["metadata"]["message_id"], shard.id))
            return True
        return False

    # -- handlers ------------------------------------------------------------------------------
    def _app(self, request: web.Request) -> bool:
        return self._bearer(request) in self.app_tokens

    async def _create_conduit(self, request: web.Request) -> web.Response:
        rec = await self.record(request)
        if not self._app(request):
            return self._unauthorized()
        body = rec.body if isinstance(rec.body, dict) else {}
        count = int(body.get("shard_count") or request.query.get("shard_count") or 0)
        if not 1 <= count <= 20_000:
            return _error(400, "shard_count must be between 1 and 20000")
        conduit = Conduit(
            id=f"conduit-{next(self._conduit_ids)}-{uuid.uuid4().hex[:8]}",
            shards=[Shard(id=str(n)) for n in range(count)],
        )
        self.conduits[conduit.id] = conduit
        await self._changed()
        return web.json_response({"data": [conduit.wire()]})

    async def _get_conduits(self, request: web.Request) -> web.Response:
        await self.record(request)
        if not self._app(request):
            return self._unauthorized()
        return web.json_response({"data": [c.wire() for c in self.conduits.values()]})

    async def _update_conduit(self, request: web.Request) -> web.Response:
        rec = await self.record(request)
        if not self._app(request):
            return self._unauthorized()
        body = {**request.query, **(rec.body if isinstance(rec.body, dict) else {})}
        conduit = self.conduits.get(str(body.get("id", "")))
        if conduit is None:
            return _error(404, "conduit not found")
        count = int(body.get("shard_count") or 0)
        if not 1 <= count <= 20_000:
            return _error(400, "shard_count must be between 1 and 20000")
        del conduit.shards[count:]
        conduit.shards += [Shard(id=str(n)) for n in range(len(conduit.shards), count)]
        await self._changed()
        return web.json_response({"data": [conduit.wire()]})

    async def _get_shards(self, request: web.Request) -> web.Response:
        await self.record(request)
        if not self._app(request):
            return self._unauthorized()
        conduit = self.conduits.get(request.query.get("conduit_id", ""))
        if conduit is None:
            return _error(404, "conduit not found")
        status = request.query.get("status")
        shards = [s.wire() for s in conduit.shards if status is None or s.status == status]
        return web.json_response({"data": shards, "pagination": {}})

    async def _update_shards(self, request: web.Request) -> web.Response:
        rec = await self.record(request)
        if not self._app(request):
            return self._unauthorized()
        body = rec.body if isinstance(rec.body, dict) else {}
        conduit = self.conduits.get(body.get("conduit_id") or request.query.get("conduit_id", ""))
        if conduit is None:
            return _error(404, "conduit not found")
        data: list[dict[str, Any]] = []
        errors: list[dict[str, str]] = []
        for update in body.get("shards", []):
            shard_id = str(update.get("id"))
            transport = update.get("transport") or {}
            if not shard_id.isdigit() or int(shard_id) >= len(conduit.shards):
                errors.append({"id": shard_id, "message": "invalid shard id", "code": ""})
                continue
            session = str(transport.get("session_id", ""))
            if transport.get("method") != "websocket" or self._live(session) is None:
                errors.append(
                    {
                        "id": shard_id,
                        "message": "The websocket session is not connected",
                        "code": "websocket_session_not_found",
                    }
                )
                continue
            shard = conduit.shards[int(shard_id)]
            shard.session_id, shard.status, shard.connected_at = session, "enabled", _now()
            data.append(shard.wire())
        await self._changed()
        return web.json_response({"data": data, "errors": errors}, status=202)

    def conduit_refusal(self, body: dict[str, Any]) -> web.Response | None:
        """Why Twitch would refuse this conduit subscription (None: it accepts it)."""
        transport = body.get("transport") or {}
        conduit_id = str(transport.get("conduit_id", ""))
        if conduit_id not in self.conduits:
            return _error(400, "conduit not found")
        condition = dict(body.get("condition") or {})
        if body.get("type") in CHAT_TYPES:
            user = str(condition.get("user_id", ""))
            broadcaster = str(condition.get("broadcaster_user_id", ""))
            scopes = set(self.tokens_scopes(user))
            if user not in self.users or not {"user:read:chat", "user:bot"} <= scopes:
                return _error(403, MISSING_AUTH)
            moderator = user in self.moderators.get(broadcaster, set()) or user == broadcaster
            if broadcaster not in self.channel_bot and not moderator:
                return _error(403, MISSING_AUTH)
        for sub in self.subscriptions.values():
            if (sub.type, sub.condition, sub.conduit_id) == (body["type"], condition, conduit_id):
                return _error(409, "subscription already exists")
        return None

    async def _list_subscriptions(self, request: web.Request) -> web.Response:
        await self.record(request)
        if not self._app(request):
            return self._unauthorized()
        query = request.query
        found = [
            sub.wire()
            for sub in self.subscriptions.values()
            if sub.conduit_id
            and query.get("conduit_id", sub.conduit_id) == sub.conduit_id
            and query.get("type", sub.type) == sub.type
            and ("user_id" not in query or query["user_id"] in sub.condition.values())
        ]
        body = {"data": found, "total": len(found), "total_cost": 0, "max_total_cost": 10_000}
        return web.json_response(body | {"pagination": {}})

    async def _delete_subscription(self, request: web.Request) -> web.Response:
        await self.record(request)
        if not self._app(request):
            return self._unauthorized()
        if self.subscriptions.pop(request.query.get("id", ""), None) is None:
            return _error(404, "subscription not found")
        await self._changed()
        return web.Response(status=204)
