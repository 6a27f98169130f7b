"""The Helix moderation routes of the loopback Twitch (``tests/loopback/twitch_server.py``).

As https://dev.twitch.tv/docs/api/reference/#delete-chat-messages, #ban-user and #unban-user
describe them:

- ``DELETE /helix/moderation/chat?broadcaster_id&moderator_id&message_id`` -- 204; 401
  ``Missing scope: moderator:manage:chat_messages``; 403 when ``moderator_id`` is not one of the
  broadcaster's moderators (the broadcaster is always one); 404 for a message id it does not
  hold (``chat_messages``);
- ``POST /helix/moderation/bans?broadcaster_id&moderator_id`` with ``{"data": {"user_id",
  "duration"?, "reason"?}}`` -- 200 with the ban (``end_time`` null for a ban); 400 for a
  duration outside 1..1,209,600 or a user already banned; 401/403 as above with
  ``moderator:manage:banned_users``;
- ``DELETE /helix/moderation/bans?broadcaster_id&moderator_id&user_id`` -- 204; 400 when the
  user is neither banned nor timed out.

``bans`` holds each live ban or timeout (``(broadcaster, user) -> duration or None``);
``moderation_calls`` every call that reached a handler, in order.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from aiohttp import web

from tests.loopback.base import Recorded

SCOPE_CHAT = "moderator:manage:chat_messages"
SCOPE_BANS = "moderator:manage:banned_users"
MAX_TIMEOUT = 1_209_600


def _error(status: int, message: str) -> web.Response:
    names = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found"}
    body = {"error": names[status], "status": status, "message": message}
    return web.json_response(body, status=status)


class HelixModeration:
    """Handlers mixed into ``TwitchServer``; the server provides tokens and recording."""

    tokens: dict[str, Any]
    moderators: dict[str, set[str]]  # broadcaster id -> moderator user ids
    chat_messages: dict[str, set[str]]  # broadcaster id -> live message ids
    bans: dict[tuple[str, str], int | None]
    moderation_calls: list[Recorded]

    if TYPE_CHECKING:  # the server's (a stub here would shadow LoopbackServer.record)

        async def record(self, request: web.Request) -> Recorded: ...

        def _bearer(self, request: web.Request) -> str: ...

        def _unauthorized(self) -> web.Response: ...

        async def _changed(self) -> None: ...

    def moderation_routes(self) -> list[web.RouteDef]:
        return [
            web.delete("/helix/moderation/chat", self._delete_chat),
            web.post("/helix/moderation/bans", self._ban),
            web.delete("/helix/moderation/bans", self._unban),
        ]

    def _authorise(self, request: web.Request, scope: str) -> web.Response | None:
        """None when the token may act as ``moderator_id`` in ``broadcaster_id``."""
        user = self.tokens.get(self._bearer(request))
        if user is None:
            return self._unauthorized()
        if scope not in user.scopes:
            return _error(401, f"Missing scope: {scope}")
        query = request.query
        moderator, broadcaster = query.get("moderator_id", ""), query.get("broadcaster_id", "")
        if moderator != user.user_id:
            return _error(401, "The ID in moderator_id must match the user ID in the access token.")
        if moderator != broadcaster and moderator not in self.moderators.get(broadcaster, set()):
            return _error(
                403, "The user in moderator_id is not one of the broadcaster's moderators."
            )
        return None

    async def _delete_chat(self, request: web.Request) -> web.Response:
        self.moderation_calls.append(await self.record(request))
        refused = self._authorise(request, SCOPE_CHAT)
        if refused is not None:
            return refused
        broadcaster, message_id = request.query["broadcaster_id"], request.query.get("message_id")
        live = self.chat_messages.setdefault(broadcaster, set())
        if message_id is None:
            live.clear()  # no message_id: the whole chat is cleared
        elif message_id not in live:
            return _error(404, "The ID in message_id was not found.")
        else:
            live.discard(message_id)
        await self._changed()
        return web.Response(status=204)

    async def _ban(self, request: web.Request) -> web.Response:
        rec = await self.record(request)
        self.moderation_calls.append(rec)
        refused = self._authorise(request, SCOPE_BANS)
        if refused is not None:
            return refused
        data = (rec.body or {}).get("data") if isinstance(rec.body, dict) else None
        if not isinstance(data, dict) or not data.get("user_id"):
            return _error(400, "The user_id field is required.")
        duration = data.get("duration")
        if duration is not None and not (
            isinstance(duration, int) and 1 <= duration <= MAX_TIMEOUT
        ):
            return _error(400, "The value in the duration field is not valid.")
        if len(str(data.get("reason") or "")) > 500:
            return _error(400, "The text in the reason field is too long.")
        broadcaster, user_id = request.query["broadcaster_id"], str(data["user_id"])
        if self.bans.get((broadcaster, user_id), 0) is None:
            return _error(400, "The user specified in the user_id field is already banned.")
        self.bans[broadcaster, user_id] = duration
        now = datetime.now(UTC)
        ban = {
            "broadcaster_id": broadcaster,
            "moderator_id": request.query["moderator_id"],
            "user_id": user_id,
            "created_at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "end_time": (now + timedelta(seconds=duration)).strftime("%Y-%m-%dT%H:%M:%SZ")
            if duration
            else None,
        }
        await self._changed()
        return web.json_response({"data": [ban]})

    async def _unban(self, request: web.Request) -> web.Response:
        self.moderation_calls.append(await self.record(request))
        refused = self._authorise(request, SCOPE_BANS)
        if refused is not None:
            return refused
        key = (request.query["broadcaster_id"], request.query.get("user_id", ""))
        if key not in self.bans:
            return _error(400, "The user specified in the user_id field is not banned.")
        del self.bans[key]
        await self._changed()
        return web.Response(status=204)
