"""twitchio, made safe for Chorus: the client subclass, endpoint set-up and error wrapping.

Why apart from the adapter: these are workarounds for twitchio 3.3.2's quirks, not adapter
logic, and they change when twitchio does. It writes ``.tio.tokens.json`` into the working
directory unless told not to (``ChorusTwitchClient`` makes the file impossible); its endpoints
are class/module globals (``Route.BASE``, ``Route.ID_BASE``, ``websockets.WSS``), so
``configure_endpoints`` sets them for the process; when a reconnect keeps the session id (Twitch
keeps it) twitchio drops the new socket from its registry and ``Client.close`` would leave it
running, so ``_Sockets`` remembers every socket to close it; its ``HTTPException`` message
carries the request URL, which for the OAuth refresh holds secrets (``TwitchAPIError``); and its
``session_reconnect`` loses the events Twitch sends on the old socket during the handover, so
``ChorusTwitchClient.subscribe_websocket`` puts every subscription on a ``HandoverWebsocket``
(``adapters/twitch/eventsub.py``), which reads the old socket through the handover and drops
redelivered events by message id.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, TypeVar

import twitchio
import twitchio.eventsub.websockets as twitch_ws
from twitchio.eventsub import SubscriptionPayload
from twitchio.eventsub.websockets import Websocket
from twitchio.http import Route
from twitchio.types_.eventsub import SubscriptionResponse

from adapters.twitch.eventsub import HandoverWebsocket, RecentIds, check_twitchio
from bot.settings import TwitchSettings

T = TypeVar("T")


class TwitchAPIError(Exception):
    """A failed Helix/OAuth call, without twitchio's message (its URL may carry secrets)."""

    def __init__(self, exc: twitchio.HTTPException) -> None:
        path = exc.route.path if exc.route is not None else "?"
        super().__init__(f"HTTP {exc.status} from {path}: {exc.extra.get('message', '')}")
        self.status = exc.status


async def api(call: Awaitable[T]) -> T:
    """Await a twitchio call; an ``HTTPException`` becomes a ``TwitchAPIError``.

    twitchio's message includes the request URL, and the OAuth refresh URL carries the client
    secret and the refresh token in its query string: a traceback of it must never be logged.
    """
    try:
        return await call
    except twitchio.HTTPException as exc:
        raise TwitchAPIError(exc) from None


def configure_endpoints(settings: TwitchSettings) -> None:
    """Point twitchio at ``settings``' endpoints (process-wide: twitchio keeps them global)."""
    Route.BASE = settings.api_base_url
    Route.ID_BASE = settings.auth_base_url
    twitch_ws.WSS = settings.eventsub_ws_url


class _Seen(dict[str, Websocket]):
    def __init__(self, seen: set[Websocket], *args: Any) -> None:
        super().__init__(*args)
        self._seen = seen
        seen.update(self.values())

    def __setitem__(self, key: str, value: Websocket) -> None:
        super().__setitem__(key, value)
        self._seen.add(value)


class _Sockets(dict[str, dict[str, Websocket]]):
    """twitchio's ``Client._websockets`` that also remembers every socket ever registered."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[Websocket] = set()

    def __missing__(self, key: str) -> dict[str, Websocket]:
        value = self[key] = _Seen(self.seen)
        return value

    def __setitem__(self, key: str, value: dict[str, Websocket]) -> None:
        super().__setitem__(key, value if isinstance(value, _Seen) else _Seen(self.seen, value))


class ChorusTwitchClient(twitchio.Client):
    """A twitchio ``Client`` that never touches ``.tio.tokens.json``, tracks its sockets and
    subscribes on lossless, de-duplicating EventSub sockets (``HandoverWebsocket``)."""

    def __init__(self, *, client_id: str, client_secret: str) -> None:
        check_twitchio()
        super().__init__(client_id=client_id, client_secret=client_secret, fetch_client_user=False)
        self._websockets = _Sockets()
        self.recent_events = RecentIds()  # EventSub message ids already dispatched

    async def subscribe_websocket(
        self,
        payload: SubscriptionPayload,
        *,
        as_bot: bool | None = None,
        token_for: str | twitchio.PartialUser | None = None,
        socket_id: str | None = None,
    ) -> SubscriptionResponse | None:
        """twitchio's, but on a ``HandoverWebsocket`` of ``token_for`` (opened if need be)."""
        if socket_id is None and token_for is not None:
            user = token_for if isinstance(token_for, str) else token_for.id
            socket_id = (await self._eventsub_socket(user)).session_id
        return await super().subscribe_websocket(
            payload, as_bot=as_bot, token_for=token_for, socket_id=socket_id
        )

    async def _eventsub_socket(self, token_for: str) -> HandoverWebsocket:
        sockets = self._websockets[token_for]
        for socket in sockets.values():
            if isinstance(socket, HandoverWebsocket) and socket.can_subscribe and socket.connected:
                return socket
        socket = HandoverWebsocket(
            recent=self.recent_events, client=self, token_for=token_for, http=self._http
        )
        await socket.connect(fail_once=True)
        sockets[socket.session_id or ""] = socket
        return socket

    async def load_tokens(self, path: str | None = None, /) -> None:
        """Tokens come from the adapter's ``TokenStore``, never from a file in the cwd."""

    async def save_tokens(self, path: str | None = None, /) -> None:
        """Tokens go to the adapter's ``TokenStore``, never to a file in the cwd."""

    async def close_all_sockets(self) -> None:
        sockets: _Sockets = self._websockets  # type: ignore[assignment]
        for socket in list(sockets.seen):
            await socket.close()
        sockets.seen.clear()
