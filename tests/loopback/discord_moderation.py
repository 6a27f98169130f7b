"""The guild moderation routes of the Discord stand-in (``tests/loopback/discord_server.py``).

As https://discord.com/developers/docs/resources/guild describes them:

- ``GET /guilds/{g}/members/{u}`` -- the member (with ``communication_disabled_until``), or 404
  ``Unknown Member`` (10007);
- ``PATCH /guilds/{g}/members/{u}`` with ``communication_disabled_until`` (an ISO time at most
  28 days ahead, or null) -- needs Moderate Members; 400 (50035) past 28 days;
- ``PUT /guilds/{g}/bans/{u}`` -- needs Ban Members, 204; ``DELETE`` -- 204, or 404
  ``Unknown Ban`` (10026).

The bot's permissions are ``bot_permissions`` (its role's, as ``guild_with_bot`` builds the
guild); without the one needed the answer is 403 ``Missing Permissions`` (50013), as Discord
gives it. Each call's ``X-Audit-Log-Reason`` header is kept in ``audit_reasons`` (URL-decoded),
each call in ``moderation_calls``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from aiohttp import web

from tests.loopback.base import Recorded
from tests.loopback.discord_messages import json_response as _json

MANAGE_MESSAGES = 1 << 13
BAN_MEMBERS = 1 << 2
MODERATE_MEMBERS = 1 << 40
MODERATOR_PERMISSIONS = MANAGE_MESSAGES | BAN_MEMBERS | MODERATE_MEMBERS
MAX_TIMEOUT = timedelta(days=28)


def missing_permissions() -> web.Response:
    return _json({"message": "Missing Permissions", "code": 50013}, status=403)


def member_payload(user_id: str, name: str = "viewer") -> dict[str, Any]:
    return {
        "user": {"id": user_id, "username": name, "discriminator": "0", "avatar": None},
        "roles": [],
        "joined_at": "2024-01-01T00:00:00.000000+00:00",
        "deaf": False,
        "mute": False,
        "flags": 0,
        "communication_disabled_until": None,
    }


class GuildModeration:
    """Member and ban handlers; the server provides recording and notification."""

    bot_user: dict[str, Any]
    bot_permissions: int
    members: dict[str, dict[str, Any]]
    bans: dict[str, str | None]  # user id -> the ban's reason
    moderation_calls: list[Recorded]
    audit_reasons: list[str | None]

    if TYPE_CHECKING:

        async def _record(self, request: web.Request) -> Recorded: ...

        async def _notify(self) -> None: ...

    def moderation_routes(self, api: str) -> list[web.RouteDef]:
        member = f"{api}/guilds/{{guild}}/members/{{user}}"
        ban = f"{api}/guilds/{{guild}}/bans/{{user}}"
        return [
            web.get(member, self._get_member),
            web.patch(member, self._edit_member),
            web.put(ban, self._ban),
            web.delete(ban, self._unban),
        ]

    def timed_out_until(self, user_id: str) -> datetime | None:
        member = self.members.get(user_id)
        until = member and member.get("communication_disabled_until")
        if not until:
            return None
        moment = datetime.fromisoformat(until)
        return moment if moment > datetime.now(UTC) else None

    async def _moderation_call(self, request: web.Request) -> Recorded:
        rec = await self._record(request)
        self.moderation_calls.append(rec)
        reason = request.headers.get("X-Audit-Log-Reason")
        self.audit_reasons.append(unquote(reason) if reason is not None else None)
        return rec

    async def _get_member(self, request: web.Request) -> web.Response:
        await self._record(request)
        member = self.members.get(request.match_info["user"])
        if member is None:
            return _json({"message": "Unknown Member", "code": 10007}, status=404)
        return _json(member)

    async def _edit_member(self, request: web.Request) -> web.Response:
        rec = await self._moderation_call(request)
        member = self.members.get(request.match_info["user"])
        if member is None:
            return _json({"message": "Unknown Member", "code": 10007}, status=404)
        body = rec.body if isinstance(rec.body, dict) else {}
        if "communication_disabled_until" in body:
            if not self.bot_permissions & MODERATE_MEMBERS:
                return missing_permissions()
            until = body["communication_disabled_until"]
            if (
                until is not None
                and datetime.fromisoformat(until) > datetime.now(UTC) + MAX_TIMEOUT
            ):
                return _json({"message": "Invalid Form Body", "code": 50035}, status=400)
            member["communication_disabled_until"] = until
        await self._notify()
        return _json(member)

    async def _ban(self, request: web.Request) -> web.Response:
        await self._moderation_call(request)
        if not self.bot_permissions & BAN_MEMBERS:
            return missing_permissions()
        self.bans[request.match_info["user"]] = self.audit_reasons[-1]
        await self._notify()
        return web.Response(status=204)

    async def _unban(self, request: web.Request) -> web.Response:
        await self._moderation_call(request)
        if not self.bot_permissions & BAN_MEMBERS:
            return missing_permissions()
        if request.match_info["user"] not in self.bans:
            return _json({"message": "Unknown Ban", "code": 10026}, status=404)
        del self.bans[request.match_info["user"]]
        await self._notify()
        return web.Response(status=204)
