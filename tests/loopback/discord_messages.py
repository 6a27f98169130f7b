"""The message routes of the Discord stand-in (``tests/loopback/discord_server.py``): create,
edit and delete, with Discord's nonce dedupe, and each message kept as it is now.

Apart from the server module to keep both under the line budget; ``DiscordServer`` mixes it in.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from aiohttp import web

from tests.loopback.base import Recorded

MANAGE_MESSAGES = 1 << 13


def json_response(
    body: Any, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    """JSON with ``Content-Type: application/json`` exactly (aiohttp would add a charset)."""
    return web.Response(
        body=json.dumps(body).encode(),
        status=status,
        headers={**(headers or {}), "Content-Type": "application/json"},
    )


class MessageStore:
    """Create, edit and delete message handlers; the server provides the rest."""

    bot_user: dict[str, Any]
    bot_permissions: int
    created: list[dict[str, Any]]
    messages: dict[str, dict[str, Any]]
    message_calls: list[tuple[float, str, str]]
    _nonces: dict[tuple[str, str], str]
    _ids: Iterator[int]

    async def _record(self, request: web.Request) -> Recorded:
        raise NotImplementedError

    async def _notify(self) -> None:
        raise NotImplementedError

    def next_failure(self) -> web.Response | None:
        raise NotImplementedError

    def channel_messages(self, channel: int | str) -> list[dict[str, Any]]:
        """The live messages of ``channel`` as they are now, oldest first."""
        return [m for m in self.messages.values() if m["channel_id"] == str(channel)]

    async def _create_message(self, request: web.Request) -> web.Response:
        channel = request.match_info["channel"]
        self.message_calls.append((time.monotonic(), "POST", channel))
        rec = await self._record(request)
        failure = self.next_failure()
        if failure is not None:
            return failure
        body = rec.body if isinstance(rec.body, dict) else {}
        nonce = body.get("nonce")
        if body.get("enforce_nonce") and nonce is not None:
            known = self._nonces.get((channel, str(nonce)))
            if known is not None and known in self.messages:
                return json_response(self.messages[known])
        created = self.message_payload(channel, rec.body)
        self.created.append(created)
        self.messages[created["id"]] = dict(created)
        if nonce is not None:
            self._nonces[channel, str(nonce)] = created["id"]
        await self._notify()
        return json_response(created)

    async def _edit_message(self, request: web.Request) -> web.Response:
        channel, message_id = request.match_info["channel"], request.match_info["message"]
        self.message_calls.append((time.monotonic(), "PATCH", channel))
        rec = await self._record(request)
        message = self.messages.get(message_id)
        if message is None or message["channel_id"] != channel:
            return json_response({"message": "Unknown Message", "code": 10008}, status=404)
        body = rec.body if isinstance(rec.body, dict) else {}
        if "content" in body:
            message["content"] = body["content"]
        message["edited_timestamp"] = "2024-01-01T00:00:01.000000+00:00"
        await self._notify()
        return json_response(message)

    async def _delete_message(self, request: web.Request) -> web.Response:
        channel, message_id = request.match_info["channel"], request.match_info["message"]
        self.message_calls.append((time.monotonic(), "DELETE", channel))
        await self._record(request)
        message = self.messages.get(message_id)
        if message is None or message["channel_id"] != channel:
            return json_response({"message": "Unknown Message", "code": 10008}, status=404)
        own = message.get("author", {}).get("id") == self.bot_user["id"]
        if not own and not self.bot_permissions & MANAGE_MESSAGES:  # someone else's message
            body = {"message": "Missing Permissions", "code": 50013}
            return json_response(body, status=403)
        del self.messages[message_id]
        await self._notify()
        return web.Response(status=204)

    def message_payload(self, channel_id: str, body: Any) -> dict[str, Any]:
        body = body if isinstance(body, dict) else {}
        return {
            "id": str(next(self._ids)),
            "channel_id": channel_id,
            "author": self.bot_user,
            "content": body.get("content", ""),
            "timestamp": "2024-01-01T00:00:00.000000+00:00",
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "pinned": False,
            "type": 19 if body.get("message_reference") else 0,
            "flags": body.get("flags", 0),
        }
