"""The Discord adapter: discord.py's gateway client in, ``Reply`` events out.

discord.py owns the connection: IDENTIFY, heartbeats, RESUME on a drop and reconnect with
backoff (``connect(reconnect=True)``), and the REST rate limits. This module only wires it to
the bus: messages the bot should see become ``ChatMessage`` on ``inbound`` (``convert.py``
decides which), deletions become ``MessageDeleted`` on ``deletions``, ``/chorus`` slash
commands become text commands answered ephemerally, and each ``Reply`` on
``outbound:discord`` is sent through the one chokepoint (``sender.py``). ``ready()`` (the
``adapter:discord`` check of ``/readyz``) reads discord.py's own state of the gateway session.
Moderation actions (delete, timeout, ban) are ``moderation.DiscordModeration``, on
``self.moderation``.

Without the privileged Message Content intent Discord sends empty ``content`` for guild
messages that do not mention the bot, so only mentions, replies to the bot and DMs carry text;
the adapter says so once at start. Discord cannot be asked whether the intent is granted before
connecting; asking for it without the grant closes the gateway with code 4014, which becomes
one clear error naming ``DISCORD_MESSAGE_CONTENT_INTENT`` and the Developer Portal toggle.

discord.py reads its endpoints from class attributes only (``discord.http.Route.BASE`` and
``discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY``, a ``yarl.URL``); ``run`` sets them from
``DISCORD_API_BASE_URL`` / ``DISCORD_GATEWAY_URL`` just before connecting and ``aclose``
restores them. After READY it reconnects to READY's ``resume_gateway_url``.

The client is discord.py's ``AutoShardedClient``: after login ``GET /gateway/bot`` gives the
recommended shard count and ``max_concurrency``, ``shards.plan`` picks this process's shards
(``DISCORD_SHARD_IDS``, ``DISCORD_SHARD_COUNT``), and every IDENTIFY first takes its bucket
through ``shards.IdentifyPacer`` (shared by the gateway processes through the state store).
discord.py reconnects each shard on its own; each shard's session is in ``self.shards``
(readiness, metrics) and ``restart_part`` reconnects one shard alone, for the supervisor.
When another gateway process reads the answer to a slash command received here, it forwards
it to this process, which answers the interaction (``routed.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import discord
import yarl
from discord import app_commands
from discord.gateway import DiscordWebSocket
from discord.http import Route
from pydantic import BaseModel

import prompts
from adapters.discord import convert, members
from adapters.discord.drafts import DiscordLive, adopt
from adapters.discord.moderation import DiscordModeration
from adapters.discord.routed import RoutedAnswers
from adapters.discord.sender import DiscordSender, TypingIndicators
from adapters.discord.shards import IdentifyPacer, LocalBuckets, ShardedParts, ShardStates
from adapters.discord.slash import build_group, build_native
from bot.bus.base import BusClosed, Delivery, EventBus
from bot.bus.topics import DELETIONS, INBOUND, outbound_topic
from bot.events import Outbound, Reply, ReplyDraft
from bot.platform.commands import NativeCommand
from bot.platform.streaming import AnswerStore, LiveAnswers
from bot.resilience import Sleep
from bot.settings import ConfigError, DiscordSettings
from bot.settings.discord import PORTAL_URL
from bot.state.client import Redis

log = logging.getLogger("chorus.discord")

PLATFORM = convert.PLATFORM
MAX_CONCURRENT_SENDS = 32
DRAFT_INTERVAL = 1.0  # seconds between the edits of a streamed answer, at least

BAD_TOKEN = (
    "Discord rejected DISCORD_TOKEN (401 Unauthorized). Copy the bot token from the Discord "
    f"Developer Portal ({PORTAL_URL} -> your application -> Bot -> Reset Token) into "
    "DISCORD_TOKEN (the token only, without a 'Bot ' prefix)."
)
INTENT_REFUSED = (
    "Discord closed the gateway with 4014 (disallowed intents): DISCORD_MESSAGE_CONTENT_INTENT=true "
    "asks for the privileged Message Content intent, which this bot has not been granted. Turn on "
    f"'Message Content Intent' in the Developer Portal ({PORTAL_URL} -> your application -> Bot "
    "-> Privileged Gateway Intents), or unset DISCORD_MESSAGE_CONTENT_INTENT."
)
NO_CONTENT_INTENT = (
    "DISCORD_MESSAGE_CONTENT_INTENT is off: Discord sends the text of DMs, mentions of the bot "
    "and replies to it, but not of other channel messages, so ambient and always-answer "
    "channels see empty messages. Enable the Message Content intent in the Developer Portal and "
    "set DISCORD_MESSAGE_CONTENT_INTENT=true to read them."
)


def no_answer_in_time() -> str:
    """The private answer to a slash command whose reply did not come in time."""
    return prompts.render("discord/no_answer_in_time")


class ParserGuard:
    """discord.py parses each gateway event inside its read loop, so one payload it cannot parse
    (a MESSAGE_CREATE without an author, a MESSAGE_DELETE whose id is null) raises out of that
    loop and ends the client. Each parser is wrapped: such a payload is counted, logged at most
    once a minute per event type (its content never: it is user data) and skipped, and the
    connection stays up."""

    LOG_EVERY = 60.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.skipped: dict[str, int] = {}
        self._logged: dict[str, float] = {}
        self._clock = clock

    def wrap(self, parsers: dict[str, Callable[[Any], None]]) -> None:
        for event, parse in list(parsers.items()):
            parsers[event] = self._guarded(event, parse)

    def _guarded(self, event: str, parse: Callable[[Any], None]) -> Callable[[Any], None]:
        def guarded(data: Any) -> None:
            try:
                parse(data)
            except Exception as exc:
                self.skipped[event] = self.skipped.get(event, 0) + 1
                now = self._clock()
                if now - self._logged.get(event, -self.LOG_EVERY) >= self.LOG_EVERY:
                    self._logged[event] = now
                    log.warning(
                        "discord payload skipped: discord.py could not parse it",
                        extra={
                            "event": event,
                            "error": type(exc).__name__,
                            "skipped": self.skipped[event],
                        },
                    )

        return guarded


def _skipped(what: str, error: ValueError, ref: object) -> None:
    """One line for a payload discord.py parsed but whose values Chorus cannot use."""
    log.warning(
        f"discord {what} skipped: a value is not usable",
        extra={"ref": str(ref)[:40], "error": str(error).splitlines()[0][:200]},
    )


class _ChorusClient(discord.AutoShardedClient):
    """discord.py's client with its events routed to the adapter (no name-based magic)."""

    def __init__(self, adapter: DiscordAdapter, **options: Any) -> None:
        super().__init__(**options)
        self._adapter = adapter
        self.tree: app_commands.CommandTree[_ChorusClient] = app_commands.CommandTree(self)
        adapter.parser_guard.wrap(self._connection.parsers)

    async def setup_hook(self) -> None:
        await self._adapter._setup()

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        await self._adapter.pacer.before_identify(shard_id)

    async def on_shard_connect(self, shard_id: int) -> None:  # READY parsed
        self._adapter.shards.connected(shard_id)

    async def on_shard_resumed(self, shard_id: int) -> None:
        self._adapter.shards.resumed(shard_id)

    async def on_shard_disconnect(self, shard_id: int) -> None:
        self._adapter.shards.disconnected(shard_id)

    async def on_message(self, message: discord.Message) -> None:
        await self._adapter._on_message(message)

    async def on_raw_reaction_add(self, payload: discord.RawReactionActionEvent) -> None:
        await self._adapter._on_reaction(payload, added=True)

    async def on_raw_reaction_remove(self, payload: discord.RawReactionActionEvent) -> None:
        await self._adapter._on_reaction(payload, added=False)

    async def on_member_join(self, member: discord.Member) -> None:
        await self._adapter._on_member(member, joined=True)

    async def on_member_remove(self, member: discord.Member) -> None:
        await self._adapter._on_member(member, joined=False)

    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        await self._adapter._on_deleted(payload.channel_id, payload.guild_id, [payload.message_id])

    async def on_raw_bulk_message_delete(self, payload: discord.RawBulkMessageDeleteEvent) -> None:
        await self._adapter._on_deleted(payload.channel_id, payload.guild_id, payload.message_ids)


class DiscordAdapter(ShardedParts, RoutedAnswers):
    """``PlatformAdapter`` for Discord. ``run`` until ``aclose``."""

    platform = PLATFORM
    client: _ChorusClient

    def __init__(
        self,
        bus: EventBus,
        settings: DiscordSettings,
        *,
        sender: DiscordSender | None = None,
        sleep: Sleep = asyncio.sleep,
        client_options: Mapping[str, Any] | None = None,
        commands: Sequence[NativeCommand] = (),
        live_store: AnswerStore | None = None,
        identify_store: Redis | None = None,
    ) -> None:
        if not settings.token_value():
            raise ConfigError(f"DISCORD_TOKEN is not set; get it at {PORTAL_URL} -> Bot")
        self.bus = bus
        self.settings = settings
        self.commands = tuple(commands)  # the plugins' commands, registered as /name
        self.sender = sender or DiscordSender(sleep=sleep)
        intents = discord.Intents.default()
        intents.message_content = settings.message_content_intent
        intents.members = settings.members_intent  # joins and leaves, for plugins
        options: dict[str, Any] = {
            "intents": intents,
            "allowed_mentions": discord.AllowedMentions.none(),
            "max_ratelimit_timeout": 30.0,  # longer waits surface as RateLimited to the sender
            "http_trace": self.sender.trace_config(),
            "chunk_guilds_at_startup": False,
        }
        options.update(client_options or {})
        self.parser_guard = ParserGuard()
        self.shards = ShardStates()  # each shard's session, as discord.py reports it
        self._identify_store = identify_store
        self.pacer = IdentifyPacer(LocalBuckets(sleep), settings.identify_window)
        self.client = _ChorusClient(self, **options)
        self.moderation = DiscordModeration(self.client, self.sender)  # delete, timeout, ban
        self.policy: convert.Policy | None = None
        self.typing = TypingIndicators(
            self.sender, self.client.http.send_typing, timeout=settings.typing_timeout
        )
        self._interactions: dict[str, asyncio.Future[Reply]] = {}
        self.live = LiveAnswers(self._live_view, interval=DRAFT_INTERVAL, store=live_store)
        self._outbound: asyncio.Task[None] | None = None
        self._forwarded: asyncio.Task[None] | None = None  # routed.py, when sharded over processes
        self._sends: set[asyncio.Task[None]] = set()
        self._send_slots = asyncio.Semaphore(MAX_CONCURRENT_SENDS)
        self._saved_endpoints: tuple[str, yarl.URL] | None = None

    @classmethod
    def from_section(
        cls,
        settings: DiscordSettings,
        bus: EventBus,
        commands: Sequence[NativeCommand] = (),
        *,
        live_store: AnswerStore | None = None,
        identify_store: Redis | None = None,
    ) -> DiscordAdapter:
        """The adapter of the settings root's Discord section (``DISCORD_TOKEN`` is set);
        ``live_store``: where streamed answers' messages are kept for a restarted gateway;
        ``identify_store``: the state store the gateway processes share identify buckets in."""
        return cls(
            bus, settings, commands=commands, live_store=live_store, identify_store=identify_store
        )

    # -- lifecycle ------------------------------------------------------------------------------
    async def run(self) -> None:
        self._apply_endpoints()
        if not self.settings.message_content_intent:
            log.warning(NO_CONTENT_INTENT)
        try:
            await self.client.login(self.settings.token_value())
        except discord.LoginFailure:
            await self.aclose()
            raise ConfigError(BAD_TOKEN) from None
        except BaseException:
            await self.aclose()
            raise
        try:
            await self._plan_shards()
        except BaseException:
            await self.aclose()
            raise
        self._outbound = asyncio.create_task(self._consume_outbound(), name="discord-outbound")
        if self.pending is not None:
            self._forwarded = asyncio.create_task(self._read_forwarded(), name="discord-routed")
        try:
            await self.client.connect(reconnect=True)
        except discord.PrivilegedIntentsRequired:
            log.error(INTENT_REFUSED)
            raise ConfigError(INTENT_REFUSED) from None
        finally:
            await self.client.close()
            await self._stop_tasks()

    async def aclose(self) -> None:
        self.shards.clear()
        await self.client.close()
        await self._stop_tasks()
        self._restore_endpoints()

    def _apply_endpoints(self) -> None:
        if self._saved_endpoints is None:
            self._saved_endpoints = (Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY)
        if self.settings.api_base_url:
            Route.BASE = self.settings.api_base_url
        if self.settings.gateway_url:
            DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(self.settings.gateway_url)

    def _restore_endpoints(self) -> None:
        if self._saved_endpoints is not None:
            Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY = self._saved_endpoints
            self._saved_endpoints = None

    async def _stop_tasks(self) -> None:
        tasks = [t for t in (self._outbound, self._forwarded, *self._sends) if t is not None]
        self._outbound = self._forwarded = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.live.aclose()
        await self.typing.aclose()
        for future in self._interactions.values():
            future.cancel()

    async def _setup(self) -> None:
        """After login, before the gateway: the bot's id, and the slash commands."""
        user = self.client.user
        assert user is not None  # login() has set it
        settings = self.settings
        self.policy = convert.Policy(
            bot_id=user.id,
            answer_bots=settings.answer_bots,
            allowed_channels=settings.allowed_channels,
            always_answer_channels=settings.always_answer_channels,
            ambient_channels=settings.ambient_channels,
        )
        self.client.tree.add_command(build_group(self._on_command))
        for command in self.commands:
            self.client.tree.add_command(build_native(command, self._on_command))
        if settings.sync_commands:
            try:
                await self.sender.call("commands", self.client.tree.sync, what="sync commands")
            except discord.HTTPException:
                log.warning(
                    "could not register the slash commands; text commands still work",
                    exc_info=True,
                )

    # -- inbound --------------------------------------------------------------------------------
    async def _on_message(self, message: discord.Message) -> None:
        if self.policy is None:
            return
        try:
            chat = convert.message_to_chat(message, self.policy)
        except ValueError as exc:  # a value the event model refuses (an id, a text of junk)
            _skipped("message", exc, message.id)
            return
        except Exception:
            log.exception(
                "dropping a Discord message that could not be converted",
                extra={"message_id": message.id, "channel_id": message.channel.id},
            )
            return
        if chat is None:
            return
        if not chat.ambient:
            self.typing.start(chat.id, message.channel.id)
        await self._publish(INBOUND, chat)

    async def _on_reaction(self, payload: discord.RawReactionActionEvent, *, added: bool) -> None:
        """A reaction, for the plugins (never the bot's own; only where it may read)."""
        me = self.client.user
        if me is not None and payload.user_id == me.id:
            return
        channel = self.client.get_channel(payload.channel_id)
        parent_id = channel.parent_id if isinstance(channel, discord.Thread) else None
        allowed = self.settings.allowed_channels
        outside = allowed and not {payload.channel_id, parent_id} & allowed
        if payload.guild_id is not None and outside:
            return
        try:
            chat = members.reaction_to_chat(payload, channel, added=added)
        except ValueError as exc:
            _skipped("reaction", exc, payload.message_id)
            return
        await self._publish(INBOUND, chat)

    async def _on_member(self, member: discord.Member, *, joined: bool) -> None:
        """A join or a leave, for the plugins."""
        try:
            chat = members.member_to_chat(member, joined=joined)
        except ValueError as exc:
            _skipped("member", exc, member.id)
            return
        await self._publish(INBOUND, chat)

    async def _on_deleted(
        self, channel_id: int, guild_id: int | None, message_ids: set[int] | list[int]
    ) -> None:
        channel = self.client.get_channel(channel_id)
        parent_id = channel.parent_id if isinstance(channel, discord.Thread) else None
        allowed = self.settings.allowed_channels
        if guild_id is not None and allowed and not {channel_id, parent_id} & allowed:
            return
        try:
            events = convert.deletions(channel_id, parent_id, message_ids)
        except ValueError as exc:
            _skipped("deletion", exc, channel_id)
            return
        for event in events:
            self.typing.stop(event.message_id)
            await self._publish(DELETIONS, event)

    async def _on_command(self, interaction: discord.Interaction, name: str) -> None:
        """Defer privately, publish ``/<name>`` (``name`` may carry the command's text), answer
        with the matching Reply."""
        key = f"interaction:{interaction.id}"
        await self.sender.call(
            key, lambda: interaction.response.defer(ephemeral=True, thinking=True), what="defer"
        )
        message = convert.command_to_chat(interaction, name)
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._interactions[message.id] = future
        try:
            await self._hold_interaction(message.id)
            await self._publish(INBOUND, message)
            async with asyncio.timeout(self.settings.command_timeout):
                text = (await future).text
        except TimeoutError:
            log.warning("no answer to a slash command in time", extra={"interaction_id": key})
            text = no_answer_in_time()
        finally:
            self._interactions.pop(message.id, None)
            await self._release_interaction(message.id)
        pieces = convert.followup_pieces(text) or [no_answer_in_time()]
        for piece in pieces:
            await self.sender.call(
                key,
                lambda p=piece: interaction.followup.send(  # type: ignore[misc]
                    p, ephemeral=True, allowed_mentions=discord.AllowedMentions.none()
                ),
                what="followup",
            )

    async def _publish(self, topic: str, event: BaseModel) -> None:
        try:
            await self.bus.publish(topic, event)
        except BusClosed:
            log.warning("bus closed; Discord event dropped", extra={"topic": topic})

    # -- outbound -------------------------------------------------------------------------------
    async def _consume_outbound(self) -> None:
        async for delivery in self.bus.consume(
            outbound_topic(PLATFORM), Outbound, group="outbound", consumer="discord"
        ):
            event = delivery.event.root
            if isinstance(event, ReplyDraft):  # in bus order, before the answer's Reply
                if not await self._held(event.reply_to_id):  # a slash command's: never shown
                    self.live.draft(event)
                await delivery.ack()
                continue
            await self._send_slots.acquire()
            task = asyncio.create_task(self._deliver(delivery, event), name="discord-send")
            self._sends.add(task)
            task.add_done_callback(self._send_done)

    def _send_done(self, task: asyncio.Task[None]) -> None:
        self._sends.discard(task)
        self._send_slots.release()

    def _live_view(self, draft: ReplyDraft) -> DiscordLive | None:
        """The view of a streamed answer; None for slash commands (answered privately)."""
        if draft.reply_to_id in self._interactions:
            return None
        return DiscordLive(
            self.client, self.sender, draft, on_shown=lambda: self.typing.stop(draft.reply_to_id)
        )

    async def _deliver(self, delivery: Delivery[Outbound], reply: Reply) -> None:
        self.typing.stop(reply.reply_to_id)
        pending = self._interactions.get(reply.reply_to_id or "")
        try:
            if pending is not None:
                if not pending.done():
                    pending.set_result(reply)
            elif not await self._answered_elsewhere(reply):  # forwarded to its holder, or not
                await self._send_reply(reply)
        except Exception:  # a send that failed for good; never stop the outbound loop
            log.exception(
                "could not send a reply to Discord; dropped",
                extra={"reply_to_id": reply.reply_to_id, "conversation": str(reply.conversation)},
            )
        await delivery.ack()

    async def _send_reply(self, reply: Reply) -> None:
        if await self.live.finish(reply):
            return  # the streamed message(s) now show the final answer
        pieces = convert.reply_to_outgoing(reply)
        if not pieces:
            log.warning("empty reply not sent", extra={"reply_to_id": reply.reply_to_id})
            return
        key = f"channel:{pieces[0].channel_id}"
        async with self.sender.lock(key):
            for piece in pieces:
                await adopt(self.client, self.sender, key, piece)
