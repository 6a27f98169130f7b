"""The runtime: builds the core from settings, runs the router, closes everything it created.

This is the core's half of the composition root. It never imports an adapter: ``bot/cli.py``
creates the adapters (lazily, so each platform SDK stays optional) and attaches them to the bus.
Components can also be injected (a scripted provider, a shared bus) for tests and benchmarks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING

from bot.agent.loop import Agent, LoopLimits
from bot.bus.base import EventBus, InProcessBus
from bot.bus.erasure import StreamEraser
from bot.bus.outbox import Outbox
from bot.bus.retention import StreamRetention
from bot.bus.spool_key import gateway_outbox
from bot.bus.topics import moderation_topic
from bot.engagement.thanks import ThanksConfig
from bot.engagement.turns import LiveChat, platform_overrides, policy_config
from bot.events import ModerationRequest
from bot.knowledge.wiring import RecallParts
from bot.llm.base import Provider
from bot.llm.embeddings import embedder_for
from bot.llm.fallback import build_chain
from bot.memory.buffers import MemoryStore
from bot.memory.summaries import history_room
from bot.memory.vectors import bounded
from bot.ops.aio import cancel_and_wait
from bot.ops.log_feed import LogFeed, process_name
from bot.ops.metrics import Metrics, NullMetrics
from bot.ops.model_calls import Spend, metered_embedder
from bot.platform.commands import NativeCommand
from bot.plugins.loader import LoadedPlugins, load_plugins
from bot.plugins.runtime import TurnHooks, command_handler
from bot.plugins.wiring import plugin_events, plugin_timers
from bot.quota.gate import live_reply_gate
from bot.router import link_commands, memory_commands, safety_commands
from bot.router.build import build_router
from bot.router.core import RouterLimits
from bot.router.drafts import Drafts
from bot.router.plugin_reach import plugin_reach
from bot.router.scoping import ScopedEngagement, Scoping, chain_factory
from bot.router.text_commands import Command, Commands
from bot.safety.canary import LeakCheck, deployment_canary, deployment_secret
from bot.safety.gate import SafetyGate
from bot.safety.moderator import ModerationModel, build_moderation_model
from bot.safety.policy import Policies
from bot.settings import ConfigError, Settings, ToolSettings
from bot.state import connect
from bot.state.claims import default_worker_id
from bot.state.connect import Client
from bot.state.engagement import RedisLiveStore
from bot.state.history import HistoryStore
from bot.state.redis_turn import RedisTurnStore
from bot.tools.builtin import builtin_tools
from bot.tools.mcp_config import config_from_settings
from bot.tools.toolbox import Toolbox

if TYPE_CHECKING:
    from bot.admin.server import AdminServer
    from bot.ops.health import HealthServer
    from bot.tools.mcp import MCPManager
    from bot.voice.speaker import Speaker

log = logging.getLogger("chorus.app")

REPLY_FLUSH_SECONDS = 3.0  # how long a stopping process waits for the last replies to go out


class Chorus:
    """One running bot. Use ``async with Chorus.from_settings(settings) as app:``."""

    def __init__(
        self,
        *,
        settings: Settings,
        provider: Provider,
        model: str,
        redis: Client,
        bus: EventBus,
        tools: Toolbox | None = None,
        metrics: Metrics | NullMetrics | None = None,
        owns: tuple[object, ...] = (),
        outbox: Outbox | None = None,
        plugins: LoadedPlugins | None = None,
        policies: Policies | None = None,
        moderation: ModerationModel | None = None,
        recall: RecallParts | None = None,
        spend: Spend | None = None,
    ) -> None:
        self.metrics: Metrics | NullMetrics = metrics or NullMetrics()
        self.health: HealthServer | None = None
        self.admin: AdminServer | None = None  # the dashboard (CHORUS_ADMIN_PORT)
        self.reload_config: Callable[[], None] | None = None  # SIGHUP's reload, once installed
        self.log_feed: LogFeed | None = None  # this process's log lines, fed to Redis
        # Following the dashboard's reloads (bot/cli_config.py), once installed.
        self.reload_watch: asyncio.Task[None] | None = None
        self.settings = settings
        self.provider = provider
        self.redis = redis
        self.bus = bus
        self.outbox = outbox
        # What platform adapters publish through: the gateway's ordered outbox on Redis Streams
        # (bot/bus/outbox.py), the bus itself otherwise. The router always uses the bus.
        self.ingress_bus: EventBus = outbox if outbox is not None else bus
        self.history = HistoryStore(
            redis,
            max_messages=settings.state.history_max_messages,
            ttl_seconds=settings.state.history_ttl_seconds,
            **history_room(settings.memory),  # lines past the window wait for their summary
        )
        self.tools = tools if tools is not None else Toolbox.from_settings(settings.tools)
        self.agent = Agent(
            provider,
            metrics=self.metrics,
            tools=self.tools,
            limits=LoopLimits(
                max_iterations=settings.agent.max_tool_iterations,
                budget_seconds=settings.agent.turn_budget_seconds,
            ),
        )
        # chorus.toml's personas and scopes (bot/router/scoping.py); every persona's system text
        # ends with the deployment's canary (bot/safety/canary.py), stable per deployment.
        canary = deployment_canary(settings.safety, settings.llm, settings.agent.bot_name)
        policies = policies or Policies(settings.safety, settings.quota)
        self.scoping = Scoping(
            settings,
            provider=provider,
            tools=self.tools,
            chains=chain_factory(settings, self.metrics.llm_fallback),
            metrics=self.metrics,
            agent=self.agent,
            canary=canary,
            policies=policies,  # each scope's safety tables, compiled with its profile
        )
        system = self.scoping.default.assembler.system_prompt
        self.reply_gate = live_reply_gate(settings, redis, self.metrics)
        self.memory_settings = settings.memory
        self.memory = MemoryStore(redis, self.memory_settings)
        self.commands = commands = Commands(self.history)
        self.safety = SafetyGate.from_parts(
            policies,
            redis,
            namespace=settings.state.bus_namespace,
            model=moderation,
            leak=LeakCheck(system, canary),
            prices=self.metrics.prices if isinstance(self.metrics, Metrics) else None,
            secret=deployment_secret(settings.safety, settings.llm),
        )
        self.safety.scope_of = self.scoping.safety_of
        self.safety.audit.register(self.metrics)
        audit, erase = self.safety.audit, StreamEraser.for_bus(bus, redis)
        memory_commands.register(commands, self.memory, self.history, eraser=erase, audit=audit)
        safety_commands.register(commands, self.safety, self.history)  # before plugins take names
        link_commands.register(commands, self.memory, audit=self.safety.audit)
        self.plugins = plugins or LoadedPlugins()
        # ctx.store on the same store as the rest; timers claimed there once per firing
        reach = plugin_reach(
            bus=bus,
            safety=self.safety,
            provider=provider,
            model=model,
            spend=spend,
            metrics=self.metrics,
            max_tokens=settings.agent.max_output_tokens,
        )  # ctx.send/reply/ask
        self.timers = plugin_timers(
            self.plugins, settings, redis, self.metrics, worker=default_worker_id(), reach=reach
        )
        self.native_commands = _install_commands(commands, self.plugins)
        self.hooks = TurnHooks(
            self.plugins.hooks,
            timeout=settings.plugins.hook_timeout,
            events=plugin_events(self.plugins, settings, self.metrics),
        )
        # A turn's one read and one commit (bot/state/turn.py); its live channels ride the commit.
        channels = RedisLiveStore(
            redis, pause_seconds=round(settings.engagement.pause_hours * 3600)
        )
        self.turns = RedisTurnStore(redis, history=self.history, channels=channels)
        self.engagement = LiveChat(
            ScopedEngagement(
                policy_config(settings.engagement),
                platform_overrides(settings.engagement),
                scoping=self.scoping,
            ),
            metrics=self.metrics,
            store=channels,
            budget=self.reply_gate,
            thanks=ThanksConfig.from_settings(settings.thanks),
        )
        # Recall and the knowledge base (bot/knowledge/wiring.py): a message's base is its scope's.
        self.recall = recall or RecallParts.build(settings, redis, self.metrics)
        self.recall.bind(lambda message: self.scoping.profile(message).knowledge)
        self.router = build_router(
            bus=bus,
            redis=redis,
            store=self.turns,
            history=self.history,
            scoping=self.scoping,
            commands=commands,
            tools=self.tools,
            memory=self.memory,
            hooks=self.hooks,
            engagement=self.engagement,
            metrics=self.metrics,
            safety=self.safety,
            recall=self.recall.recall if self.recall.active else None,
            drafts=Drafts(bus, settings.agent.streams, check=self.safety.guard),
            speaker=self._speaker(settings, redis),
            limits=RouterLimits(
                max_message_chars=settings.agent.max_message_chars,
                reasoning=settings.agent.reasoning,
                reasoning_max=settings.agent.reasoning_max,
                max_deliveries=settings.state.max_deliveries,
                claim_lease_ms=settings.state.claim_lease_ms,
                max_in_flight=settings.agent.max_turns_in_flight,
            ),
        )
        reach.on_asked = self.router.observer.plugin_asked  # ctx.ask in the turn log
        self.metrics.register_gauge_callback(
            "chorus_turns_in_flight",
            "Messages this process holds: turns running or queued behind their conversation "
            "(at most CHORUS_MAX_TURNS_IN_FLIGHT)",
            (),
            lambda: float(self.router.in_flight),
        )
        self._owns = owns
        self._router_task: asyncio.Task[None] | None = None

    def _speaker(self, settings: Settings, redis: Client) -> Speaker | None:
        """The overlay's voice on this worker, when the deployment or a scope turns it on."""
        scoped = any(s.voice is not None and s.voice.enabled for s in settings.file.scopes)
        if not (settings.voice.enabled or scoped):
            return None
        from bot.state.voice import VoiceQueue  # imported only where the voice is on
        from bot.voice.speaker import Speaker

        return Speaker(
            VoiceQueue(redis, max_len=settings.voice.queue_max * 10),
            lambda: self.settings,
            check=self.safety.guard,
        )

    @classmethod
    async def from_settings(
        cls,
        settings: Settings,
        *,
        provider: Provider | None = None,
        bus: EventBus | None = None,
        outbox: bool = False,
    ) -> Chorus:
        """Build every component the settings describe; what is built here is closed here.
        ``outbox``: this process runs platform adapters (a gateway), so on the Redis Streams bus
        they publish through an ordered outbox that first replays the spool of earlier runs."""
        spec = settings.llm.model_spec()
        deadline = settings.memory.background_deadline
        owned: list[object] = []
        try:
            metrics = Metrics.from_settings(settings.metrics)  # a bad CHORUS_PRICES file fails here
            mcp = await _start_mcp(settings.tools)
            if mcp is not None:
                owned.append(mcp)
            extra = mcp.tools() if mcp else []
            reserved = [t.spec.name for t in (*builtin_tools(settings.tools), *extra)]
            plugins = load_plugins(
                settings.plugins,
                reserved_tools=reserved,
                file=settings.file,
                variables=settings.variable,
            )
            redis = await connect.open_state(settings.state)
            owned.append(redis)
            spend = Spend.for_settings(settings, redis, metrics.prices)  # the daily cost cap
            # closed by the app; embedding off the reply path has an overall deadline too
            embedder = bounded(embedder_for(settings.memory, settings.llm), deadline)
            embedder = metered_embedder(spend, embedder)
            recall = RecallParts.build(settings, redis, metrics, embedder=embedder)
            tools = Toolbox.from_settings(
                settings.tools, extra_tools=[*extra, *plugins.tools, *recall.tools]
            )
            policies = Policies(settings.safety, settings.quota)  # a bad list or pattern: here
            moderation = build_moderation_model(settings.safety, settings.llm)
            if moderation is not None:
                owned.append(moderation)
            if provider is None:
                provider = build_chain(
                    settings.llm, spec, settings.fallback, on_fallback=metrics.llm_fallback
                )
                owned.append(provider)
            ordered: Outbox | None = None
            if bus is None:
                bus = _make_bus(settings, redis)
                owned.append(bus)
                retention = StreamRetention.for_bus(
                    bus, redis, settings.state.bus_retention_seconds
                )
                if retention is not None:  # Redis Streams: entries older than the window go
                    retention.start()
                    owned.append(retention)
                if outbox and settings.state.bus == "redis":
                    ordered = gateway_outbox(settings, bus)
                    owned.append(ordered)  # closed before the bus it closes in turn
                    await ordered.recover()
        except BaseException:
            await _close_all(owned)  # nothing half-started outlives a failed start
            raise
        return cls(
            settings=settings,
            provider=provider,
            model=spec.model,
            redis=redis,
            bus=bus,
            tools=tools,
            metrics=metrics,
            owns=tuple(owned),
            outbox=ordered,
            plugins=plugins,
            policies=policies,
            moderation=moderation,
            recall=recall,
            spend=spend,
        )

    async def start(self) -> None:
        """Start the router (a no-op when it already runs) and the knowledge indexer."""
        if self._router_task is not None:
            return
        self.feed_logs("worker")
        await self.recall.start()
        self._router_task = asyncio.create_task(self.router.run(), name="router")
        self.timers.start()  # where the router runs: never in a gateway

    @contextlib.asynccontextmanager
    async def bus_only(self) -> AsyncIterator[Chorus]:
        """The gateway role: the bus and state without the router; closed on exit."""
        self.feed_logs("gateway")
        try:
            yield self
        finally:
            await self.aclose()

    def feed_logs(self, role: str) -> None:
        """Feed this process's log lines (``CHORUS_LOG_FEED_LEVEL`` and up) to the deployment's
        stream in Redis, for the dashboard's Logs page (once; ``OFF``: never)."""
        level = self.settings.logging.feed_level
        if self.log_feed is not None or level == "OFF":
            return
        self.log_feed = LogFeed(
            self.redis,
            namespace=self.settings.state.bus_namespace,
            level=level,
            process=process_name(role),
        )
        self.log_feed.start()

    async def start_health(self, adapters: Sequence[object] = ()) -> None:
        """The /healthz, /readyz and /metrics server (CHORUS_HEALTH_PORT=0: none)."""
        from bot.ops.health import HealthServer, adapter_checks, provider_check, redis_check

        checks = {
            "redis": redis_check(self.redis),
            "llm": provider_check(self.provider),
            **adapter_checks(adapters),
        }
        self.health = HealthServer.from_settings(self.settings.health, self.metrics, checks)
        if self.health is not None:
            await self.health.start()
        from bot.admin.chat_page import ChatParts
        from bot.admin.wiring import start_admin  # Jinja2 loads only when the dashboard is on

        prices = self.metrics.prices if isinstance(self.metrics, Metrics) else None

        self.admin = await start_admin(
            self.settings,
            self.redis,
            memory=self.memory,
            history=self.history,
            audit=self.safety.audit,
            checks=checks,
            provider=self.provider,
            commands=self.commands,
            live=self.engagement,
            reload=lambda: self.reload_config() if self.reload_config else None,
            moderate=self._moderate,  # the Moderation page's undo, to the platform's gateway
            plugins=self.plugins,
            chat=ChatParts(self.scoping, self.tools, self.safety, prices),
        )

    async def _moderate(self, request: ModerationRequest) -> None:
        await self.bus.publish(moderation_topic(request.conversation.platform), request)

    async def drain(self) -> None:
        """The graceful stop of the router (once): intake stops, the turns in progress get
        ``CHORUS_SHUTDOWN_GRACE`` seconds to finish, the rest give their claims back. Then the
        bus may close (``aclose``), handing this process's partitions to the next worker."""
        if self._router_task is not None:
            await self.router.shutdown(self.settings.agent.shutdown_grace)
            await cancel_and_wait(self._router_task)
            await self._replies_sent()

    async def _replies_sent(self, limit: float = REPLY_FLUSH_SECONDS) -> None:
        """In-process bus: wait (a little) until the adapters took the replies the drain
        produced, before they close; the queue dies with the process (Redis keeps them)."""
        bus = self.bus
        if not isinstance(bus, InProcessBus):
            return

        def sent() -> bool:
            backlog = bus.backlog().items()
            return not any(sum(n) for (topic, _), n in backlog if topic.startswith("outbound:"))

        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(limit):
                while True:
                    if sent():
                        return
                    await asyncio.sleep(0.02)  # the adapters' progress

    def hurry(self) -> None:
        """A second signal: end the grace now (what still runs is cancelled and released)."""
        self.router.hurry()

    async def aclose(self) -> None:
        if self.reload_watch is not None:
            await cancel_and_wait(self.reload_watch)
            self.reload_watch = None
        await self.drain()
        await self.safety.aclose()  # the audit entries still being written
        await self.timers.aclose()
        await self.hooks.aclose()
        for server in (self.health, self.admin):
            if server is not None:
                await server.aclose()
        await self.scoping.aclose()
        await self.recall.aclose()
        if self.log_feed is not None:
            await self.log_feed.aclose()  # the last lines, before Redis closes
            self.log_feed = None
        await _close_all(self._owns)  # the bus first (newest): its partition leases go back

    async def __aenter__(self) -> Chorus:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


async def _start_mcp(settings: ToolSettings) -> MCPManager | None:
    """The MCP servers of ``CHORUS_MCP_CONFIG``, started; None when none are configured."""
    config = config_from_settings(settings)
    if config is None:
        return None
    try:
        from bot.tools.mcp import MCPManager
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in {"mcp", "mcp_types"}:
            raise ConfigError(
                "CHORUS_MCP_CONFIG is set but the MCP SDK is not installed; "
                "run: pip install 'chorus-bot[mcp]'"
            ) from None
        raise
    manager = MCPManager(config)
    await manager.start()
    log.info("mcp servers started", extra={"servers": manager.status()})
    return manager


def _install_commands(commands: Commands, plugins: LoadedPlugins) -> list[NativeCommand]:
    """The plugins' commands in the command table (a name the bot has already is logged and
    skipped; ``chorus`` is Discord's ``/chorus`` group), and the list native pickers show."""
    native = []
    for plugin in plugins.plugins:
        for command in plugin.commands:
            if command.name in {*commands.names(), "chorus"}:
                log.error(
                    "plugin command skipped: the name is taken", extra={"command": command.name}
                )
                continue
            handler = command_handler(command, plugin.services)
            commands.add(Command(command.name, command.summary, handler))
            native.append(NativeCommand(command.name, command.summary))
    return native


async def _close_all(things: Sequence[object]) -> None:
    """Close what we created, newest first; one failure does not stop the rest."""
    for thing in reversed(things):
        close = getattr(thing, "aclose", None) or getattr(thing, "close", None)
        try:
            if close is not None:
                await close()
        except Exception:
            log.warning("error while closing %s", type(thing).__name__, exc_info=True)


def _make_bus(settings: Settings, redis: Client) -> EventBus:
    """In-process by default; Redis Streams (``CHORUS_BUS=redis``) to scale out over processes.
    The Streams bus shares the state store's connection so a reply and its record commit in one
    transaction."""
    if settings.state.bus == "redis":
        from bot.bus.streams import RedisStreamsBus

        if settings.state.is_embedded():
            # It would connect no other process, and the embedded store answers a blocking
            # read (the consumers' XREADGROUP ... BLOCK) by holding the event loop itself.
            raise ConfigError(
                "CHORUS_BUS=redis needs a Redis server, which the embedded store "
                f"(CHORUS_REDIS_URL={settings.state.redis_url}) is not: set "
                "CHORUS_REDIS_URL=redis://HOST:6379/0 to scale out over processes, or "
                "CHORUS_BUS=memory for one process"
            )
        return RedisStreamsBus(
            redis,
            consumer=default_worker_id(),
            namespace=settings.state.bus_namespace,
            lease_ms=settings.state.partition_lease_ms,
        )
    return InProcessBus()
