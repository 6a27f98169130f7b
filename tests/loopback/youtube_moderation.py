"""The live chat moderation endpoints of the YouTube stand-in (``youtube_server.py``).

As the Live Streaming API reference describes them (liveChatMessages.delete, liveChatBans):

- ``DELETE /youtube/v3/liveChat/messages?id=`` -- 204; 404 ``liveChatMessageNotFound`` for a
  message it does not hold (``chat_messages``);
- ``POST /youtube/v3/liveChat/bans?part=snippet`` with ``snippet.liveChatId``, ``type``
  (``permanent`` or ``temporary`` with ``banDurationSeconds``) and
  ``bannedUserDetails.channelId`` -- 200 with the ``youtube#liveChatBan`` resource (its ``id``
  lifts it); 404 ``liveChatNotFound`` for another chat;
- ``DELETE /youtube/v3/liveChat/bans?id=`` -- 204; 404 ``liveChatBanNotFound``.

Only the chat's owner or a moderator may call them: with ``bot_is_moderator`` false each answers
403 ``forbidden``, as Google does. Each call is charged ``COSTS`` units like every other
(failed calls too) and kept in ``moderation_calls``.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from aiohttp import web

from tests.loopback.base import Recorded

FORBIDDEN = "The request is not properly authorized to moderate this live chat."


class LiveChatModeration:
    """Handlers mixed into ``YouTubeServer``; it provides ``_begin`` (auth, charging, scripts)."""

    live_chat_id: str
    bot_is_moderator: bool
    chat_messages: set[str]
    bans: dict[str, dict[str, Any]]  # ban id -> the liveChatBan resource
    moderation_calls: list[Recorded]
    requests: list[Recorded]
    _ban_ids: itertools.count[int]

    if TYPE_CHECKING:

        async def _begin(self, request: web.Request, endpoint: str) -> web.Response | None: ...

    def moderation_routes(self) -> list[web.RouteDef]:
        return [
            web.delete("/youtube/v3/liveChat/messages", self._delete_message),
            web.post("/youtube/v3/liveChat/bans", self._insert_ban),
            web.delete("/youtube/v3/liveChat/bans", self._delete_ban),
        ]

    def banned(self, channel_id: str) -> dict[str, Any] | None:
        """The snippet of ``channel_id``'s live ban, if any."""
        for ban in self.bans.values():
            if ban["snippet"]["bannedUserDetails"]["channelId"] == channel_id:
                snippet: dict[str, Any] = ban["snippet"]
                return snippet
        return None

    async def _moderate(self, request: web.Request, endpoint: str) -> web.Response | None:
        early = await self._begin(request, endpoint)
        self.moderation_calls.append(self.requests[-1])
        if early is not None:
            return early
        if not self.bot_is_moderator:
            return _google(403, "forbidden", FORBIDDEN)
        return None

    async def _delete_message(self, request: web.Request) -> web.Response:
        if (early := await self._moderate(request, "delete")) is not None:
            return early
        message_id = request.query.get("id", "")
        if message_id not in self.chat_messages:
            return _google(404, "liveChatMessageNotFound", "The message does not exist.")
        self.chat_messages.discard(message_id)
        return web.Response(status=204)

    async def _insert_ban(self, request: web.Request) -> web.Response:
        if (early := await self._moderate(request, "ban")) is not None:
            return early
        if request.query.get("part") != "snippet":
            return _google(400, "invalidPart", "part must be snippet")
        snippet = dict((self.requests[-1].body or {}).get("snippet") or {})
        if snippet.get("liveChatId") != self.live_chat_id:
            return _google(404, "liveChatNotFound", "The live chat does not exist.")
        kind = snippet.get("type")
        duration = snippet.get("banDurationSeconds")
        if kind not in ("permanent", "temporary") or (kind == "temporary") != (
            duration is not None
        ):
            return _google(400, "invalidValue", "type and banDurationSeconds do not agree")
        channel = (snippet.get("bannedUserDetails") or {}).get("channelId")
        if not channel:
            return _google(400, "bannedUserDetailsRequired", "bannedUserDetails.channelId")
        ban_id = f"ban-{next(self._ban_ids)}"
        ban = {"kind": "youtube#liveChatBan", "etag": "etag", "id": ban_id, "snippet": snippet}
        self.bans[ban_id] = ban
        return web.json_response(ban)

    async def _delete_ban(self, request: web.Request) -> web.Response:
        if (early := await self._moderate(request, "unban")) is not None:
            return early
        if self.bans.pop(request.query.get("id", ""), None) is None:
            return _google(404, "liveChatBanNotFound", "The ban does not exist.")
        return web.Response(status=204)


def _google(status: int, reason: str, message: str) -> web.Response:
    body = {
        "error": {
            "code": status,
            "message": message,
            "errors": [{"message": message, "domain": "youtube.liveChat", "reason": reason}],
        }
    }
    return web.json_response(body, status=status)
