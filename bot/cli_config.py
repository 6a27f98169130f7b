"""``chorus config``, ``chorus reload`` and ``chorus twitch join/leave``: what is configured, where
each value came from, re-reading the configuration of a running bot, and the Twitch channels it
reads changed without a restart (conduit transport: the joined and left channels in the state
store, which the gateways follow; ``bot.state.conduits``).

Apart from ``bot/cli.py`` (the composition root) because these are about showing and swapping
the configuration, not about wiring the runtime; both are part of the composition root.

How ``chorus reload`` finds the running bot: every ``chorus run`` and ``chorus chat`` writes
its pid to ``CHORUS_RUN_DIR`` (``.chorus/run/<pid>.pid`` under its working directory) and
removes it when it stops. ``chorus reload``, run from the same directory, first loads the
configuration itself (a broken file is refused right there, with its file, line and key, and
nobody is signalled), then sends SIGHUP to every live process listed (a gateway and workers on
one machine each get one); a file whose process is gone, or (where ``/proc`` tells) is not a
Chorus process any more, is removed instead. SIGHUP itself (``kill -HUP``, ``systemctl reload``)
works without the pid files. The process re-reads the file and ``.env`` and logs what it did.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from bot.router.scope_text import mask_secret
from bot.settings import (
    KEY_ENV,
    PROVIDERS,
    ConfigError,
    Settings,
    load_settings,
    restart_only_changes,
)

if TYPE_CHECKING:
    from bot.app import Chorus

log = logging.getLogger("chorus.cli")


# -- chorus config ---------------------------------------------------------------------------
def _mask_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        netloc = f"{parts.username or ''}:****@{parts.hostname or ''}"
        if parts.port:
            netloc += f":{parts.port}"
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def describe_config(settings: Settings) -> str:
    """A human summary of the settings: values, masked secrets, and what is missing."""
    lines = ["Chorus configuration", ""]
    try:
        spec = settings.llm.model_spec()
        lines.append(
            f"  model            {spec}  (CHORUS_MODEL{'' if settings.llm.model else ', inferred'})"
        )
        problem = None
    except ConfigError as exc:
        lines.append("  model            MISSING")
        problem = str(exc)
    for provider in PROVIDERS:
        key = settings.llm.api_key(provider)
        base = settings.llm.base_url(provider) or "(vendor default)"
        lines.append(f"  {provider:<16} {KEY_ENV[provider]}: {mask_secret(key)}; base URL: {base}")
    from adapters.registry import configured_platforms

    state, llm, log_settings = settings.state, settings.llm, settings.logging
    store = "embedded in-process store" if state.is_embedded() else "Redis server"
    if state.redis_url.startswith("embedded"):
        store += f", kept in {state.state_path()}"
    elif state.is_embedded():
        store += ", forgotten at exit"
    lines.append(f"  state            {_mask_url(state.redis_url)}  ({store})")
    lines.append(
        f"  history          last {state.history_max_messages} messages, "
        f"kept {state.history_ttl_seconds}s after the last activity"
    )
    lines.append(
        f"  llm calls        timeout {llm.llm_timeout:g}s, up to {llm.llm_max_retries} retries"
    )
    if settings.fallback.models.strip():
        lines.append(f"  fallbacks        {settings.fallback.models.strip()}")
    platforms = configured_platforms(settings)
    lines.append(
        f"  platforms        {', '.join(platforms)}"
        if platforms
        else "  platforms        console (no platform credentials configured)"
    )
    lines.append(f"  logging          {log_settings.level} as {log_settings.format} on stderr")
    file = settings.file
    if file.found is not None:
        lines.append(
            f"  config file      {file.found}: {len(file.personas)} named personas, "
            f"{len(file.scopes)} scopes, {len(file.prompt_texts)} prompt overrides"
        )
    if settings.warnings:
        lines += ["", "Warnings:", *("  " + line for line in settings.warnings)]
    if problem:
        lines += ["", "Missing:", *("  " + line for line in problem.splitlines())]
    return "\n".join(lines)


# -- chorus reload ---------------------------------------------------------------------------
def _pid_files(run_dir: Path) -> list[Path]:
    return sorted(run_dir.glob("*.pid")) if run_dir.is_dir() else []


def _is_chorus(pid: int) -> bool:
    """Alive, and (where /proc says) still a Chorus process, not a recycled pid."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # someone else's process now
    if not Path("/proc/self/cmdline").exists():
        return True  # no /proc (macOS): alive is all we can tell
    try:
        text = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"chorus" in text or b"bot.cli" in text


@contextlib.asynccontextmanager
async def registered(settings: Settings) -> AsyncIterator[None]:
    """This process's pid file in ``CHORUS_RUN_DIR`` while it runs (best effort: a directory
    that cannot be written is logged, and SIGHUP still works)."""
    path = settings.file.run_dir / f"{os.getpid()}.pid"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{os.getpid()}\n", encoding="utf-8")
    except OSError as exc:
        log.warning(
            "cannot write the pid file; chorus reload will not find this process",
            extra={"path": str(path), "error": str(exc)},
        )
        yield
        return
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def reload_command(settings: Settings) -> int:
    """``chorus reload``: the configuration was loaded (so it is valid); signal each bot."""
    signalled = []
    for path in _pid_files(settings.file.run_dir):
        try:
            pid = int(path.read_text(encoding="utf-8").strip())
        except (OSError, ValueError):
            continue
        if not _is_chorus(pid):
            path.unlink(missing_ok=True)
            continue
        os.kill(pid, signal.SIGHUP)
        signalled.append(str(pid))
    if not signalled:
        where = settings.file.run_dir.absolute()
        print(
            f"chorus: no running chorus found in {where} (CHORUS_RUN_DIR); is it running "
            "from this directory? `kill -HUP PID` reloads any",
            flush=True,
        )
        return 1
    print(
        f"configuration is valid; sent SIGHUP to {', '.join(signalled)} (each logs "
        '"configuration reloaded" or why it refused)'
    )
    return 0


def apply_reload(app: Chorus, settings: Settings) -> list[str]:
    """Apply what a reload may change without a restart (personas, scopes, prompt overrides,
    the deployment's model, reasoning, tool lists and engagement thresholds, and the plugins
    whose file or settings changed: bot/router/plugin_reload.py); ``ConfigError``
    (file, line, key) leaves everything as it was. Returns the settings that changed but apply
    only after a restart."""
    from bot.engagement.turns import platform_overrides, policy_config
    from bot.router.plugin_reload import reload_and_swap
    from bot.router.scoping import ScopedEngagement

    engagement = settings.engagement  # checked before anything changes
    default, overrides = policy_config(engagement), platform_overrides(engagement)
    app.scoping.reload(settings)
    app.recall.reload(settings)  # knowledge bases: checked for changes now
    reload_and_swap(  # plugins whose file or settings changed; a failing one keeps its version
        settings,
        plugins=app.plugins,
        commands=app.commands,
        tools=app.tools,
        hooks=app.hooks,
        timers=app.timers,
    )
    live = app.engagement
    if live is not None and isinstance(live.engagement, ScopedEngagement):
        live.engagement.refresh(default, overrides)
    return restart_only_changes(app.settings, settings)


RELOAD_POLL_SECONDS = 1.0  # how often each process looks for the dashboard's reloads


def on_reload_signal(app: Chorus, load: Callable[[], Settings] | None = None) -> None:
    """SIGHUP: re-read ``.env`` and the file, and apply what applies without a restart."""

    def reload() -> None:
        try:
            settings = load() if load is not None else load_settings(warn=False)
            later = apply_reload(app, settings)
        except ConfigError as exc:
            log.error(
                "configuration reload refused; the running configuration stays",
                extra={"error": str(exc)},
            )
            return
        except Exception:
            log.exception("configuration reload failed; the running configuration stays")
            return
        settings.log_warnings()
        file = settings.file
        log.info(
            "configuration reloaded",
            extra={
                "file": str(file.found) if file.found else "(none)",
                "personas": len(file.personas),
                "scopes": len(file.scopes),
                "prompt_overrides": len(file.prompt_texts),
            },
        )
        if later:
            log.warning(
                "changed settings that apply only after a restart",
                extra={"settings": ",".join(later)},
            )

    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reload)
    app.reload_config = reload  # the admin dashboard's reload button
    if app.reload_watch is None:
        app.reload_watch = asyncio.create_task(follow_reloads(app, reload), name="reloads")


async def follow_reloads(app: Chorus, reload: Callable[[], None]) -> None:
    """Reload whenever the dashboard asked every process to (bot/state/config_reloads.py):
    one read a second; a Redis hiccup is logged once and retried."""
    from bot.state.config_reloads import ConfigReloads

    reloads = ConfigReloads(app.redis)
    seen: int | None = None
    failing = False
    while True:
        try:
            count = await reloads.count()
        except Exception as exc:  # Redis away: the running configuration stays
            if not failing:
                log.warning("cannot read the dashboard's reloads", extra={"error": str(exc)})
            failing = True
        else:
            failing = False
            # A count this process's dashboard asked for was reloaded here at once already.
            asked_here = count == (seen or 0) + 1 and reloads.asked_here(count)
            if seen is not None and count != seen and not asked_here:
                reload()
            seen = count
        await asyncio.sleep(RELOAD_POLL_SECONDS)


def twitch_command(settings: Settings, action: str, name: str) -> int:
    """``chorus twitch join NAME`` / ``chorus twitch leave NAME``: change the channels the running
    gateways read (``TWITCH_TRANSPORT=conduit``; they follow within a third of a shard lease)."""
    from bot.state.conduits import normal_channel

    twitch = settings.twitch
    problem = ""
    if not twitch.configured:
        problem = "Twitch is not configured (TWITCH_CLIENT_ID is not set)"
    elif twitch.transport != "conduit":
        problem = (
            "channels change at run time only with TWITCH_TRANSPORT=conduit; with the websocket "
            "transport edit TWITCH_CHANNELS and restart"
        )
    elif settings.state.redis_url.startswith("memory://"):
        problem = (
            "the joined channels are kept in Redis, which this deployment does not use "
            "(CHORUS_REDIS_URL=memory://); set CHORUS_REDIS_URL=redis://... as the bot has it"
        )
    try:
        channel = "" if problem else normal_channel(name)
    except ValueError as exc:
        problem = str(exc)
    if problem:
        print(f"chorus: twitch {action}: {problem}", file=sys.stderr)
        return 2
    asyncio.run(_twitch_channel(settings, action, channel))
    done = "joined" if action == "join" else "left"
    print(
        f"#{channel} {done}: the gateways follow within "
        f"{twitch.shard_lease_seconds / 3:.0f} s (no restart)"
    )
    return 0


async def _twitch_channel(settings: Settings, action: str, channel: str) -> None:
    from bot.state.conduits import RedisConduitStore
    from bot.state.connect import open_redis

    redis = await open_redis(settings.state.redis_url)
    try:
        store = RedisConduitStore(redis)
        app = (settings.twitch.client_id or "").strip()
        if action == "join":
            await store.join_channel(app, channel)
        else:
            await store.leave_channel(app, channel)
    finally:
        await redis.aclose()
