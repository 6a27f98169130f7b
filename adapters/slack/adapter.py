"""The Slack adapter: bolt in (Socket Mode or the HTTP Events API), the sender chokepoint out.

Inbound, bolt verifies the request signature (HTTP), answers ``url_verification`` and
``ssl_check``, drops the bot's own events and authorises from the ``auth.test`` done at start.
Then our middleware drops Slack's retries of an ``event_id`` already seen; what no listener
takes (another event type, ``app_rate_limited``) is acknowledged and counted (``unhandled``);
the listeners acknowledge at once and hand the work (user lookup, image download, publish) to a task the
adapter keeps a reference to. Slack wants the ack within 3 seconds; nothing on the ack path
waits for I/O. bolt runs with ``process_before_response=True`` so the ack is sent after the
listener *returned* (it only spawns a task), instead of bolt's default of an untracked
``ensure_future`` plus a 10 ms polling loop for the ack. Those tasks (``intake``) publish a
channel's events in the order Slack delivered them, and ``aclose`` stops the intake first, then
lets them finish: an event Slack got its ack for is not dropped at shutdown.

Outbound, replies are consumed from ``outbound:slack`` and sent in per-channel lanes (order is
kept within a channel; a rate-limited channel does not hold up the others) through
``SlackSender``, which owns every wait and retry. A slash command's answer goes to its
``response_url`` as an ephemeral message; everything else is posted in the conversation's thread.
``ready()`` (``/readyz``'s ``adapter:slack``) is the socket's state as slack-sdk keeps it, or
whether the HTTP endpoint listens.

Installed in many workspaces (``SLACK_CLIENT_ID``...), bolt runs its OAuth flow
(``/slack/install``, ``/slack/oauth_redirect``) over ``workspaces``' store, authorises each request
from the installation store instead of one ``auth.test``, and the bot's identity (its user id
in that workspace) comes with each request; every outbound call takes the sender of the
channel's workspace from ``workspaces``. ``app_uninstalled`` and ``tokens_revoked`` go through
bolt's own listeners (the tokens are deleted) and, for an uninstall, schedule the deletion of
the workspace's data, which a housekeeping loop carries out when its grace period is over.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web
from cachetools import TTLCache
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.authorization.async_authorize import AsyncAuthorize
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.response import BoltResponse
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.convert import (
    PLATFORM,
    BotIdentity,
    ChannelPolicy,
    author_from_user,
    command_message,
    command_response,
    deletions_from_event,
    message_from_event,
    reply_to_posts,
    thread_root,
)
from adapters.slack.drafts import NativeStreams, SlackLive
from adapters.slack.installations import install_key
from adapters.slack.intake import Before, Intake, after
from adapters.slack.moderation import SlackModeration
from adapters.slack.sender import SlackSender, SlackSendError, file_hosts, host_allowed
from adapters.slack.state import SeenSet
from adapters.slack.transport import AUTH_ERRORS, connect_socket, serve_http
from adapters.slack.unhandled import Unhandled
from adapters.slack.workspaces import Workspaces
from bot.bus.base import Delivery, EventBus
from bot.bus.topics import DELETIONS, INBOUND, outbound_topic
from bot.events import Attachment, AttachmentKind, Author, Outbound, Reply, ReplyDraft
from bot.platform.streaming import AnswerStore, LiveAnswers
from bot.settings import ConfigError, SlackSettings
from bot.settings.slack import APPS_URL, SlackMode
from bot.state.connect import Client

log = logging.getLogger("chorus.slack")

MAX_IN_FLIGHT_REPLIES = 256
DRAFT_INTERVAL = 1.0  # seconds between the updates of a streamed answer, at least


class _StaticAuthorize(AsyncAuthorize):
    """One workspace, authorised once at start from ``auth.test`` (bolt would call it again)."""

    def __init__(self, result: AuthorizeResult) -> None:
        self.result = result

    async def __call__(self, **_: Any) -> AuthorizeResult:
        return self.result


def build_client(settings: SlackSettings) -> AsyncWebClient:
    """The bot's Web API client. No SDK retry handlers: ``SlackSender`` owns every retry."""
    return AsyncWebClient(
        token=settings.bot_token_value(), base_url=settings.api_base_url, retry_handlers=[]
    )


class SlackAdapter:
    """``PlatformAdapter`` for Slack; see the module docstring for the flow."""

    platform = PLATFORM

    def __init__(
        self,
        bus: EventBus,
        settings: SlackSettings,
        *,
        client: AsyncWebClient | None = None,
        sender: SlackSender | None = None,
        socket_ping_interval: float = 10.0,
        live_store: AnswerStore | None = None,
        redis: Client | None = None,
    ) -> None:
        self.bus = bus
        self.settings = settings
        self.client = client or build_client(settings)
        self.sender = sender or SlackSender(self.client)
        self.workspaces: Workspaces | None = None
        if settings.multi_workspace:
            if redis is None:
                raise ValueError("many Slack workspaces need the state store")
            self.workspaces = Workspaces.from_settings(settings, redis)
        sender_for = self.workspaces.sender_for_channel if self.workspaces else None
        self.moderation = SlackModeration(self.sender, sender_for)  # the bot's own messages only
        self.channels = ChannelPolicy(
            ambient=settings.ambient_channels, always_answer=settings.always_answer_channels
        )
        self.identity: BotIdentity | None = None
        self.http_url: str | None = None
        self.socket_ping_interval = socket_ping_interval
        self._file_hosts = file_hosts(settings.api_base_url)
        self._events = SeenSet(ttl=3 * 3600, maxsize=50_000)  # Slack retries for about an hour
        self._threads = SeenSet(ttl=7 * 24 * 3600, maxsize=20_000)
        self._users: TTLCache[str, Author] = TTLCache(maxsize=10_000, ttl=3600)
        self._commands: TTLCache[str, tuple[str, str]] = TTLCache(maxsize=10_000, ttl=30 * 60)
        self._intake = Intake()
        self.unhandled = Unhandled()  # what no listener takes, acknowledged and counted
        self._lanes: dict[str, deque[tuple[Delivery[Outbound], Reply]]] = {}
        self._native = NativeStreams(enabled=settings.native_streaming)
        self.live = LiveAnswers(self._live_view, interval=DRAFT_INTERVAL, store=live_store)
        self._lane_tasks: dict[str, asyncio.Task[None]] = {}
        self._capacity: asyncio.Semaphore | None = None
        self._outbound: asyncio.Task[None] | None = None
        self._socket: AsyncSocketModeHandler | None = None
        self._runner: web.AppRunner | None = None
        self._purger: asyncio.Task[None] | None = None
        self.app: AsyncApp | None = None

    @classmethod
    def from_section(
        cls,
        settings: SlackSettings,
        bus: EventBus,
        redis: Client,
        *,
        live_store: AnswerStore | None = None,
    ) -> SlackAdapter:
        """The adapter of the settings root's Slack section; ``ConfigError`` if incomplete."""
        settings.check()
        return cls(bus, settings, live_store=live_store, redis=redis)

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Check the tokens, start listening (socket or HTTP) and sending; then return."""
        if self._outbound is not None:
            raise RuntimeError("the Slack adapter is already started")
        result = None if self.workspaces else await self._authenticate()
        self.app = self._build_app(result)
        if self.settings.mode is SlackMode.SOCKET:
            self._socket = await connect_socket(
                self.app,
                self.sender,
                self.settings.app_token_value(),
                ping_interval=self.socket_ping_interval,
            )
        else:
            self._runner, self.http_url = await serve_http(
                self.app,
                self.settings.http_host,
                self.settings.http_port,
                self.settings.signing_secret_value(),
            )
        self._capacity = asyncio.Semaphore(MAX_IN_FLIGHT_REPLIES)
        self._outbound = asyncio.create_task(self._send_loop(), name="slack-outbound")
        if self.workspaces is not None:
            self._purger = asyncio.create_task(self.workspaces.purge_forever(), name="slack-purge")

    async def run(self) -> None:
        """Start, then send replies until the bus closes or ``aclose`` is called."""
        await self.start()
        assert self._outbound is not None
        await asyncio.wait({self._outbound})

    async def ready(self) -> bool:
        """Connected: the Socket Mode websocket is up as slack-sdk sees it (open, not stale,
        pings answered; the SDK reconnects by itself and this follows), or in HTTP mode the
        events endpoint is listening. No request is made."""
        if self._outbound is None or self._outbound.done():
            return False
        if self._socket is not None:
            return bool(await self._socket.client.is_connected())
        return self._runner is not None and bool(self._runner.addresses)

    async def idle(self) -> None:
        """Wait until every inbound event received so far is converted and published."""
        await self._intake.idle()

    async def aclose(self) -> None:
        if self._socket is not None:
            await self._socket.close_async()  # type: ignore[no-untyped-call]
            self._socket = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self._intake.close()  # acknowledged to Slack: let them reach the bus first
        tasks = list(self._lane_tasks.values())
        if self._outbound is not None:
            tasks.append(self._outbound)
        if self._purger is not None:
            tasks.append(self._purger)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.live.aclose()
        await self.sender.aclose()
        if self.workspaces is not None:
            await self.workspaces.aclose()

    async def _authenticate(self) -> AuthorizeResult:
        try:
            response = await self.sender.request(self.client.auth_test, what="auth.test")
        except SlackSendError as exc:
            if exc.error in AUTH_ERRORS:
                raise ConfigError(
                    f"SLACK_BOT_TOKEN was rejected by Slack ({exc.error}); copy the Bot User "
                    f"OAuth Token (xoxb-...) from OAuth & Permissions of your app at {APPS_URL} "
                    "(reinstall the app to the workspace if the token was revoked)"
                ) from None
            raise
        self.identity = BotIdentity(
            user_id=str(response["user_id"]),
            bot_id=response.get("bot_id"),
            team_id=response.get("team_id"),
        )
        log.info(
            "connected to slack",
            extra={"team": response.get("team"), "bot_user_id": self.identity.user_id},
        )
        return AuthorizeResult(
            enterprise_id=response.get("enterprise_id"),
            team_id=self.identity.team_id,
            team=response.get("team"),
            url=response.get("url"),
            bot_user_id=self.identity.user_id,
            bot_id=self.identity.bot_id,
            bot_token=self.settings.bot_token_value(),
        )

    def _build_app(self, result: AuthorizeResult | None) -> AsyncApp:
        http = self.settings.mode is SlackMode.HTTP
        # bolt's per-request clients are never used to send; ours is the chokepoint. In many
        # workspaces bolt's client makes the OAuth flow's oauth.v2.access call.
        client = AsyncWebClient(base_url=self.settings.api_base_url, retry_handlers=[])
        if result is not None:
            access: dict[str, Any] = {"authorize": _StaticAuthorize(result)}
        else:
            assert self.workspaces is not None
            access = {
                "oauth_settings": self.workspaces.oauth_settings(),
                "installation_store": self.workspaces.installations,
                "authorize": self.workspaces.authorize(client),
            }
        app = AsyncApp(
            # bolt sets the logger named after its app from its base logger on every request:
            # a name outside Chorus's logger tree ("chorus" reset Chorus's own level).
            name="slack-bolt-app",
            logger=logging.getLogger("chorus.slack.bolt"),
            client=client,
            signing_secret=self.settings.signing_secret_value(),
            request_verification_enabled=http,
            process_before_response=True,
            raise_error_for_unhandled_request=True,  # to ``unhandled``, not bolt's 404
            **access,
        )
        app.error(self.unhandled.on_error)
        app.middleware(self._dedupe)
        if self.workspaces is not None:
            self.workspaces.listen(app)  # app_uninstalled, tokens_revoked
        app.event("app_mention")(self._on_event)
        app.event("message")(self._on_event)
        app.command("/chorus")(self._on_command)
        return app

    # -- inbound -----------------------------------------------------------------------------
    async def _dedupe(
        self, body: dict[str, Any], next_: Callable[[], Awaitable[BoltResponse]]
    ) -> BoltResponse:
        """Slack retries unacknowledged events with the same ``event_id``: handle each once."""
        event_id = body.get("event_id")
        if isinstance(event_id, str) and not self._events.first(event_id):
            log.info("duplicate slack event dropped", extra={"event_id": event_id})
            return BoltResponse(status=200, body="")
        return await next_()

    def _identity(self, context: AsyncBoltContext) -> BotIdentity:
        """The bot in the request's workspace (one workspace: the one ``auth.test`` named)."""
        if self.identity is not None and self.workspaces is None:
            return self.identity
        try:  # the installation bolt authorised the request with (org-wide: the org's)
            install: str | None = install_key(
                context.team_id, context.enterprise_id, context.is_enterprise_install
            )
        except ValueError:
            install = None
        return BotIdentity(
            user_id=str(context.bot_user_id),
            bot_id=context.bot_id,
            team_id=context.team_id,
            install=install,
        )

    async def _sender_of(self, bot: BotIdentity) -> SlackSender:
        if self.workspaces is None or bot.install is None:
            return self.sender
        return await self.workspaces.sender_for_team(bot.install)

    async def _on_event(self, event: dict[str, Any], context: AsyncBoltContext) -> None:
        channel = str(event.get("channel"))
        bot = self._identity(context)
        self._intake.spawn(
            lambda before: self._ingest(event, before, bot),
            channel,
            f"slack-event-{str(event.get('ts'))[:40]}",
        )

    async def _on_command(
        self, ack: AsyncAck, command: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        await ack()
        bot = self._identity(context)
        self._intake.spawn(
            lambda before: self._ingest_command(command, before, bot),
            str(command.get("channel_id")),
            f"slack-command-{command.get('trigger_id')}",
        )

    async def _ingest(self, event: Mapping[str, Any], before: Before, bot: BotIdentity) -> None:
        try:
            deletions = deletions_from_event(event, channels=self.channels)
            if deletions:
                await after(before)
            for deletion in deletions:
                await self.bus.publish(DELETIONS, deletion)
            if deletions:
                return
            channel, root = event.get("channel"), thread_root(event)
            message = message_from_event(
                event,
                bot=bot,
                channels=self.channels,
                in_bot_thread=root is not None and f"{channel}:{root}" in self._threads,
            )
            if message is None:
                return
            conv = message.conversation
            if message.mentions_bot and not message.is_direct and conv.thread:
                self._threads.add(f"{conv.channel}:{conv.thread}")
            message = message.model_copy(
                update={
                    "author": await self._author(message.author.id, bot),
                    "attachments": await self._download(message.attachments, bot),
                }
            )
            if self.workspaces is not None and bot.install:
                team = message.server or bot.team_id
                await self.workspaces.learn(bot.install, conv, message.author.id, team=team)
            await after(before)
            await self.bus.publish(INBOUND, message)
        except ValueError as exc:  # the event model refusing a value Slack does not send
            log.warning(
                "slack event skipped: a field is not usable",
                extra={"error": str(exc).splitlines()[0][:200]},
            )
        except Exception:
            log.exception(
                "could not handle a slack event",
                extra={"channel": str(event.get("channel")), "ts": str(event.get("ts"))},
            )

    async def _ingest_command(
        self, command: Mapping[str, Any], before: Before, bot: BotIdentity
    ) -> None:
        try:
            author = await self._author(str(command["user_id"]), bot)
            message = command_message(command, author=author)
            if self.workspaces is not None and bot.install:
                team = str(command.get("team_id") or "") or bot.team_id
                await self.workspaces.learn(bot.install, message.conversation, author.id, team=team)
            response_url = str(command["response_url"])
            self._commands[message.id] = (response_url, message.conversation.channel)
            await after(before)
            await self.bus.publish(INBOUND, message)
        except Exception:
            log.exception(
                "could not handle a slash command", extra={"trigger_id": command.get("trigger_id")}
            )

    async def _author(self, user_id: str, bot: BotIdentity) -> Author:
        cached = self._users.get(user_id)  # user ids are unique across workspaces
        if cached is not None:
            return cached
        try:
            sender = await self._sender_of(bot)  # only now: a store read in many workspaces
            author = author_from_user(user_id, await sender.user_info(user_id))
        except Exception:
            log.warning(
                "users.info failed; using the bare user id (is users:read granted?)",
                extra={"user_id": user_id},
                exc_info=True,
            )
            author = Author(id=user_id)
        self._users[user_id] = author
        return author

    async def _download(
        self, attachments: tuple[Attachment, ...], bot: BotIdentity
    ) -> tuple[Attachment, ...]:
        """Images' bytes for the model, with the bot token, only from Slack's own hosts."""
        cap = self.settings.max_file_bytes
        out = []
        for item in attachments:
            wanted = (
                item.kind is AttachmentKind.IMAGE
                and item.url is not None
                and (item.size is None or item.size <= cap)
                and host_allowed(item.url, self._file_hosts)
            )
            if wanted and item.url is not None:
                try:
                    sender = await self._sender_of(bot)
                    token = str(sender.client.token or "")
                    data, ctype = await sender.download(item.url, token=token, cap=cap)
                except Exception:
                    log.warning(
                        "could not download a slack image",
                        extra={"file": item.filename, "size": item.size},
                        exc_info=True,
                    )
                else:
                    item = item.model_copy(update={"data": data, "mime": item.mime or ctype})
            out.append(item)
        return tuple(out)

    # -- outbound ----------------------------------------------------------------------------
    async def _send_loop(self) -> None:
        assert self._capacity is not None
        async for delivery in self.bus.consume(
            outbound_topic(PLATFORM), Outbound, group="outbound"
        ):
            event = delivery.event.root
            if isinstance(event, ReplyDraft):  # in bus order, before the answer's Reply
                self.live.draft(event)
                await delivery.ack()
                continue
            await self._capacity.acquire()  # bounds what is pulled off the bus but not yet sent
            channel = event.conversation.channel
            self._lanes.setdefault(channel, deque()).append((delivery, event))
            if channel not in self._lane_tasks:
                self._lane_tasks[channel] = asyncio.create_task(
                    self._drain_lane(channel), name=f"slack-lane-{channel}"
                )

    async def _drain_lane(self, channel: str) -> None:
        lane = self._lanes[channel]
        try:
            while lane:
                await self._deliver(*lane.popleft())
        finally:
            self._lane_tasks.pop(channel, None)
            if not lane:
                self._lanes.pop(channel, None)

    def _live_view(self, draft: ReplyDraft) -> SlackLive | None:
        """The view of a streamed answer; None for slash commands (answered privately)."""
        if self._commands.get(draft.reply_to_id) is not None:
            return None
        team, threads = (self.identity.team_id if self.identity else None), self._threads
        sender = self.sender
        if self.workspaces is not None:  # the workspace's sender, if this process holds it
            known = self.workspaces.cached_sender(draft.conversation.channel)
            if known is None:
                return None  # the final answer is posted whole instead
            sender, team = known
        on_posted = lambda channel, ts: threads.add(f"{channel}:{ts}")  # noqa: E731
        return SlackLive(sender, draft, native=self._native, team_id=team, on_posted=on_posted)

    async def _deliver(self, delivery: Delivery[Outbound], reply: Reply) -> None:
        assert self._capacity is not None
        try:
            await self._send(reply)
        except asyncio.CancelledError:
            raise  # not acked: a durable bus delivers it again after a restart
        except Exception:
            log.error(
                "could not send a slack reply; dropped",
                extra={"reply_to_id": reply.reply_to_id, "channel": reply.conversation.channel},
                exc_info=True,
            )
            await delivery.ack()
        else:
            await delivery.ack()
        finally:
            self._capacity.release()

    async def _send(self, reply: Reply) -> None:
        command = self._commands.get(reply.reply_to_id) if reply.reply_to_id else None
        if command is not None:
            response_url, channel = command
            for body in command_response(reply):
                await self.sender.respond(response_url, body, channel=channel)
            return
        if await self.live.finish(reply):
            return  # the streamed message(s) now show the final answer
        posts = reply_to_posts(reply)
        if not posts:
            log.warning("empty slack reply not sent", extra={"reply_to_id": reply.reply_to_id})
        sender = self.sender
        if self.workspaces is not None and posts:
            sender = await self.workspaces.sender_for_channel(reply.conversation.channel)
        for post in posts:
            await sender.post_message(post)
            if post.thread_ts:
                self._threads.add(f"{post.channel}:{post.thread_ts}")
