"""The Twitch adapter: EventSub websocket in, Send Chat Message out, through twitchio 3.

Chorus reads chat as the bot user: one ``channel.chat.message`` subscription per configured
channel (plus ``message_delete`` and ``clear_user_messages`` so removed text leaves the stored
history too, and ``chat.notification`` for subs, gifts, raids and announcements), over twitchio's EventSub websocket. ``session_reconnect`` is followed without
losing or doubling an event (``eventsub.HandoverWebsocket``: Twitch moves the subscriptions to the
new connection, nothing is re-subscribed, the old one is read until Twitch closes it). It
refreshes the bot's token when Helix answers 401 "Invalid OAuth token" and in a background
validation loop; every new pair is written to the operator's ``TokenStore``.

Sending has one chokepoint, ``send``: the Redis-shared window (20 messages per 30 s, 100 where
the bot moderates) is awaited before every call, server errors and 429s are retried with
jittered backoff, and a message Twitch refuses (``is_sent: false``) is logged with its
``drop_reason``, counted in ``dropped``, and on ``msg_ratelimit`` the whole bucket pauses
(every process) and the message is retried. ``ready()`` (``/readyz``'s ``adapter:twitch``)
reads twitchio's state of the EventSub socket.

With ``TWITCH_TRANSPORT=conduit`` the subscriptions live on an EventSub conduit instead, created
with the app access token, and the gateway processes share its shards (``conduit.ConduitShards``:
leases in the state store, a dead process's shards taken over, channels joined and left at run
time). Sending is the same either way.

Moderation actions (delete, timeout, ban through Helix) are ``moderation.TwitchModeration``, on
``self.moderation``. The waits and retries of ``send`` are ``bot.resilience``'s; twitchio's quirks (token files,
global endpoints, lost sockets, secrets in error messages) are worked around in ``client``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

import twitchio
from cachetools import FIFOCache
from twitchio.eventsub import (
    ChatClearUserMessagesSubscription,
    ChatMessageDeleteSubscription,
    ChatMessageSubscription,
    ChatNotificationSubscription,
    StreamOfflineSubscription,
    StreamOnlineSubscription,
)
from twitchio.eventsub.websockets import Websocket

from adapters.twitch import convert, guard, notices
from adapters.twitch.client import ChorusTwitchClient, TwitchAPIError, api, configure_endpoints
from adapters.twitch.conduit import ConduitShards
from adapters.twitch.convert import BotIdentity, SendArgs
from adapters.twitch.moderation import TwitchModeration
from adapters.twitch.redemptions import Redemptions
from adapters.twitch.tokens import (
    StoredTokens,
    TokenStore,
    broadcaster_store,
    choose,
    open_token_store,
)
from bot.bus.base import EventBus
from bot.bus.topics import DELETIONS, INBOUND, outbound_topic
from bot.events import Reply
from bot.ops.logs import add_secrets
from bot.resilience import Failure, RetryPolicy, retry
from bot.settings import ConfigError, TwitchSettings
from bot.settings.twitch import CONSOLE_URL, TOKEN_HELP
from bot.state.conduits import ConduitStore, MemoryConduitStore, RedisConduitStore
from bot.state.connect import Client
from bot.state.platforms import LATENCY_MARGIN, PlatformTokens, SharedRateLimiter

log = logging.getLogger("chorus.twitch")

PLATFORM = convert.PLATFORM
# Twitch's chat limits: per 30 s, 20 messages, or 100 where the bot moderates.
SEND_WINDOW = 30.0
USER_LIMIT = 20
MODERATOR_LIMIT = 100
_LOGIN_CACHE = 5000


class _RateLimitDrop(Exception):
    """Twitch refused a message with ``msg_ratelimit``: retried after the bucket pauses."""


def _classify_send(exc: BaseException) -> Failure:
    """Retried: 429, 5xx and ``msg_ratelimit`` drops. Anything else is final."""
    if isinstance(exc, _RateLimitDrop):
        return Failure(retryable=True, reason="msg_ratelimit")
    if isinstance(exc, TwitchAPIError):
        retryable = exc.status == 429 or exc.status >= 500
        return Failure(retryable, exc.status, reason=f"HTTP {exc.status}")
    return Failure(retryable=False)


def _skipped(what: str, error: ValueError) -> None:
    """One line for an event twitchio parsed but whose values Chorus cannot use."""
    log.warning(
        f"twitch {what} skipped: a field is not usable",
        extra={"error": str(error).splitlines()[0][:200]},
    )


def _live(socket: Websocket) -> bool:
    """twitchio's own state of one EventSub socket: open, welcomed, subscriptions on it."""
    return (
        socket.connected
        and socket._ready.is_set()  # set by session_welcome, cleared while (re)connecting
        and socket.subscription_count > 0
    )


class TwitchAdapter:
    platform = PLATFORM

    def __init__(
        self,
        bus: EventBus,
        settings: TwitchSettings,
        *,
        client: ChorusTwitchClient,
        tokens: TokenStore,
        limiter: SharedRateLimiter,
        retry: RetryPolicy | None = None,
        conduits: ConduitStore | None = None,
        broadcasters: Callable[[str], TokenStore] | None = None,
    ) -> None:
        self.bus = bus
        self.settings = settings
        self.client = client
        self.tokens = tokens
        self.limiter = limiter
        self.retry = retry or RetryPolicy(max_retries=3, base_delay=2.0, max_delay=30.0)
        self.bot: BotIdentity | None = None
        self.scopes: frozenset[str] = frozenset()  # the bot token's, as Twitch validated it
        self.moderation = TwitchModeration(self)  # delete, timeout, ban through Helix
        self.channels: dict[str, str] = {}  # broadcaster id -> login (or id)
        self.sent = 0
        self.dropped: Counter[str] = Counter()  # by drop_reason.code, for metrics
        self.failed = 0
        self._moderator: dict[str, bool] = {}
        # user id -> login, for mentions; a login seen again is the newest, a lookup changes nothing
        self._logins: FIFOCache[str, str] = FIFOCache(_LOGIN_CACHE)
        self._notices = notices.Unrepliable()
        self._stored: StoredTokens | None = None
        self._token_lock = asyncio.Lock()
        self._outbound: asyncio.Task[None] | None = None
        self._stopped = asyncio.Event()
        self.parse_guard = guard.install()  # twitchio's parse failures: one line, skipped
        self.conduit_store: ConduitStore = conduits or MemoryConduitStore()
        self.conduit: ConduitShards | None = None  # TWITCH_TRANSPORT=conduit
        self.broadcasters = broadcasters  # broadcaster id -> where its token pair is kept
        self.redemptions: Redemptions | None = None  # channel-point redemptions (websocket)

    @classmethod
    def from_section(cls, settings: TwitchSettings, bus: EventBus, redis: Client) -> TwitchAdapter:
        """The adapter of the settings root's Twitch section (``TWITCH_CLIENT_ID`` is set);
        ``ConfigError`` naming the first missing variable."""
        settings.require_complete()
        configure_endpoints(settings)
        client_id = (settings.client_id or "").strip()
        client = ChorusTwitchClient(
            client_id=client_id, client_secret=settings.secret("client_secret")
        )
        store = open_token_store(
            settings.token_store, tokens=PlatformTokens(redis), client_id=client_id
        )
        limiter = SharedRateLimiter(redis, platform=PLATFORM, window=SEND_WINDOW + LATENCY_MARGIN)
        conduits = RedisConduitStore(redis)

        def broadcasters(broadcaster_id: str) -> TokenStore:
            return broadcaster_store(
                settings.token_store,
                tokens=PlatformTokens(redis),
                client_id=client_id,
                broadcaster_id=broadcaster_id,
            )

        return cls(
            bus,
            settings,
            client=client,
            tokens=store,
            limiter=limiter,
            conduits=conduits,
            broadcasters=broadcasters,
        )

    @property
    def drops_total(self) -> int:
        return sum(self.dropped.values())

    # -- lifecycle ---------------------------------------------------------------------------
    async def run(self) -> None:
        await self.start()
        await self._stopped.wait()

    async def start(self) -> None:
        """Log in, load the tokens, resolve channels, subscribe and start sending."""
        client = self.client
        client.add_listener(self._on_message, event="event_message")
        client.add_listener(self._on_notification, event="event_chat_notification")
        client.add_listener(self._on_delete, event="event_message_delete")
        client.add_listener(self._on_online, event="event_stream_online")
        client.add_listener(self._on_offline, event="event_stream_offline")
        client.add_listener(self._on_clear_user, event="event_chat_clear_user")
        client.add_listener(self._on_token_refreshed, event="event_token_refreshed")
        client.add_listener(self._on_redemption, event="event_custom_redemption_add")
        try:  # an app token (client credentials) for the calls that need no user
            await api(client.login(load_tokens=False, save_tokens=False))
        except TwitchAPIError as exc:
            if exc.status >= 500:
                raise
            raise ConfigError(
                f"Twitch refused TWITCH_CLIENT_ID/TWITCH_CLIENT_SECRET ({exc}); copy both from "
                f"your application at {CONSOLE_URL}"
            ) from None
        await self._add_bot_token()
        if self.settings.transport == "conduit":
            assert self.bot is not None
            self.conduit = ConduitShards(
                client=client,
                settings=self.settings,
                store=self.conduit_store,
                bot=self.bot,
                scopes=self.scopes,
                on_channels=self._set_channels,
            )
            await self.conduit.start()
            if self.settings.redemptions:
                log.info(
                    "twitch channel-point redemptions are read over TWITCH_TRANSPORT=websocket "
                    "only; this conduit reads none (TWITCH_REDEMPTIONS=false silences this line)"
                )
        else:
            await self._resolve_channels()
            await self._subscribe()
            await self._subscribe_redemptions()
        self._outbound = asyncio.create_task(self._consume(), name="twitch-outbound")

    async def ready(self) -> bool:
        """Connected: one of the bot's EventSub websockets, as twitchio keeps them, is open,
        welcomed (it has its session) and carries the subscriptions. False while twitchio
        reconnects after a drop; True again once it is welcomed and re-subscribed."""
        if self.bot is None or self._outbound is None or self._stopped.is_set():
            return False
        if self.conduit is not None:
            return self.conduit.ready()
        sockets = self.client._websockets.get(self.bot.id) or {}
        return any(_live(socket) for socket in sockets.values())

    async def aclose(self) -> None:
        self._stopped.set()
        if self._outbound is not None:
            self._outbound.cancel()
            await asyncio.gather(self._outbound, return_exceptions=True)
            self._outbound = None
        if self.conduit is not None:
            await self.conduit.aclose()  # hands the shards back at once
        await self.client.close(save_tokens=False)
        await self.client.close_all_sockets()

    async def _add_bot_token(self) -> None:
        stored = await self.tokens.load()
        pair = choose(
            stored, self.settings.secret("access_token"), self.settings.secret("refresh_token")
        )
        add_secrets((pair.access_token, pair.refresh_token))  # the stored pair may be newer
        try:
            valid = await api(self.client.add_token(pair.access_token, pair.refresh_token))
        except TwitchAPIError as exc:
            raise ConfigError(
                f"Twitch refused the bot's tokens (HTTP {exc.status}); set new "
                f"TWITCH_ACCESS_TOKEN and TWITCH_REFRESH_TOKEN: {TOKEN_HELP}"
            ) from None
        if not valid.user_id or not valid.login:
            raise ConfigError(
                "TWITCH_ACCESS_TOKEN is an app token; it must be the bot account's user token: "
                + TOKEN_HELP
            )
        wanted = (self.settings.bot_id or "").strip()
        if wanted and wanted != valid.user_id:
            raise ConfigError(
                f"TWITCH_ACCESS_TOKEN belongs to {valid.login} (id {valid.user_id}), not to "
                f"TWITCH_BOT_ID={wanted}; authorise the bot account or fix TWITCH_BOT_ID"
            )
        self.bot = BotIdentity(id=valid.user_id, login=valid.login.lower())
        self.scopes = frozenset(valid.scopes)
        self._stored = pair if pair.user_id else pair.model_copy(update={"user_id": valid.user_id})
        await self.persist_tokens(force=stored is None or stored != self._stored)

    async def _resolve_channels(self) -> None:
        assert self.bot is not None
        self.channels = {cid: cid for cid in self.settings.channel_ids()}
        logins = self.settings.channel_logins()
        if logins:
            users = await api(self.client.fetch_users(logins=logins))
            found = {(u.name or "").lower(): u.id for u in users}
            missing = [login for login in logins if login not in found]
            if missing:
                raise ConfigError(
                    f"TWITCH_CHANNELS names {', '.join(missing)}, which Twitch does not know; "
                    "check the spelling (the login, as in twitch.tv/<login>)"
                )
            self.channels.update({found[login]: login for login in logins})
        for channel in self.channels:
            is_mod = self.settings.bot_is_mod
            self._moderator[channel] = channel == self.bot.id if is_mod is None else is_mod

    def _set_channels(self, channels: dict[str, str]) -> None:
        """The channels read now (conduit transport: they change at run time)."""
        assert self.bot is not None
        self.channels = channels
        for channel in channels:
            if channel not in self._moderator:
                is_mod = self.settings.bot_is_mod
                self._moderator[channel] = channel == self.bot.id if is_mod is None else is_mod
        log.info("twitch channels", extra={"channels": sorted(channels.values())})

    async def _subscribe(self) -> None:
        assert self.bot is not None
        bot_id = self.bot.id
        listening = 0
        for channel, name in self.channels.items():
            condition = {"broadcaster_user_id": channel, "user_id": bot_id}
            payloads: list[Any] = [
                ChatMessageSubscription(**condition),
                ChatMessageDeleteSubscription(**condition),
                ChatClearUserMessagesSubscription(**condition),
                ChatNotificationSubscription(**condition),  # subs, raids...: same grant
            ]
            if self.settings.stream_state:  # for plugins: on_stream_online / on_stream_offline
                state = {"broadcaster_user_id": channel}
                payloads += [StreamOnlineSubscription(**state), StreamOfflineSubscription(**state)]
            for payload in payloads:
                try:
                    await api(self.client.subscribe_websocket(payload, token_for=bot_id))
                except TwitchAPIError as exc:
                    log.error(
                        "twitch subscription refused; the bot needs user:read:chat and the "
                        "channel's channel:bot grant or moderator status",
                        extra={"channel": name, "type": payload.type, "status": exc.status},
                        exc_info=True,
                    )
                    continue
                listening += payload.type == ChatMessageSubscription.type
        if not listening:
            raise ConfigError(
                "Twitch refused every channel.chat.message subscription; give the bot token the "
                "user:read:chat scope and check TWITCH_CHANNELS"
            )
        log.info(
            "twitch connected",
            extra={"bot": self.bot.login, "channels": sorted(self.channels.values())},
        )

    async def _subscribe_redemptions(self) -> None:
        """Channel-point redemptions where the broadcaster authorised them (``redemptions``)."""
        if not self.settings.redemptions or self.broadcasters is None:
            return
        assert self.bot is not None
        self.redemptions = Redemptions(
            self.client, self.broadcasters, bot_id=self.bot.id, bot_scopes=self.scopes
        )
        await self.redemptions.start(self.channels)

    # -- inbound -----------------------------------------------------------------------------
    async def _on_message(self, event: twitchio.ChatMessage) -> None:
        bot = self.bot
        if bot is None:
            return
        try:
            if convert.is_own(event, bot):
                self._learn_moderation(event)
                return
            self._remember_login(event.chatter.id, event.chatter.name)
            message = convert.chat_message(event, bot=bot, ambient=self.settings.ambient)
            if message is not None:
                await self.bus.publish(INBOUND, message)
        except ValueError as exc:  # convert.Malformed, or the event model refusing a value
            _skipped("message", exc)
        except Exception:
            log.exception("twitch message dropped", extra={"message_id": str(event.id)})

    async def _on_notification(self, event: twitchio.ChatNotification) -> None:
        if self.bot is None:
            return
        try:
            self._remember_login(event.chatter.id, event.chatter.name)
            message = notices.chat_message(event, bot=self.bot, ambient=self.settings.ambient)
            if message is not None:
                self._notices.add(message.id)  # an answer to it cannot be threaded to it
                await self.bus.publish(INBOUND, message)
        except ValueError as exc:
            _skipped("notice", exc)
        except Exception:
            log.exception("twitch notice dropped", extra={"message_id": str(event.id)})

    async def _on_redemption(self, event: twitchio.ChannelPointsRedemptionAdd) -> None:
        """A viewer redeemed a channel-point reward: a line carrying a ``REDEMPTION`` event."""
        if self.bot is None:
            return
        try:
            self._remember_login(event.user.id, event.user.name)
            message = convert.redemption(event, bot=self.bot, ambient=self.settings.ambient)
            self._notices.add(message.id)  # not a chat message: an answer cannot thread to it
            await self.bus.publish(INBOUND, message)
        except ValueError as exc:
            _skipped("redemption", exc)
        except Exception:
            log.exception("twitch redemption dropped", extra={"redemption_id": str(event.id)})

    async def _on_online(self, event: twitchio.StreamOnline) -> None:
        await self._on_stream_state(event, online=True)

    async def _on_offline(self, event: twitchio.StreamOffline) -> None:
        await self._on_stream_state(event, online=False)

    async def _on_stream_state(
        self, event: twitchio.StreamOnline | twitchio.StreamOffline, *, online: bool
    ) -> None:
        """The channel went live or its stream ended: a message for the plugins' handlers."""
        try:
            await self.bus.publish(INBOUND, convert.stream_state(event, online=online))
        except ValueError as exc:
            _skipped("stream state", exc)

    async def _on_delete(self, event: twitchio.ChatMessageDelete) -> None:
        try:
            await self.bus.publish(DELETIONS, convert.message_deleted(event))
        except ValueError as exc:
            _skipped("deletion", exc)
        except Exception:
            log.exception("twitch deletion dropped", extra={"message_id": str(event.message_id)})

    async def _on_clear_user(self, event: twitchio.ChannelChatClearUserMessages) -> None:
        try:
            await self.bus.publish(DELETIONS, convert.user_cleared(event))
        except ValueError as exc:
            _skipped("clear-user", exc)
        except Exception:
            log.exception("twitch clear-user dropped", extra={"user_id": str(event.user.id)})

    async def _on_token_refreshed(self, payload: Any) -> None:
        await self.persist_tokens()
        if self.redemptions is not None:
            await self.redemptions.persist(payload)

    def _learn_moderation(self, event: twitchio.ChatMessage) -> None:
        if self.settings.bot_is_mod is not None:
            return
        channel = event.broadcaster.id
        is_mod = convert.is_moderator_badge(event)
        if self._moderator.get(channel) != is_mod:
            log.info("twitch send limit changed", extra={"channel": channel, "moderator": is_mod})
            self._moderator[channel] = is_mod

    def _remember_login(self, user_id: object, login: object) -> None:
        if not (isinstance(user_id, str) and isinstance(login, str) and login):
            return
        self._logins[user_id] = login

    async def persist_tokens(self, *, force: bool = False) -> None:
        """Store the bot's current pair if twitchio refreshed it (or when ``force``)."""
        if self.bot is None or self._stored is None:
            return
        async with self._token_lock:
            current = self.client.tokens.get(self.bot.id)
            pair = self._stored
            if current is not None and current["token"] != pair.access_token:
                pair = pair.model_copy(
                    update={"access_token": current["token"], "refresh_token": current["refresh"]}
                )
                add_secrets((pair.access_token, pair.refresh_token))  # before anything logs them
            elif not force:
                return
            try:
                await self.tokens.save(pair)
            except Exception:
                log.exception("storing the refreshed twitch tokens failed")
                return
            self._stored = pair
            log.info("twitch tokens stored", extra={"user_id": self.bot.id})

    # -- outbound ----------------------------------------------------------------------------
    async def _consume(self) -> None:
        topic = outbound_topic(PLATFORM)
        async for delivery in self.bus.consume(topic, Reply, group="outbound", consumer="twitch"):
            reply = delivery.event
            try:
                await self.deliver(reply)
            except Exception:
                self.failed += 1
                log.exception(
                    "twitch reply not sent",
                    extra={"channel": reply.conversation.channel, "reply_to_id": reply.reply_to_id},
                )
            await delivery.ack()

    async def deliver(self, reply: Reply) -> list[str]:
        """Send ``reply`` (at most ``max_pieces`` messages); returns the sent message ids."""
        reply = self._notices.unthread(reply, self._logins)
        pieces = convert.reply_to_sends(
            reply, logins=self._logins, max_pieces=self.settings.max_pieces
        )
        sent = []
        for args in pieces:
            message_id = await self.send(args)
            if message_id is None:
                break  # a dropped first half makes the second half meaningless
            sent.append(message_id)
        return sent

    def budget(self, channel: str) -> tuple[str, int]:
        """The limiter bucket and limit for sending in ``channel``."""
        assert self.bot is not None
        if self._moderator.get(channel, False):
            return f"{self.bot.id}:{channel}", MODERATOR_LIMIT
        return self.bot.id, USER_LIMIT

    async def send(self, args: SendArgs) -> str | None:
        """The chokepoint: rate limit, retries, drop handling. Message id, or None if dropped."""
        bot = self.bot
        assert bot is not None
        attempts = 0
        bucket = ""

        async def attempt() -> str | None:
            nonlocal attempts, bucket
            attempts += 1
            bucket, limit = self.budget(args.broadcaster_id)
            await self.limiter.acquire(bucket, limit)
            try:
                answer = await api(
                    self.client.http.post_chat_message(
                        broadcaster_id=args.broadcaster_id,
                        sender_id=bot.id,
                        message=args.message,
                        reply_to_message_id=args.reply_parent_message_id,
                        token_for=bot.id,
                    )
                )
            finally:
                await self.persist_tokens()
            result = answer["data"][0]
            if result.get("is_sent"):
                self.sent += 1
                return str(result["message_id"])
            drop = result.get("drop_reason") or {}
            code = str(drop.get("code") or "unknown")
            self.dropped[code] += 1
            log.warning(
                "twitch dropped a chat message",
                extra={
                    "channel": args.broadcaster_id,
                    "drop_code": code,
                    "drop_message": drop.get("message", ""),
                    "attempt": attempts,
                },
            )
            if code == "msg_ratelimit":
                raise _RateLimitDrop  # the whole bucket pauses, then the message is retried
            return None

        async def pause(delay: float) -> None:
            await self.limiter.pause(bucket, delay)  # every process sending from this bucket

        try:
            return await retry(
                attempt,
                _classify_send,
                self.retry,
                what="twitch send",
                sleep=pause,
                logger=log,
                message="twitch send failed; retrying",
                extra={"channel": args.broadcaster_id},
            )
        except _RateLimitDrop:
            return None
