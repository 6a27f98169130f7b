"""Lossless EventSub reconnects: read the old socket through the handover, drop redeliveries.

Twitch moves a websocket session with ``session_reconnect``: the client connects to
``reconnect_url``, the new connection is welcomed and keeps the subscriptions, and until that
welcome Twitch still delivers notifications on the old connection, which it then closes. It
also delivers "at least once": a notification it is unsure about is sent again with the same
``metadata.message_id``, possibly on the other connection.

twitchio 3.3 (and its upstream ``Websocket._reconnect`` as of this writing) handles the
reconnect *inside* the old socket's read loop: it awaits the new socket's welcome without
reading the old socket, then closes it, so whatever Twitch sent on the old connection meanwhile
is discarded unread (9 of 10 events in flight were lost in every measured run), and it never
de-duplicates.

Why a subclass of twitchio's ``Websocket`` rather than owning the socket: everything else it
does is right and tested upstream - keepalive timeouts, backoff and re-subscribing after a
plain disconnect, parsing payloads into the models ``convert`` reads, dispatching to the
client's listeners - and owning the socket would mean rewriting all of it. The flaw is confined
to three methods, which ``HandoverWebsocket`` overrides:

- ``_process_reconnect`` starts the handover as its own task and returns, so the old socket's
  read loop keeps dispatching what arrives on it;
- the handover connects the new socket (welcomed, registered with the client), then keeps
  reading the old one until Twitch closes it (``HANDOVER_DRAIN_SECONDS`` at most) and closes
  it; if the reconnect URL fails it falls back to twitchio's fresh connect and re-subscribe.
  While a handover runs or after it, the old socket never reconnects by itself;
- ``_process_notification`` drops a notification whose ``message_id`` was already dispatched
  (``RecentIds``, one per client, shared by every socket), so nothing is published twice.
  Bounded, in-process only: exactly-once across processes is the router's claims' job. The
  id is EventSub's per-delivery id, so the N notices of a gift-sub burst (one per recipient,
  all naming the same community gift) are N ids and all pass; only a redelivery is dropped.
  A chat notice's payload is completed for twitchio first (``notices.complete``).

The same socket carries a conduit shard (``shard_id``; ``conduit.ConduitShards`` owns it): a
handover passes the shard id on and names the new socket in ``replaced_by`` (Twitch moves the
shard with the session), and a shard's socket that drops is marked ``lost`` and closed in a task
of its own (twitchio closes it from the keepalive or read task, and its ``close`` cancels that
very task halfway), so its owner opens another and points the shard at it.

``_cleanup`` is narrowed too: twitchio removes a closing socket's session id from the client's
registry even when that id now names the new socket (Twitch keeps the session id across a
reconnect). The overridden names are twitchio 3.3's private API, pinned in constraints.txt;
``tests/test_twitch_eventsub.py`` checks they still exist, so an upgrade that renames one fails
the tests instead of silently losing events again.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from cachetools import LRUCache
from twitchio.eventsub.websockets import Websocket

from adapters.twitch import notices

if TYPE_CHECKING:
    from twitchio.types_.conduits import NotificationMessage, ReconnectMessage

log = logging.getLogger("chorus.twitch")

HANDOVER_DRAIN_SECONDS = 5.0
RECENT_IDS = 10_000  # about an hour of a busy channel's chat, deletions and notices
OVERRIDDEN = (
    "_process_reconnect",
    "_create_connection_task",
    "_process_notification",
    "_cleanup",
    "_listen_task",
    "_subscriptions",
    "_original_attempts",
    "_shard_id",
)


class RecentIds:
    """The last ``capacity`` EventSub message ids, least recently seen forgotten first."""

    def __init__(self, capacity: int = RECENT_IDS) -> None:
        self.capacity = capacity
        self._ids: LRUCache[str, None] = LRUCache(capacity)
        self.duplicates = 0

    def __len__(self) -> int:
        return len(self._ids)

    def first_time(self, message_id: str) -> bool:
        """True the first time ``message_id`` is seen (and remembers it); False for a repeat."""
        if message_id in self._ids:
            self._ids[message_id] = None  # seen again: now the most recent
            self.duplicates += 1
            return False
        self._ids[message_id] = None
        return True


class HandoverWebsocket(Websocket):
    """twitchio's EventSub ``Websocket`` with a lossless ``session_reconnect`` and de-duplication."""

    __slots__ = ("_closer", "_handover", "_recent", "_read_during_handover", "lost", "replaced_by")

    def __init__(self, *, recent: RecentIds, **options: Any) -> None:
        super().__init__(**options)
        self._recent = recent
        self._handover: str | None = None  # None | "running" | "done"
        self._read_during_handover = 0
        self.replaced_by: HandoverWebsocket | None = None  # the socket a handover moved to
        self.lost = False  # a conduit shard's socket that dropped: its owner opens another
        self._closer: asyncio.Task[None] | None = None

    async def _process_reconnect(self, data: ReconnectMessage) -> None:
        if self._handover is not None:
            return  # one handover at a time; Twitch sends one reconnect per session
        self._handover = "running"
        url = data["payload"]["session"]["reconnect_url"]
        log.info("twitch eventsub reconnect requested", extra={"session": self.session_id})
        task = asyncio.create_task(self._hand_over(url), name=f"twitch-handover-{self}")
        self._connection_tasks.add(task)
        task.add_done_callback(self._connection_tasks.discard)

    async def _hand_over(self, url: str) -> None:
        new = HandoverWebsocket(
            recent=self._recent,
            keep_alive_timeout=self._keep_alive_timeout,
            reconnect_attempts=self._original_attempts,
            client=self._client,
            token_for=self._token_for,
            http=self._http,
            shard_id=self._shard_id,  # a conduit shard: Twitch moves the shard with the session
        )
        new._subscriptions = self._subscriptions  # Twitch moves them; nothing is re-subscribed
        try:
            await new.connect(url=url, reconnect=False, fail_once=True)
        except Exception:
            log.warning(
                "twitch eventsub reconnect URL failed; reconnecting afresh and re-subscribing",
                extra={"session": self.session_id},
                exc_info=True,
            )
            self._handover = None
            await self.connect(reconnect=True)  # twitchio's own fallback
            return
        self._handover = "done"
        self.replaced_by = new
        if self._client is not None and self._token_for is not None:
            self._client._websockets[self._token_for][new.session_id or ""] = new
        listen = self._listen_task
        if listen is not None and not listen.done():  # Twitch closes the old one after the welcome
            await asyncio.wait({listen}, timeout=HANDOVER_DRAIN_SECONDS)
        log.info(
            "twitch eventsub handed over",
            extra={
                "old_session": self.session_id,
                "session": new.session_id,
                "read_on_old_socket": self._read_during_handover,
            },
        )
        await self.close()

    async def _create_connection_task(self) -> None:
        if self._handover is not None:
            return  # the handover owns what happens next; the old socket never reconnects
        if self._shard_id is not None:
            # A conduit shard's socket dropped (keepalive timeout, closed connection). twitchio
            # closes it from the very task that noticed, and its close cancels that task (the
            # keepalive or read loop) halfway, leaving the socket neither open nor closed; the
            # close runs as its own task instead, and ``ConduitShards`` reopens the shard.
            self.lost = True
            if self._closer is None:
                self._closer = asyncio.create_task(self.close(reassociate=False))
            return
        await super()._create_connection_task()

    async def _process_notification(self, data: NotificationMessage) -> None:
        metadata = data["metadata"]
        if not self._recent.first_time(metadata["message_id"]):
            log.info(
                "twitch eventsub duplicate dropped",
                extra={"eventsub_id": metadata["message_id"], "session": self.session_id},
            )
            return
        if self._handover is not None:
            self._read_during_handover += 1
        if metadata["subscription_type"] == notices.SUBSCRIPTION:
            notices.complete(data["payload"]["event"])  # twitchio 3.3 needs every notice object
        elif metadata["subscription_type"] == "stream.offline":
            # Twitch's stream.offline has no stream id, which twitchio 3 reads: an empty one
            data["payload"]["event"].setdefault("id", "")
        await super()._process_notification(data)

    def _cleanup(self, closed: bool = True) -> None:
        """Leave the client's registry entry alone when it names another socket (same id)."""
        self._closed = closed
        if self._client is None or self._token_for is None:
            return
        sockets = self._client._websockets.get(self._token_for, {})
        if sockets.get(self.session_id or "") is self:
            del sockets[self.session_id or ""]


def check_twitchio() -> None:
    """Fail loudly if twitchio no longer has what ``HandoverWebsocket`` overrides."""
    missing = [name for name in OVERRIDDEN if not hasattr(Websocket, name)]
    if missing:
        raise RuntimeError(
            f"twitchio's EventSub Websocket has no {', '.join(missing)}: this twitchio is not "
            "the one Chorus's lossless reconnect was written for (see constraints.txt)"
        )
