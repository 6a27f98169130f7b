"""A loopback stand-in for Discord: the gateway websocket and the REST endpoints the adapter uses.

The real discord.py client talks to it unchanged once ``DISCORD_API_BASE_URL`` points at
``{url}/api/v10`` and ``DISCORD_GATEWAY_URL`` at ``{ws_url}``. It speaks just enough of the
protocol (https://discord.com/developers/docs/events/gateway):

* gateway: HELLO on connect, HEARTBEAT_ACK for heartbeats, READY (+ GUILD_CREATE for the
  configured guilds of the identifying shard) for IDENTIFY, RESUMED for RESUME; ``dispatch``
  pushes any event, on the connection of the shard its ``guild_id`` belongs to
  (``(guild_id >> 22) % shard_count``, as Discord routes guilds) or of ``shard=``; ``drop``
  closes the socket with 4000 so the client resumes on READY's ``resume_gateway_url`` (this
  server); ``identify_close_code`` closes at IDENTIFY instead (4014: disallowed intents);
* sharding: ``GET /gateway/bot`` recommends ``recommended_shards`` with ``max_concurrency``;
  each IDENTIFY is recorded in ``identifies`` (receive time, shard, count) and, when two of one
  bucket (``shard % max_concurrency``) arrive less than ``identify_window`` seconds apart (5 s
  on Discord, a setting here to keep tests short), in ``identify_violations``;
  ``go_down`` is an outage: the live connection is dropped and new ones are refused with 503
  (counted in ``refused``) until ``come_back``;
* moderation (members, timeouts, bans): ``discord_moderation.py``;
* REST: ``/users/@me`` (401 when ``reject_token``), ``/oauth2/applications/@me``, command sync,
  message create, edit (PATCH) and delete, typing, interaction callback and webhook
  follow-ups; queued ``failures`` answer message creates first. A create with
  ``enforce_nonce`` and a nonce already used in its channel answers with the message created
  for it (current content), as Discord does; ``messages`` holds each live message as it is now
  and ``message_calls`` the time of every create, edit and delete (for rate checks). 429s carry ``Via: 1.1 google``: discord.py treats a 429
  without ``Via`` as a Cloudflare ban and does not retry.

Responses use ``Content-Type: application/json`` exactly (discord.py decodes nothing else).
Every request and gateway frame is recorded; tests ``await wait_for(...)`` instead of sleeping.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web

from tests.loopback.base import LoopbackServer, Recorded, ScriptedFailure
from tests.loopback.discord_messages import MessageStore, json_response
from tests.loopback.discord_moderation import MODERATOR_PERMISSIONS, GuildModeration

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "discord"
LIMIT = 90.0  # a test's waits, by default: generous (a loaded 2-core machine, more workers than
# cores); each returns as soon as what it waits for happens


def load_fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    return data


@dataclass
class GatewayFrame:
    connection: int
    op: int
    data: Any


class DiscordServer(GuildModeration, MessageStore, LoopbackServer):
    """REST under ``/api/v10`` and the gateway at ``/gateway``."""

    def __init__(self, ready: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.ready = ready or load_fixture("discord_ready_docs_user")
        self.bot_user: dict[str, Any] = self.ready["d"]["user"]
        self.guilds: list[dict[str, Any]] = []
        self.reject_token = False
        self.application_flags = 0  # e.g. 1 << 18: the Message Content intent is on
        self.application_down = False  # the application endpoint answers 500
        self.identify_close_code: int | None = None
        self.frames: list[GatewayFrame] = []
        self.connections = 0
        self.recommended_shards = 1
        self.max_concurrency = 1
        self.identify_window = 5.0
        self.identifies: list[tuple[float, int, int]] = []  # (monotonic, shard id, shard count)
        self.identify_violations: list[tuple[int, int, float]] = []  # (shard, shard, seconds)
        self.shard_count = 1  # as the latest IDENTIFY said
        self._shard_ws: dict[int, web.WebSocketResponse] = {}
        self.down = False
        self.refused = 0
        self.created: list[dict[str, Any]] = []  # messages that were actually created
        self.messages: dict[str, dict[str, Any]] = {}  # id -> the message as it is now
        self.message_calls: list[tuple[float, str, str]] = []  # (monotonic, method, channel)
        self.bot_permissions = MODERATOR_PERMISSIONS  # the bot role's (guild_with_bot)
        self.members: dict[str, dict[str, Any]] = {}  # user id -> member (GET/PATCH member)
        self.bans: dict[str, str | None] = {}  # user id -> the ban's audit-log reason
        self.moderation_calls: list[Recorded] = []
        self.audit_reasons: list[str | None] = []
        self._nonces: dict[tuple[str, str], str] = {}  # (channel, nonce) -> message id
        self._ws: web.WebSocketResponse | None = None
        self._seq = itertools.count(2)
        self._ids = itertools.count(900_000_000_000_000_001)
        self._changed = asyncio.Condition()

    @property
    def api_url(self) -> str:
        return f"{self.url}/api/v10"

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/gateway"

    def routes(self) -> list[web.RouteDef]:
        api = "/api/v10"
        return [
            web.get("/gateway", self._gateway),
            web.get(f"{api}/gateway/bot", self._gateway_bot),
            web.get(f"{api}/users/@me", self._me),
            web.get(f"{api}/oauth2/applications/@me", self._application),
            web.get(f"{api}/applications/@me", self._application),
            web.put(f"{api}/applications/{{app}}/commands", self._sync_commands),
            web.post(f"{api}/channels/{{channel}}/messages", self._create_message),
            web.patch(f"{api}/channels/{{channel}}/messages/{{message}}", self._edit_message),
            web.delete(f"{api}/channels/{{channel}}/messages/{{message}}", self._delete_message),
            web.post(f"{api}/channels/{{channel}}/typing", self._typing),
            web.post(f"{api}/interactions/{{id}}/{{token}}/callback", self._callback),
            web.post(f"{api}/webhooks/{{app}}/{{token}}", self._followup),
            *self.moderation_routes(api),
        ]

    # -- waiting ---------------------------------------------------------------------------------
    async def wait_for(self, predicate: Callable[[], bool], limit: float = LIMIT) -> None:
        """Return once ``predicate()`` holds (checked after each request and gateway frame); a
        generous ``LIMIT`` by default, as it returns as soon as the predicate holds."""
        async with asyncio.timeout(limit), self._changed:
            await self._changed.wait_for(predicate)

    async def wait_request(self, method: str, path: str, count: int = 1) -> list[Recorded]:
        await self.wait_for(lambda: len(self.requests_to(method, path)) >= count)
        return self.requests_to(method, path)

    async def wait_op(self, op: int, count: int = 1) -> list[GatewayFrame]:
        await self.wait_for(lambda: len(self.ops(op)) >= count)
        return self.ops(op)

    def requests_to(self, method: str, path: str) -> list[Recorded]:
        full = f"/api/v10{path}"
        return [r for r in self.requests if r.method == method and r.path == full]

    def ops(self, op: int) -> list[GatewayFrame]:
        return [f for f in self.frames if f.op == op]

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _record(self, request: web.Request) -> Recorded:
        recorded = await self.record(request)
        await self._notify()
        return recorded

    # -- gateway ---------------------------------------------------------------------------------
    def shard_of(self, guild_id: object) -> int:
        """The shard Discord routes a guild to (a malformed id, as the fuzz tests send: the
        first shard, as the one connection a payload with it would arrive on)."""
        try:
            return (int(str(guild_id)) >> 22) % self.shard_count
        except ValueError:
            return 0

    async def dispatch(self, event: str, data: dict[str, Any], *, shard: int | None = None) -> None:
        """Send a DISPATCH (op 0) on the connection of ``shard``, else of the shard of the
        event's guild, else on the latest connection."""
        ws = self._ws
        if shard is None and data.get("guild_id") is not None and self._shard_ws:
            shard = self.shard_of(data["guild_id"])
        if shard is not None:
            ws = self._shard_ws.get(shard)
        assert ws is not None, f"no gateway connection (shard {shard})"
        await ws.send_str(json.dumps({"op": 0, "t": event, "s": next(self._seq), "d": data}))

    def frame(self, event: str, data: dict[str, Any]) -> str:
        """A DISPATCH frame, serialised ahead (for ``send_frame``: benchmarks time the client)."""
        return json.dumps({"op": 0, "t": event, "s": next(self._seq), "d": data})

    async def send_frame(self, shard: int, text: str) -> None:
        ws = self._shard_ws[shard]
        await ws.send_str(text)

    def shard_connected(self, shard: int) -> bool:
        ws = self._shard_ws.get(shard)
        return ws is not None and not ws.closed

    async def drop(self, code: int = 4000, *, shard: int | None = None) -> None:
        """Close the current connection (or ``shard``'s) the way a gateway hiccup does
        (resumable code)."""
        ws = self._shard_ws.pop(shard, None) if shard is not None else self._ws
        assert ws is not None, "no gateway connection"
        if ws is self._ws:
            self._ws = None
        await ws.close(code=code, message=b"loopback drop")

    async def go_down(self) -> None:
        """An outage of the gateway: drop the live connection, refuse new ones (503)."""
        self.down = True
        if self._ws is not None:
            await self.drop()

    def come_back(self) -> None:
        self.down = False

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        if self.down:
            self.refused += 1
            await self._notify()
            return web.Response(status=503, text="gateway unavailable")
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.connections += 1
        connection = self.connections
        self._ws = ws
        await ws.send_str(json.dumps(load_fixture("discord_hello")))
        async for msg in ws:
            if msg.type is not WSMsgType.TEXT:
                continue
            frame = json.loads(msg.data)
            self.frames.append(GatewayFrame(connection, frame["op"], frame.get("d")))
            await self._on_frame(ws, frame)  # (READY is out before a waiter sees the IDENTIFY)
            await self._notify()
        return ws

    async def _on_frame(self, ws: web.WebSocketResponse, frame: dict[str, Any]) -> None:
        op = frame["op"]
        if op == 1:  # HEARTBEAT
            await ws.send_str(json.dumps({"op": 11}))
        elif op == 2:  # IDENTIFY
            if self.identify_close_code is not None:
                await ws.close(code=self.identify_close_code, message=b"Disallowed intent(s).")
                return
            shard, count = (frame["d"] or {}).get("shard") or (0, 1)
            self._identified(int(shard), int(count))
            self._shard_ws[shard] = ws
            mine = [g for g in self.guilds if self.shard_of(g["id"]) == shard]
            ready = copy.deepcopy(self.ready)
            ready["d"]["resume_gateway_url"] = self.ws_url
            if shard:  # (shard 0 keeps the fixture's session id)
                ready["d"]["session_id"] = f"{ready['d']['session_id']}-{shard}"
            ready["d"]["shard"] = [shard, count]
            listed = {g["id"] for g in ready["d"]["guilds"]} | {g["id"] for g in mine}
            ready["d"]["guilds"] = [  # the fixture's and the configured guilds of this shard
                {"id": g, "unavailable": True} for g in sorted(listed) if self.shard_of(g) == shard
            ]
            ready["s"] = next(self._seq)
            await ws.send_str(json.dumps(ready))
            for guild in mine:
                await self.dispatch("GUILD_CREATE", guild, shard=shard)
        elif op == 6:  # RESUME
            session = str((frame["d"] or {}).get("session_id", ""))
            tail = session.rpartition("-")[2] if "-" in session else ""
            shard = int(tail) if tail.isdigit() else 0
            self._shard_ws[shard] = ws
            await ws.send_str(json.dumps({"op": 0, "t": "RESUMED", "s": next(self._seq), "d": {}}))

    def _identified(self, shard: int, count: int) -> None:
        """Record an IDENTIFY; one of the same bucket within the window is a violation."""
        now = asyncio.get_running_loop().time()
        self.shard_count = count
        bucket = shard % self.max_concurrency
        for at, other, _ in self.identifies:
            if other % self.max_concurrency == bucket and now - at < self.identify_window:
                self.identify_violations.append((other, shard, now - at))
        self.identifies.append((now, shard, count))

    async def _gateway_bot(self, request: web.Request) -> web.Response:
        await self._record(request)
        return json_response(
            {
                "url": self.ws_url,
                "shards": self.recommended_shards,
                "session_start_limit": {
                    "total": 1000,
                    "remaining": 999,
                    "reset_after": 14_400_000,
                    "max_concurrency": self.max_concurrency,
                },
            }
        )

    # -- REST --------------------------------------------------------------------------------------
    async def _me(self, request: web.Request) -> web.Response:
        await self._record(request)
        if self.reject_token:
            return json_response({"message": "401: Unauthorized", "code": 0}, status=401)
        return json_response(self.bot_user)

    async def _application(self, request: web.Request) -> web.Response:
        await self._record(request)
        if self.application_down:
            return json_response({"message": "500: Internal Server Error", "code": 0}, status=500)
        return json_response(
            {
                "id": self.ready["d"]["application"]["id"],
                "name": self.bot_user["username"],
                "description": "",
                "icon": None,
                "bot_public": True,
                "bot_require_code_grant": False,
                "owner": self.bot_user,
                "verify_key": "0" * 64,
                "flags": self.application_flags,
            }
        )

    async def _sync_commands(self, request: web.Request) -> web.Response:
        rec = await self._record(request)
        app = request.match_info["app"]
        synced = [
            {**command, "id": str(next(self._ids)), "application_id": app, "version": "1"}
            for command in rec.body or []
        ]
        return json_response(synced)

    async def _typing(self, request: web.Request) -> web.Response:
        await self._record(request)
        return web.Response(status=204)

    async def _callback(self, request: web.Request) -> web.Response:
        rec = await self._record(request)
        body = rec.body or {}
        flags = (body.get("data") or {}).get("flags", 0)
        return json_response(
            {
                "interaction": {
                    "id": request.match_info["id"],
                    "type": 2,
                    "response_message_loading": body.get("type") == 5,
                    "response_message_ephemeral": bool(flags & 64),
                },
                "resource": {"type": body.get("type", 5)},
            }
        )

    async def _followup(self, request: web.Request) -> web.Response:
        rec = await self._record(request)
        return json_response(self.message_payload("0", rec.body))

    def next_failure(self) -> web.Response | None:
        if not self.failures:
            return None
        failure = self.failures.popleft()
        return json_response(failure.body, status=failure.status, headers=failure.headers)


def rate_limited(retry_after: float, *, is_global: bool = False) -> ScriptedFailure:
    """A 429 as Discord sends it (``Via`` included, see the module docstring)."""
    return ScriptedFailure(
        status=429,
        body={
            "message": "You are being rate limited.",
            "retry_after": retry_after,
            "global": is_global,
        },
        headers={
            "Via": "1.1 google",
            "Retry-After": str(retry_after),
            "X-RateLimit-Scope": "global" if is_global else "user",
        },
    )


# -- payload builders shared by the convert and end-to-end tests ---------------------------------
GUILD_ID = 290926798999357249  # the guild of discord_message_create_reply.json
CHANNEL_ID = 290926798999357250
THREAD_ID = 290926798999357300
BOT_ID = 80351110224678912  # discord_ready_docs_user.json
HUMAN_ID = 53908099506183680  # "Mason", the author in the docs examples
MOD_ROLE_ID = 290926798999357260
MANAGE_MESSAGES = 1 << 13


def guild_create(
    *,
    owner_id: int = 1,
    threads: dict[int, int] | None = None,
    guild_id: int = GUILD_ID,
    channel_id: int = CHANNEL_ID,
) -> dict[str, Any]:
    """A GUILD_CREATE ``d`` for the fixture guild (or ``guild_id`` with its channel
    ``channel_id``): one text channel, threads, a moderator role."""
    GUILD_ID, CHANNEL_ID = guild_id, channel_id
    roles = [
        {"id": str(GUILD_ID), "name": "@everyone", "permissions": "0", "position": 0},
        {
            "id": str(MOD_ROLE_ID),
            "name": "mods",
            "permissions": str(MANAGE_MESSAGES),
            "position": 1,
        },
    ]
    return {
        "id": str(GUILD_ID),
        "name": "loopback guild",
        "owner_id": str(owner_id),
        "member_count": 2,
        "roles": [
            {"color": 0, "hoist": False, "managed": False, "mentionable": False, **r} for r in roles
        ],
        "channels": [
            {
                "id": str(CHANNEL_ID),
                "type": 0,
                "name": "general",
                "position": 0,
                "guild_id": str(GUILD_ID),
                "permission_overwrites": [],
            },
        ],
        "threads": [
            {
                "id": str(thread_id),
                "guild_id": str(GUILD_ID),
                "parent_id": str(parent_id),
                "owner_id": str(HUMAN_ID),
                "name": "a thread",
                "type": 11,
                "message_count": 1,
                "member_count": 1,
                "thread_metadata": {
                    "archived": False,
                    "auto_archive_duration": 1440,
                    "archive_timestamp": "2024-01-01T00:00:00.000000+00:00",
                    "locked": False,
                },
            }
            for thread_id, parent_id in (threads or {THREAD_ID: CHANNEL_ID}).items()
        ],
        "members": [],
        "emojis": [],
        "stickers": [],
        "stage_instances": [],
        "guild_scheduled_events": [],
        "features": [],
    }


def message_create(**changes: Any) -> dict[str, Any]:
    """A MESSAGE_CREATE ``d``: the composed reply fixture (a human mentioning and replying to
    the bot in the fixture guild) with ``changes`` applied; ``None`` values delete a key."""
    data: dict[str, Any] = load_fixture("discord_message_create_reply")["d"]
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)  # (the fixture's keys are all optional in discord.py)
        else:
            data[key] = value
    return data


def plain_message(
    message_id: int,
    content: str,
    *,
    channel_id: int = CHANNEL_ID,
    author: dict[str, Any] | None = None,
    roles: list[str] | None = None,
    mentions: list[dict[str, Any]] | None = None,
    guild: bool = True,
    guild_id: int | None = None,
) -> dict[str, Any]:
    """A default-type message with no reference and no attachment (in the fixture guild, or
    ``guild_id``)."""
    changes: dict[str, Any] = {
        "id": str(message_id),
        "content": content,
        "channel_id": str(channel_id),
        "type": 0,
        "message_reference": None,
        "referenced_message": None,
        "attachments": [],
        "mentions": mentions or [],
    }
    if author is not None:
        changes["author"] = author
    if guild:
        member = load_fixture("discord_message_create_reply")["d"]["member"]
        changes["member"] = {**member, "roles": roles or []}
        if guild_id is not None:
            changes["guild_id"] = str(guild_id)
    else:
        changes.update(guild_id=None, member=None, channel_type=None)
    return message_create(**changes)


def bot_mention() -> dict[str, Any]:
    """The ``mentions`` entry for the bot, as in the reply fixture."""
    mention: dict[str, Any] = load_fixture("discord_message_create_reply")["d"]["mentions"][0]
    return mention
