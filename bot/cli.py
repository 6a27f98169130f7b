"""The ``chorus`` command: the composition root that wires settings, core and adapters.

Adapters are imported here, lazily, so the core never depends on a platform SDK. Every
configuration problem ends the process with exit code 2 and one clear message on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import logging
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import prompts
from bot.cli_parser import parser as _parser
from bot.ops import aio
from bot.ops.aio import cancel_and_wait, on_stop_signals
from bot.ops.logs import setup_logging

if TYPE_CHECKING:  # the rest is imported in the functions (see main)
    from adapters.console_tty import Terminal
    from bot.admin.server import AdminServer
    from bot.app import Chorus
    from bot.llm.base import Provider
    from bot.ops.metrics import MetricsSink
    from bot.platform.supervisor import Slot, Supervisor
    from bot.settings import Settings
    from bot.state.connect import Client
    from insights.worker import InsightsWorker

log = logging.getLogger("chorus.cli")

EXIT_CONFIG = 2
CONSOLE_FLUSH = 0.2  # seconds for the console to print the last answer after the drain


def main(argv: Sequence[str] | None = None) -> int:
    """The ``chorus`` command; no full garbage collection while a bot starts (``aio.starting``)."""
    aio.starting()
    try:
        return _main(_parser().parse_args(argv))
    finally:
        aio.started()


def _main(args: argparse.Namespace) -> int:
    if args.command not in ("chat", "run"):
        aio.started()  # these do their work right away
    if args.command == "init":  # before the settings: it may be replacing a broken .env
        from bot.onboarding import wizard

        return wizard.run(args)
    if args.command == "auth":  # reads .env itself: no bot settings are needed
        from bot.onboarding import auth

        if not args.broadcaster:
            return auth.run(args)
        from adapters.twitch.tokens import save_broadcaster  # the adapter's store

        return auth.run(args, save_broadcaster)
    from bot.cli_config import describe_config, reload_command
    from bot.router.scope_text import describe_scope
    from bot.router.scoping import personas, prompt_overrides
    from bot.settings import ConfigError, load_settings

    try:
        settings = load_settings(warn=False)  # warnings once logging is set up
    except ConfigError as exc:
        print(f"chorus: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    log_file = _chat_log(args, settings)  # a terminal chat: logs to a file, not between turns
    setup_logging(
        settings.logging.level, settings.logging.format, settings.secret_values(), log_file
    )
    settings.log_warnings()
    try:
        prompts.set_overrides(prompt_overrides(settings))
        personas(settings)  # every persona renders (a bad override fails here, named)
    except ConfigError as exc:
        print(f"chorus: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if args.command == "config":
        if args.scope:
            try:
                print(describe_scope(settings, args.scope))
            except ValueError as exc:
                print(f"chorus: --scope: {exc}", file=sys.stderr)
                return EXIT_CONFIG
            return 0
        print(describe_config(settings))
        return 0
    if args.command == "reload":
        return reload_command(settings)
    if args.command == "plugins":
        from bot.plugins.report import plugins_command

        if args.action == "info" and not args.name:
            print("chorus: plugins info NAME: name the plugin", file=sys.stderr)
            return EXIT_CONFIG
        return plugins_command(settings, args.action, args.name)
    if args.command == "admin":
        from bot.admin import accounts  # the dashboard's accounts

        return accounts.command(settings, args.action, args.name, getattr(args, "role", ""))
    if args.command == "twitch":
        from bot.cli_config import twitch_command

        return twitch_command(settings, args.action, args.name)

    if args.command == "overlay":
        from bot.voice import keys_command

        return keys_command.command(settings, args.channel, args.rotate)
    if args.command == "knowledge":
        from bot.knowledge.command import knowledge_command

        try:
            return aio.run(knowledge_command(settings, args.action))
        except ConfigError as exc:
            print(f"chorus: {exc}", file=sys.stderr)
            return EXIT_CONFIG
    if args.command == "replay":
        return _replay(args.trace, settings, youtube_read=args.youtube_read)
    try:
        settings.llm.model_spec()
        if args.command == "run":
            return aio.run(_run(settings, role=args.role, logs=_path_of(log_file)))
        if args.command == "insights":
            return aio.run(_insights(settings, drain=args.drain))
        return aio.run(
            _chat(settings, user=args.user, json_output=args.json, logs=_path_of(log_file))
        )
    except ConfigError as exc:
        print(f"chorus: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return 130


async def _run(settings: Settings, *, role: str = "all", logs: Path | None = None) -> int:
    from adapters.moderation_service import serving
    from adapters.registry import build_slots, configured_platforms
    from bot.app import Chorus
    from bot.cli_config import on_reload_signal, registered
    from bot.platform.supervisor import Supervisor
    from bot.settings import ConfigError

    if role == "all" and not configured_platforms(settings):
        log.info("no platform credentials configured; starting the console adapter")
        return await _chat(settings, user=None, json_output=False, health=True, logs=logs)
    if role != "all" and settings.state.bus != "redis":
        raise ConfigError(
            f"--role {role} needs the Redis Streams bus between processes: set CHORUS_BUS=redis "
            "and CHORUS_REDIS_URL=redis://... (the same for every process)"
        )
    app = await Chorus.from_settings(settings, outbox=role != "worker")
    commands = app.native_commands
    slots = [] if role == "worker" else build_slots(settings, app.ingress_bus, app.redis, commands)
    supervisor = Supervisor(slots)
    _watch(app, slots)
    await app.start_health(slots)
    if role == "gateway" and not slots:
        await app.aclose()
        raise ConfigError(
            "--role gateway found no platform to connect: set DISCORD_TOKEN, "
            "SLACK_BOT_TOKEN, TWITCH_CLIENT_ID or YOUTUBE_REFRESH_TOKEN"
        )
    on_reload_signal(app)
    # moderation requests, audited in the trail (and on /metrics) with the other decisions
    acting = serving(app.ingress_bus, slots, app.safety.audit.record_action)
    if role == "gateway":
        aio.started()  # a gateway does not freeze its heap
        async with app.bus_only(), registered(settings), acting:
            return await _serve(supervisor)
    async with app, _insights_in_process(app), registered(settings), acting:
        aio.freeze_heap()
        return await _serve(supervisor, app)


def _watch(app: Chorus, slots: Sequence[Slot]) -> None:
    """Scrape-time gauges: the bus's lag and pending counts, each supervised adapter's state
    and restarts, and the adapters' own counters (read from whichever adapter runs now)."""
    from adapters.registry import adapter_gauges, configured_platforms
    from bot.bus.gauges import bus_gauges, outbox_gauges
    from bot.bus.topics import DELETIONS, INBOUND, outbound_topic
    from bot.platform.supervisor import State

    platforms = configured_platforms(app.settings)
    topics = (INBOUND, DELETIONS, *(outbound_topic(p) for p in platforms))
    app.metrics.watch_bus(bus_gauges(app.bus, redis=app.redis, topics=topics))
    if app.outbox is not None:
        for name, help_text, read, kind in outbox_gauges(app.outbox):
            app.metrics.register_gauge_callback(name, help_text, (), read, kind=kind)
    if slots:
        app.metrics.register_gauge_callback(
            "chorus_adapter_up",
            "1 while a platform adapter runs, 0 while it restarts or has failed",
            ("platform",),
            lambda: {(s.platform,): float(s.state is State.RUNNING) for s in slots},
        )
        app.metrics.register_gauge_callback(
            "chorus_adapter_restarts",
            "Times a platform adapter was restarted after it crashed or finished",
            ("platform",),
            lambda: {(s.platform,): float(s.restarts) for s in slots},
            kind="counter",
        )
        app.metrics.register_gauge_callback(
            "chorus_adapter_part_up",
            "1 while a part of an adapter (a Discord shard) is connected, 0 while it is down",
            ("platform", "part"),
            lambda: {
                (s.platform, part): float(up and s.state is State.RUNNING)
                for s in slots
                for part, up in _parts(s).items()
            },
        )
        app.metrics.register_gauge_callback(
            "chorus_adapter_part_restarts",
            "Times the supervisor restarted one part of an adapter (a Discord shard) alone",
            ("platform", "part"),
            lambda: {(s.platform, p): float(n) for s in slots for p, n in s.part_restarts.items()},
            kind="counter",
        )
    for slot in slots:
        for name, help_text, labels, read, kind in adapter_gauges(slot):
            app.metrics.register_gauge_callback(name, help_text, labels, read, kind=kind)


def _parts(slot: Slot) -> dict[str, bool]:
    """The parts of a slot's current adapter (Discord's shards) -> connected."""
    parts = getattr(slot.adapter, "parts", None)
    return dict(parts()) if parts is not None else {}


async def _serve(supervisor: Supervisor, app: Chorus | None = None) -> int:
    """Run the supervised adapters (or, for a worker, nothing but the app) until SIGINT or
    SIGTERM. One adapter failing or finishing never ends the process (see ``Supervisor``);
    when every adapter is misconfigured, their errors stop it.

    Stopping is graceful: ``app.drain`` stops intake and lets the turns in progress finish
    (``CHORUS_SHUTDOWN_GRACE``) while the adapters can still send their replies; then the
    adapters close; then the bus (``app.aclose``). A second signal cuts the grace short."""
    stop = asyncio.Event()
    on_stop_signals(stop, app.hurry if app is not None else None)
    running = asyncio.create_task(supervisor.run(), name="supervisor")
    stopping = asyncio.create_task(stop.wait(), name="stop")
    platforms = ",".join(s.platform for s in supervisor.slots) or "none"
    log.info("running", extra={"platforms": platforms})
    try:
        done, _ = await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if running in done and running.exception() is not None:
            raise running.exception()  # type: ignore[misc]
        return 0
    finally:
        if app is not None:
            await app.drain()
        await supervisor.aclose()
        for task in (running, stopping):
            task.cancel()
        await asyncio.gather(running, stopping, return_exceptions=True)


def _on_terminal() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def _chat_log(args: object, settings: Settings) -> TextIO | None:
    """The log file of a chat on a terminal (``chorus chat``, or ``chorus run`` with no
    platform configured); None: logs go to stderr."""
    command = getattr(args, "command", None)
    if command not in ("chat", "run") or getattr(args, "verbose", True):
        return None
    if getattr(args, "json", False) or not _on_terminal():
        return None
    from adapters.console_tty import state_dir
    from adapters.registry import configured_platforms

    if command == "run" and (args.role != "all" or configured_platforms(settings)):  # type: ignore[attr-defined]
        return None

    try:
        state_dir().mkdir(parents=True, exist_ok=True)
        return (state_dir() / "chorus.log").open("a", encoding="utf-8")
    except OSError:
        return None


def _path_of(stream: TextIO | None) -> Path | None:
    return Path(stream.name) if stream is not None else None


async def _chat(
    settings: Settings,
    *,
    user: str | None,
    json_output: bool,
    health: bool = False,
    logs: Path | None = None,
) -> int:
    """The console. ``health``: also serve /healthz, /readyz and /metrics, as ``chorus run``
    does with any platform (``chorus chat`` is a tool, ``chorus run`` a deployment). On a
    terminal the answers stream; piped, each comes whole (the scripting contract)."""
    from adapters.console import ConsoleAdapter, FdLineReader
    from bot.app import Chorus
    from bot.cli_config import on_reload_signal, registered
    from bot.llm.lazy import warm

    terminal: Terminal | None = None
    name = user or _default_user()
    if _on_terminal() and not json_output:
        from adapters.console_tty import Terminal, state_dir  # prompt_toolkit, rich: a TTY only

        spec = str(settings.llm.model_spec())
        terminal = Terminal(
            bot_name=settings.agent.bot_name, model=spec, user=name, history=_history(state_dir())
        )
    else:  # pipes never see drafts: the model is asked whole, as before
        streamed = settings.agent.stream_replies - {"console"}
        agent = settings.agent.model_copy(update={"stream_replies": streamed})
        settings = settings.model_copy(update={"agent": agent})
    app = await Chorus.from_settings(settings)
    if health:
        await app.start_health()
    async with app, _insights_in_process(app), registered(settings):
        aio.freeze_heap()
        if not health:  # a chat, not an idle deployment: the model SDK loads while one types
            warm(app.provider)
        adapter = ConsoleAdapter(
            app.bus,
            stdin=FdLineReader(sys.stdin.fileno()),
            stdout=sys.stdout,
            user=name,
            interactive=sys.stdin.isatty(),
            bot_name=settings.agent.bot_name,
            reply_timeout=settings.llm.llm_timeout * (settings.llm.llm_max_retries + 2) + 30,
            json_output=json_output,
            terminal=terminal,
        )
        if terminal is not None:
            terminal.welcome(logs)
        stop = asyncio.Event()
        on_stop_signals(stop, app.hurry)
        on_reload_signal(app)
        chatting = asyncio.create_task(adapter.run(), name="console")
        stopping = asyncio.create_task(stop.wait(), name="stop")
        await asyncio.wait({chatting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if chatting.done():
            return chatting.result()
        await app.drain()  # the answer in progress is finished (and printed) first
        await asyncio.sleep(CONSOLE_FLUSH)
        await cancel_and_wait(chatting)
        return 0


@asynccontextmanager
async def _insights_in_process(app: Chorus) -> AsyncIterator[None]:
    """The insights worker as a task of this process (the default), stopped on exit."""
    memory = app.memory_settings
    if not (memory.insights_enabled and memory.insights_in_process):
        yield
        return
    worker, provider = _insights_worker(app.settings, app.redis, app.provider, app.metrics)
    task = asyncio.create_task(worker.run(), name="insights")
    try:
        yield
    finally:
        await worker.aclose()
        await asyncio.gather(task, return_exceptions=True)
        if provider is not app.provider:
            await provider.aclose()


def _insights_worker(
    settings: Settings,
    redis: Client,
    chat_provider: Provider | None,
    metrics: MetricsSink | None = None,
) -> tuple[InsightsWorker, Provider]:
    from bot.llm.embeddings import embedder_for
    from bot.llm.registry import build_provider
    from bot.memory.buffers import MemoryStore
    from bot.memory.summaries import history_room
    from bot.ops.model_calls import Spend
    from bot.state.history import HistoryStore
    from insights.worker import InsightsWorker

    memory = settings.memory
    chat = settings.llm.model_spec()
    spec = memory.insights_model(chat, base_url=settings.llm.base_url(chat.provider))
    provider = (
        chat_provider
        if chat_provider is not None and spec.provider == chat.provider
        else build_provider(spec, settings.llm)
    )
    history = HistoryStore(
        redis,
        max_messages=settings.state.history_max_messages,
        ttl_seconds=settings.state.history_ttl_seconds,
        **history_room(memory),
    )
    worker = InsightsWorker(
        redis, provider, spec.model, history, MemoryStore(redis, memory), memory, metrics=metrics,
        embedder=embedder_for(memory, settings.llm), spend=Spend.for_settings(settings, redis),
    )  # fmt: skip
    log.info("insights worker ready", extra={"model": str(spec)})
    return worker, provider


async def _insights(settings: Settings, *, drain: bool) -> int:
    """``chorus insights``: the worker alone (scale it separately from the chat workers), with
    its own /healthz, /readyz (Redis, the insights model) and /metrics unless it only drains."""
    from bot.admin.wiring import start_admin
    from bot.events import utcnow
    from bot.ops.health import HealthServer, provider_check, redis_check
    from bot.ops.metrics import Metrics
    from bot.state import connect

    metrics = Metrics.from_settings(settings.metrics)
    redis = await connect.open_state(settings.state)
    health: HealthServer | None = None
    admin: AdminServer | None = None
    try:
        worker, provider = _insights_worker(settings, redis, None, metrics)
        try:
            if drain:
                later = utcnow() + timedelta(seconds=worker.settings.insights_max_delay + 1)
                done = await worker.run_once(later)
                while done or worker.summarised:  # user analyses, then conversation summaries
                    done = await worker.run_once(later)
                return 0
            checks = {"redis": redis_check(redis), "llm": provider_check(provider)}
            health = HealthServer.from_settings(settings.health, metrics, checks)
            if health is not None:
                await health.start()
            admin = await start_admin(settings, redis, checks=checks, provider=provider)
            stop = asyncio.Event()
            on_stop_signals(stop)
            running = asyncio.create_task(worker.run(), name="insights")
            stopping = asyncio.create_task(stop.wait(), name="insights-stop")
            await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            await worker.aclose()
            await asyncio.gather(running, stopping, return_exceptions=True)
            return 0
        finally:
            if health is not None:
                await health.aclose()
            if admin is not None:
                await admin.aclose()
            await worker.aclose()
            await provider.aclose()
    finally:
        await redis.aclose()


def _replay(trace: str, settings: Settings, *, youtube_read: str | None = None) -> int:
    """``chorus replay TRACE.jsonl``: the policy, the engagement and YouTube quota settings and
    a scripted model on a trace; exits 1 unless ``ReplayReport.ok`` (nothing lost or answered
    twice, every send limit and YouTube's quota kept)."""
    from bot.engagement.replay import format_report, replay
    from bot.engagement.turns import replay_options
    from bot.settings import ConfigError

    try:
        report = replay(trace, **replay_options(settings, youtube_read))
    except (OSError, ConfigError) as exc:
        problem = f"cannot read {trace}: {exc.strerror}" if isinstance(exc, OSError) else exc
        print(f"chorus: {problem}", file=sys.stderr)
        return EXIT_CONFIG
    print(format_report(report))
    return 0 if report.ok else 1


def _history(directory: Path) -> Path | None:
    """The line history file, when its directory can be made."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return directory / "history"


def _default_user() -> str:
    try:
        return getpass.getuser() or "you"
    except (KeyError, OSError):
        return "you"


if __name__ == "__main__":
    raise SystemExit(main())
