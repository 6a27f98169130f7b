"""Twitch chat over an EventSub conduit, its shards spread over the gateway processes.

With ``TWITCH_TRANSPORT=conduit`` the subscriptions belong to a conduit, not to a socket: each
of the conduit's shards is one process's WebSocket, and Twitch hands each notification to one
enabled shard (retrying once on another if that shard does not take it). ``ConduitShards`` runs
in every gateway process and, every third of ``TWITCH_SHARD_LEASE_SECONDS`` (shards and channels
in two loops of their own, so subscribing many channels never delays a lease's renewal):

1. **Conduit.** Found once at start: ``TWITCH_CONDUIT_ID``, else the one recorded in the state
   store if Twitch still has it, else a new one of ``TWITCH_CONDUIT_SHARDS`` shards (recorded
   with ``SET NX``: when two processes race, one conduit wins and the loser deletes its own).
   **Resized** (Update Conduits) to ``TWITCH_CONDUIT_SHARDS`` if Chorus's own (not
   ``TWITCH_CONDUIT_ID``'s); the count is recorded in the store, read by every process each
   tick. Growing adds shards without a transport, which the processes claim. Shrinking drops
   the shards from the new count up: this process connects its share of those that stay
   before it shrinks the conduit, and a process closes a dropped shard only after its share of
   those that stay is up, so some shard is enabled throughout.
2. **Share.** The process marks itself alive (``heartbeat``), renews the leases of its shards,
   and computes the fair share ``ceil(shards / live processes)``. Above it, it hands its
   highest shards back (releases the lease, closes the socket); below it, it claims free
   shards: a shard whose holder died is free once that lease lapses. More live processes than
   shards leave some holding none: each such process logs it (once, until that changes); they
   take over when a holder dies.
3. **Sockets.** For a claimed shard it opens a WebSocket (twitchio's, with Chorus's lossless
   ``session_reconnect``: ``eventsub.HandoverWebsocket``), waits for its welcome and PATCHes the
   shard to that session (Update Conduit Shards). A socket that closed, or whose session is not
   the one the shard points at, is reopened and PATCHed again.
4. **Channels.** The process holding shard 0 keeps the conduit's subscriptions in step with the
   channels (``TWITCH_CHANNELS`` plus those joined, minus those left, at run time: ``chorus
   twitch join/leave``, the dashboard): it subscribes new ones with the app access token (409,
   already subscribed, counts as done) and deletes those of channels left. A refusal is logged
   once per channel with what the broadcaster must grant (``grants.refusal``) and retried after
   the next join or leave.

Notifications reach the adapter's listeners through twitchio (the shard sockets dispatch on the
client). A notification Twitch retries on another shard can reach another process: exactly-once
across processes is the router's claims' job, as for any redelivery.

Why not twitchio's ``AutoClient``: it takes the shard ids a process owns at construction and
(in 3.3) re-associates only its own shards; a shard of a dead process is never taken over, and
the share cannot change while running. Chorus uses twitchio's conduit calls (``create_conduit``,
``fetch_conduits``, ``update_conduit_shards``, subscriptions with a ``conduit`` transport) and
its shard WebSocket, and keeps the assignment in the state store (``bot.state.conduits``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from twitchio.eventsub import (
    ChatClearUserMessagesSubscription,
    ChatMessageDeleteSubscription,
    ChatMessageSubscription,
    ChatNotificationSubscription,
    StreamOfflineSubscription,
    StreamOnlineSubscription,
    SubscriptionPayload,
)
from twitchio.eventsub.enums import SubscriptionType

from adapters.twitch import grants
from adapters.twitch.client import ChorusTwitchClient, TwitchAPIError, api
from adapters.twitch.convert import BotIdentity
from adapters.twitch.eventsub import HandoverWebsocket
from bot.settings import ConfigError, TwitchSettings
from bot.state.conduits import ConduitStore, channels_now

log = logging.getLogger("chorus.twitch.conduit")


def process_token() -> str:
    """This process's name in the shard leases: host, pid and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def fair_share(shards: int, members: int) -> int:
    """How many shards one of ``members`` live processes holds at most."""
    return math.ceil(shards / max(1, members))


def _live_socket(sock: HandoverWebsocket | None) -> HandoverWebsocket | None:
    """The socket a shard is on now: after a handover, the new one."""
    while sock is not None and sock.replaced_by is not None:
        sock = sock.replaced_by
    return sock


class ConduitShards:
    """This process's part of the conduit: its shards' leases and sockets, and the channels."""

    def __init__(
        self,
        *,
        client: ChorusTwitchClient,
        settings: TwitchSettings,
        store: ConduitStore,
        bot: BotIdentity,
        scopes: frozenset[str],
        on_channels: Callable[[dict[str, str]], None],
        owner: str | None = None,
    ) -> None:
        self.client = client
        self.settings = settings
        self.store = store
        self.bot = bot
        self.scopes = scopes  # the bot token's, as Twitch validated it
        self.on_channels = on_channels
        self.owner = owner or process_token()
        self.app = (settings.client_id or "").strip()
        self.lease = settings.shard_lease_seconds
        self.conduit_id = ""
        self.shard_count = 0
        self.sockets: dict[int, HandoverWebsocket] = {}
        self.sessions: dict[int, str] = {}  # shard -> the session it was PATCHed to
        self.channels: dict[str, str] = {}  # broadcaster id -> login, as last resolved
        self.subscribed: set[str] | None = None  # broadcaster ids (known while holding shard 0)
        self.refused: set[str] = set()  # broadcaster ids refused since the channels changed
        self.claimed = 0  # shards this process claimed (at start, from a dead or leaving one)
        self._wanted: list[str] | None = None
        self._changes = -1
        self._idle = False  # holding no shard because there are more processes than shards
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = asyncio.Event()

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Find the conduit, take this process's share and subscribe; then keep at it."""
        grants.check_bot_scopes(self.scopes, self.bot.login)
        await self._find_conduit()
        shrink = await self._resize()
        await self.tick_shards()
        if shrink:  # this process's share of the shards that stay is up: now drop the rest
            await self._update_conduit(self.shard_count)
        await self.tick_channels()
        self._tasks = [
            asyncio.create_task(self._every(self.tick_shards), name="twitch-conduit-shards"),
            asyncio.create_task(self._every(self.tick_channels), name="twitch-conduit-channels"),
        ]

    async def aclose(self) -> None:
        """Hand the shards back (release, close) so another process takes them at once."""
        self._stopped.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for shard in sorted(self.sockets):
            await self._drop(shard, release=True)
        if self.conduit_id:
            try:
                await self.store.leave_members(self.conduit_id, self.owner)
            except Exception:
                log.warning("leaving the conduit's members failed", exc_info=True)

    def ready(self) -> bool:
        """Running, and every shard this process holds is on an open, welcomed socket."""
        if not self._tasks or any(t.done() for t in self._tasks) or self._stopped.is_set():
            return False
        for shard, sock in self.sockets.items():
            live = _live_socket(sock)
            if live is None or not live.connected or live.lost:
                return False
            if live.session_id != self.sessions.get(shard):
                return False
        return True

    async def _every(self, tick: Callable[[], Awaitable[None]]) -> None:
        """``tick`` every third of a lease. Shards and channels tick apart: subscribing many
        channels (Helix calls one by one) must never hold up the leases' renewal."""
        while not self._stopped.is_set():
            try:
                await asyncio.wait_for(self._stopped.wait(), timeout=self.lease / 3)
                return
            except TimeoutError:
                pass
            try:
                await tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("twitch conduit tick failed; trying again")

    # -- the conduit -------------------------------------------------------------------------
    async def _find_conduit(self) -> None:
        # what was recorded is read first: a conduit recorded later is not in a listing made
        # before it, and must not be mistaken for one Twitch no longer has
        recorded = await self.store.conduit(self.app)
        conduits = {c.id: c for c in await api(self.client.fetch_conduits())}
        wanted = (self.settings.conduit_id or "").strip()
        if wanted:
            if wanted not in conduits:
                raise ConfigError(
                    f"TWITCH_CONDUIT_ID={wanted} is not a conduit of this application; unset it "
                    "to let Chorus create one, or copy an id from Get Conduits"
                )
            chosen = wanted
        else:
            if recorded in conduits:
                chosen = recorded
            else:
                created = await api(self.client.create_conduit(self.settings.conduit_shards))
                conduits[created.id] = created
                chosen = await self.store.replace_conduit(self.app, recorded, created.id)
                if chosen != created.id:  # another process recorded its conduit first
                    await api(created.delete())
                    conduits = {c.id: c for c in await api(self.client.fetch_conduits())}
                else:
                    log.info(
                        "twitch conduit created",
                        extra={"conduit": created.id, "shards": created.shard_count},
                    )
        self.conduit_id = chosen
        self.shard_count = conduits[chosen].shard_count

    async def _resize(self) -> bool:
        """Bring Chorus's conduit to ``TWITCH_CONDUIT_SHARDS`` and record the count every
        process uses; True when the conduit is to shrink once this process holds its share."""
        wanted, now = self.settings.conduit_shards, self.shard_count
        named = bool((self.settings.conduit_id or "").strip())
        if named and wanted != now:
            log.info(
                "TWITCH_CONDUIT_ID names a conduit of another size than TWITCH_CONDUIT_SHARDS; "
                "using the conduit's (resize it with Update Conduits, or unset "
                "TWITCH_CONDUIT_ID to let Chorus manage its own)",
                extra={"conduit": self.conduit_id, "shards": now, "configured": wanted},
            )
        if named or wanted == now:
            await self.store.set_size(self.conduit_id, now)
            return False
        if wanted > now and not await self._update_conduit(wanted):
            await self.store.set_size(self.conduit_id, now)  # Twitch refused: stay as it is
            return False
        self.shard_count = wanted  # growing: Twitch has added the shards (no transport yet)
        await self.store.set_size(self.conduit_id, wanted)
        log.info(
            "twitch conduit resized",
            extra={"conduit": self.conduit_id, "from": now, "to": wanted},
        )
        return wanted < now

    async def _update_conduit(self, count: int) -> bool:
        """Update Conduits to ``count`` shards; False (logged) if Twitch refused."""
        try:
            answer = await api(self.client.http.update_conduits(self.conduit_id, shard_count=count))
        except TwitchAPIError as exc:
            log.error(
                "twitch refused to resize the conduit; it keeps its shard count",
                extra={"conduit": self.conduit_id, "to": count, "status": exc.status},
            )
            return False
        return int(answer["data"][0]["shard_count"]) == count

    # -- one tick ----------------------------------------------------------------------------
    async def tick_shards(self) -> None:
        """Stay alive, keep or hand back shards, claim free ones, keep their sockets open."""
        conduit, store = self.conduit_id, self.store
        members = await store.heartbeat(conduit, self.owner, self.lease)
        recorded = await store.size(conduit)
        if recorded is not None and recorded != self.shard_count:  # another process resized it
            log.info(
                "twitch conduit size changed", extra={"from": self.shard_count, "to": recorded}
            )
            self.shard_count = recorded
        for shard in sorted(self.sockets):
            if not await store.renew(conduit, shard, self.owner, self.lease):
                log.warning("twitch shard lease lost", extra={"shard": shard})
                await self._drop(shard, release=False)
        owners = await store.owners(conduit, self.shard_count)
        share = fair_share(self.shard_count, len(members))
        mine = sorted(n for n, who in owners.items() if who == self.owner)
        for shard in mine[share:]:  # a process joined: hand the highest shards over
            await self._drop(shard, release=True)
        free = [n for n in range(self.shard_count) if n not in owners]
        for shard in free[: max(0, share - len(mine))]:
            if await store.claim(conduit, shard, self.owner, self.lease):
                self.claimed += 1
                mine.append(shard)
                log.info("twitch shard claimed", extra={"shard": shard, "share": share})
        for shard in sorted(mine[:share]):
            try:
                await self._ensure_socket(shard)
            except Exception:
                log.warning("twitch shard not connected; retrying", extra={"shard": shard})
                await self._drop(shard, release=True)
        for shard in [n for n in sorted(self.sockets) if n >= self.shard_count]:
            await self._drop(shard, release=True)  # the conduit shrank: the shards that stay are up
        self._note_idle(len(members), bool(mine))

    def _note_idle(self, members: int, holding: bool) -> None:
        """Log once (until it changes) that this process holds no shard: more gateways than
        shards. It takes shards over when a holder dies or the conduit grows."""
        idle = not holding and members > self.shard_count
        if idle and not self._idle:
            log.warning(
                "this gateway holds no twitch conduit shard: more gateway processes than shards; "
                "raise TWITCH_CONDUIT_SHARDS to at least the number of gateways (it stands by "
                "and takes over the shards of a gateway that stops)",
                extra={"gateways": members, "shards": self.shard_count},
            )
        self._idle = idle

    async def _ensure_socket(self, shard: int) -> None:
        held = self.sockets.get(shard)
        live = _live_socket(held)
        if held is not None and live is not held and live is not None and live.session_id:
            # a session_reconnect handover: Twitch moved the shard with the session
            self.sockets[shard] = live
            if self.sessions.get(shard) == held.session_id:
                self.sessions[shard] = live.session_id
        usable = live is not None and live.connected and not live.lost and bool(live.session_id)
        if live is not None and usable and live.session_id == self.sessions.get(shard):
            return
        if live is not None and usable:
            await self._patch(shard, live)  # reconnected afresh: point the shard at it
            return
        if live is not None:
            await live.close(reassociate=False)
        sock = HandoverWebsocket(
            recent=self.client.recent_events,
            client=self.client,
            http=self.client.http,
            shard_id=str(shard),
        )
        self.sockets[shard] = sock
        await sock.connect(fail_once=True)  # returns once Twitch has welcomed the session
        if sock.session_id is None:
            raise RuntimeError(f"shard {shard}'s socket was not welcomed")
        await self._patch(shard, sock)

    async def _patch(self, shard: int, sock: HandoverWebsocket) -> None:
        session = sock.session_id or ""
        update: Any = {
            "id": str(shard),
            "transport": {"method": "websocket", "session_id": session},
        }
        answer = await api(self.client.http.update_conduit_shards(self.conduit_id, shards=[update]))
        errors = (answer or {}).get("errors") or []
        if errors:
            raise RuntimeError(f"Twitch refused shard {shard}'s session: {errors[0]}")
        self.sessions[shard] = session
        log.info("twitch shard assigned", extra={"shard": shard, "session": session})

    async def _drop(self, shard: int, *, release: bool) -> None:
        sock = _live_socket(self.sockets.pop(shard, None))
        self.sessions.pop(shard, None)
        if release:
            await self.store.release(self.conduit_id, shard, self.owner)
        if sock is not None:
            await sock.close(reassociate=False)
        log.info("twitch shard handed back", extra={"shard": shard, "released": release})

    # -- channels ----------------------------------------------------------------------------
    async def tick_channels(self) -> None:
        """Follow the joined and left channels; the holder of shard 0 subscribes them."""
        holds_first = 0 in self.sessions
        joined, left, changes = await self.store.channel_changes(self.app)
        wanted = channels_now(self.settings.channels, joined, left)
        if changes != self._changes:
            self.refused.clear()  # a join again retries a refused channel
            self._changes = changes
        if wanted != self._wanted:
            self.channels = await self._resolve(wanted)
            self._wanted = wanted
            self.on_channels(dict(self.channels))
        if not holds_first:
            self.subscribed = None  # another process keeps the subscriptions in step
            return
        if self.subscribed is None:
            self.subscribed = await self._subscribed_now()
        for broadcaster in sorted(set(self.channels) - self.subscribed - self.refused):
            await self._subscribe(broadcaster)
        for broadcaster in sorted(self.subscribed - set(self.channels)):
            await self._unsubscribe(broadcaster)

    async def _resolve(self, wanted: list[str]) -> dict[str, str]:
        found = {c: c for c in wanted if c.isdigit()}
        logins = [c for c in wanted if not c.isdigit()]
        if logins:
            users = await api(self.client.fetch_users(logins=logins))
            ids = {(u.name or "").lower(): u.id for u in users}
            for login in logins:
                if login in ids:
                    found[ids[login]] = login
                else:
                    log.error(
                        "twitch channel not found; check the spelling (the login, as in "
                        "twitch.tv/<login>)",
                        extra={"channel": login},
                    )
        return found

    async def _subscribed_now(self) -> set[str]:
        listing = await api(self.client.fetch_eventsub_subscriptions(conduit_id=self.conduit_id))
        found: set[str] = set()
        async for sub in listing.subscriptions:
            if sub.type == ChatMessageSubscription.type:
                found.add(str(sub.condition.get("broadcaster_user_id", "")))
        return found

    def payloads(self, broadcaster: str) -> list[SubscriptionPayload]:
        condition = {"broadcaster_user_id": broadcaster, "user_id": self.bot.id}
        payloads: list[SubscriptionPayload] = [
            ChatMessageSubscription(**condition),
            ChatMessageDeleteSubscription(**condition),
            ChatClearUserMessagesSubscription(**condition),
            ChatNotificationSubscription(**condition),
        ]
        if self.settings.stream_state:
            state = {"broadcaster_user_id": broadcaster}
            payloads += [StreamOnlineSubscription(**state), StreamOfflineSubscription(**state)]
        return payloads

    async def _subscribe(self, broadcaster: str) -> None:
        assert self.subscribed is not None
        name = self.channels.get(broadcaster, broadcaster)
        transport: Any = {"method": "conduit", "conduit_id": self.conduit_id}
        for payload in self.payloads(broadcaster):
            try:
                await api(
                    self.client.http.create_eventsub_subscription(
                        type=SubscriptionType(payload.type),
                        version=payload.version,
                        condition=payload.condition,
                        transport=transport,
                        token_for=None,  # conduits take the app access token
                    )
                )
            except TwitchAPIError as exc:
                if exc.status == 409:  # already subscribed (another process, an earlier run)
                    continue
                why = grants.refusal(
                    status=exc.status,
                    sub_type=payload.type,
                    channel=name,
                    bot_login=self.bot.login,
                    client_id=self.app,
                    detail=str(exc),
                )
                log.error(why, extra={"channel": name, "status": exc.status})
                if payload.type == ChatMessageSubscription.type:
                    self.refused.add(broadcaster)
                    return
        self.subscribed.add(broadcaster)
        log.info("twitch channel joined", extra={"channel": name})

    async def _unsubscribe(self, broadcaster: str) -> None:
        assert self.subscribed is not None
        listing = await api(self.client.fetch_eventsub_subscriptions(conduit_id=self.conduit_id))
        doomed = [
            sub.id
            async for sub in listing.subscriptions
            if sub.condition.get("broadcaster_user_id") == broadcaster
        ]
        for sub_id in doomed:
            try:
                await api(self.client.delete_eventsub_subscription(sub_id))
            except TwitchAPIError as exc:
                if exc.status != 404:  # 404: already deleted (by the previous holder of shard 0)
                    raise
        self.subscribed.discard(broadcaster)
        log.info("twitch channel left", extra={"channel": broadcaster})
