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
from typing import TYPE_CHECKING

import prompts
from bot.cli_config import (
    describe_config,
    describe_scope,
    on_reload_signal,
    registered,
    reload_command,
)
from bot.events import utcnow
from bot.llm.base import Provider
from bot.onboarding import wizard
from bot.ops import aio
from bot.ops.aio import cancel_and_wait, on_stop_signals
from bot.ops.logs import setup_logging
from bot.platform.supervisor import Slot, State, Supervisor
from bot.settings import ConfigError, Settings, load_settings

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from bot.app import Chorus
    from bot.ops.metrics import MetricsSink
    from insights.worker import InsightsWorker

log = logging.getLogger("chorus.cli")

EXIT_CONFIG = 2
CONSOLE_FLUSH = 0.2  # seconds for the console to print the last answer after the drain


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chorus", description="Chorus: one AI agent, many chats.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run", help="start the bot on every configured platform (the console when none is)"
    )
    run.add_argument(
        "--role",
        choices=("all", "gateway", "worker"),
        default="all",
        help="all: everything in one process (default); gateway: the platform connections "
        "only; worker: the agent only (scale out with CHORUS_BUS=redis)",
    )
    chat = sub.add_parser("chat", help="chat in the terminal; pipe lines in to script it")
    chat.add_argument("--user", default=None, help="speak as this console user (default: $USER)")
    chat.add_argument("--json", action="store_true", help="write one JSON object per answer")
    insights = sub.add_parser(
        "insights", help="run the background insights worker as its own process"
    )
    insights.add_argument(
        "--drain",
        action="store_true",
        help="analyse every queued job now (ignoring the debounce) and exit",
    )
    replay = sub.add_parser(
        "replay", help="run a recorded or synthetic chat trace through the engagement policy"
    )
    replay.add_argument("trace", help="a JSONL trace (see bench/traces/busy_chat.jsonl)")
    replay.add_argument(
        "--youtube-read", choices=("stream", "poll"), help="default: YOUTUBE_READ_MODE"
    )
    config = sub.add_parser("config", help="show what is configured and what is missing")
    config.add_argument("--scope", help="every setting a message there gets, with its source")
    sub.add_parser("reload", help="re-read chorus.toml and .env in the running bot (SIGHUP)")
    init = sub.add_parser("init", help="set up a model, platforms and a persona: writes .env")
    wizard.add_arguments(init)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "init":  # before the settings: it may be replacing a broken .env
        return wizard.run(args)
    try:
        settings = load_settings(warn=False)  # warnings once logging is set up
    except ConfigError as exc:
        print(f"chorus: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    setup_logging(settings.logging.level, settings.logging.format, settings.secret_values())
    settings.log_warnings()
    try:
        from bot.router.scoping import personas, prompt_overrides

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
    if args.command == "replay":
        return _replay(args.trace, settings, youtube_read=args.youtube_read)
    try:
        settings.llm.model_spec()
        if args.command == "run":
            return aio.run(_run(settings, role=args.role))
        if args.command == "insights":
            return aio.run(_insights(settings, drain=args.drain))
        return aio.run(_chat(settings, user=args.user, json_output=args.json))
    except ConfigError as exc:
        print(f"chorus: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return 130


async def _run(settings: Settings, *, role: str = "all") -> int:
    from adapters.registry import build_slots, configured_platforms
    from bot.app import Chorus

    if role == "all" and not configured_platforms(settings):
        log.info("no platform credentials configured; starting the console adapter")
        return await _chat(settings, user=None, json_output=False, health=True)
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
    if role == "gateway":
        async with app.bus_only(), registered(settings):
            return await _serve(supervisor)
    async with app, _insights_in_process(app), registered(settings):
        return await _serve(supervisor, app)


def _watch(app: Chorus, slots: Sequence[Slot]) -> None:
    """Scrape-time gauges: the bus's lag and pending counts, each supervised adapter's state
    and restarts, and the adapters' own counters (read from whichever adapter runs now)."""
    from adapters.registry import adapter_gauges, configured_platforms
    from bot.bus.gauges import bus_gauges, outbox_gauges
    from bot.bus.topics import DELETIONS, INBOUND, outbound_topic

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
    for slot in slots:
        for name, help_text, labels, read, kind in adapter_gauges(slot):
            app.metrics.register_gauge_callback(name, help_text, labels, read, kind=kind)


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


async def _chat(
    settings: Settings, *, user: str | None, json_output: bool, health: bool = False
) -> int:
    """The console. ``health``: also serve /healthz, /readyz and /metrics, as ``chorus run``
    does with any platform (``chorus chat`` is a tool, ``chorus run`` a deployment)."""
    from adapters.console import ConsoleAdapter, FdLineReader
    from bot.app import Chorus

    app = await Chorus.from_settings(settings)
    if health:
        await app.start_health()
    async with app, _insights_in_process(app), registered(settings):
        adapter = ConsoleAdapter(
            app.bus,
            stdin=FdLineReader(sys.stdin.fileno()),
            stdout=sys.stdout,
            user=user or _default_user(),
            interactive=sys.stdin.isatty(),
            bot_name=settings.agent.bot_name,
            reply_timeout=settings.llm.llm_timeout * (settings.llm.llm_max_retries + 2) + 30,
            json_output=json_output,
        )
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
    redis: Redis,
    chat_provider: Provider | None,
    metrics: MetricsSink | None = None,
) -> tuple[InsightsWorker, Provider]:
    from bot.llm.registry import build_provider
    from bot.memory.buffers import MemoryStore
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
    )
    worker = InsightsWorker(
        redis, provider, spec.model, history, MemoryStore(redis, memory), memory, metrics=metrics
    )
    log.info("insights worker ready", extra={"model": str(spec)})
    return worker, provider


async def _insights(settings: Settings, *, drain: bool) -> int:
    """``chorus insights``: the worker alone (scale it separately from the chat workers), with
    its own /healthz, /readyz (Redis, the insights model) and /metrics unless it only drains."""
    from bot.ops.health import HealthServer, provider_check, redis_check
    from bot.ops.metrics import Metrics
    from bot.state import connect

    metrics = Metrics.from_settings(settings.metrics)
    redis = await connect.open_redis(settings.state.redis_url)
    health: HealthServer | None = None
    try:
        worker, provider = _insights_worker(settings, redis, None, metrics)
        try:
            if drain:
                later = utcnow() + timedelta(seconds=worker.settings.insights_max_delay + 1)
                done = await worker.run_once(later)
                while done:
                    done = await worker.run_once(later)
                return 0
            health = HealthServer.from_settings(
                settings.health,
                metrics,
                {"redis": redis_check(redis), "llm": provider_check(provider)},
            )
            if health is not None:
                await health.start()
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
            await worker.aclose()
            await provider.aclose()
    finally:
        await redis.aclose()


def _replay(trace: str, settings: Settings, *, youtube_read: str | None = None) -> int:
    """``chorus replay TRACE.jsonl``: the policy, the engagement and YouTube quota settings and
    a scripted model on a trace; exits 1 unless ``ReplayReport.ok`` (nothing lost or answered
    twice, every send limit and YouTube's quota kept)."""
    from bot.live.replay import format_report, replay
    from bot.live.turns import replay_options

    try:
        report = replay(trace, **replay_options(settings, youtube_read))
    except (OSError, ConfigError) as exc:
        problem = f"cannot read {trace}: {exc.strerror}" if isinstance(exc, OSError) else exc
        print(f"chorus: {problem}", file=sys.stderr)
        return EXIT_CONFIG
    print(format_report(report))
    return 0 if report.ok else 1


def _default_user() -> str:
    try:
        return getpass.getuser() or "you"
    except (KeyError, OSError):
        return "you"


if __name__ == "__main__":
    raise SystemExit(main())
