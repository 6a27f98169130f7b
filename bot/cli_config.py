"""``chorus config`` and ``chorus reload``: what is configured, where each value came from, and
re-reading the configuration of a running bot.

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
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from bot.settings import (
    KEY_ENV,
    PROVIDERS,
    ConfigError,
    Settings,
    load_settings,
    restart_only_changes,
)
from bot.settings.scopes import DEFAULT_PERSONA, DEPLOYMENT, Resolved, parse_match, resolve
from bot.state.connect import mask_url

if TYPE_CHECKING:
    from bot.app import Chorus

log = logging.getLogger("chorus.cli")

# Not listed under "All settings": the loader's bookkeeping, and what the scope part shows.
HIDDEN = {"file": {"found", "given", "lines", "prompt_texts", "persona", "scopes"}}


# -- chorus config ---------------------------------------------------------------------------
def _mask(value: str | None) -> str:
    if not value:
        return "(not set)"
    return f"set, ****{value[-4:]}" if len(value) >= 12 else "set, ****"


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
        lines.append(f"  {provider:<16} {KEY_ENV[provider]}: {_mask(key)}; base URL: {base}")
    from adapters.registry import configured_platforms

    state, llm, log_settings = settings.state, settings.llm, settings.logging
    store = "embedded in-process store" if state.redis_url.startswith("memory") else "Redis server"
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


def describe_scope(settings: Settings, text: str) -> str:
    """``chorus config --scope discord:GUILD/CHANNEL``: what a message there gets, each value
    with where it came from (a scope's line, the deployment's source, or the default), then
    every setting of the deployment with its source. Raises ``ValueError`` for a bad scope."""
    where = parse_match(text)
    channel = where.channel or (where.server if where.platform not in ("discord", "slack") else "")
    resolved = resolve(settings.file.scopes, where.platform, where.server, channel or "")
    scopes = settings.file.scopes
    matching = [f"{scopes[i].match} ({settings.file.where(f'scope.{i}')})" for i in resolved.scopes]
    lines = [f"Scope {text}", f"  {'matching scopes':<36} {', '.join(matching) or '(none)'}"]
    for key, deployment in DEPLOYMENT.items():
        if key in resolved.values:
            index = resolved.origin[key]
            value: Any = resolved.values[key]
            origin = (
                f"{settings.file.where(f'scope.{index}.{key}')} [[scope]] {scopes[index].match}"
            )
        elif deployment is not None:
            section, name = deployment
            value, origin = getattr(getattr(settings, section), name), settings.origin(*deployment)
            if key == "model" and value is None:
                with contextlib.suppress(ConfigError):
                    value = f"{settings.llm.model_spec()} (inferred)"
        elif key == "persona":
            value = DEFAULT_PERSONA
            origin = (
                settings.file.where("persona") if "persona" in settings.file.lines else "default"
            )
        else:
            value = "(the platform's lists)" if key == "engagement.mode" else True
            origin = "default"
        lines.append(f"  {key:<36} {_shown(value):<28} {origin}")
    lines += _effective_safety(settings, where.platform, channel or where.server or "", resolved)
    lines += ["", "All settings (the environment > .env > chorus.toml > defaults)"]
    for section in type(settings).model_fields:
        part = getattr(settings, section)
        for name in type(part).model_fields:
            if name in HIDDEN.get(section, ()):
                continue
            value = getattr(part, name)
            shown = _mask(_plain(value)) if settings.is_secret(section, name) else _shown(value)
            lines.append(
                f"  {section + '.' + name:<36} {shown:<28} {settings.origin(section, name)}"
            )
    return "\n".join(lines)


def _effective_safety(
    settings: Settings, platform: str, channel: str, resolved: Resolved
) -> list[str]:
    """What the safety gate applies there: the deployment's rules with the scopes' changes."""
    from bot.events import ConversationKey
    from bot.safety.policy import Policies, describe

    policies = Policies(settings.safety, settings.quota)
    policy = policies.safety_for(
        ConversationKey(platform=platform, channel=channel or "-"),
        policies.scoped(resolved.values),
    )
    lines = ["Effective safety here (the scopes' keys above over the deployment's rules)"]
    lines += [
        f"  {name:<36} {value}" for name, value in describe(policy, model=settings.safety.model)
    ]
    return lines


def _plain(value: Any) -> str | None:
    secret = getattr(value, "get_secret_value", None)
    return secret() if secret is not None else (None if value is None else str(value))


def _shown(value: Any) -> str:
    if value is None:
        return "(not set)"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, frozenset | set | tuple | list):
        return ", ".join(sorted(str(item) for item in value)) or "(none)"
    if isinstance(value, dict):
        return ", ".join(sorted(str(key) for key in value)) or "(none)"
    text = str(value)
    return mask_url(text) if "://" in text else text


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
    the deployment's model, reasoning, tool lists and engagement thresholds); ``ConfigError``
    (file, line, key) leaves everything as it was. Returns the settings that changed but apply
    only after a restart."""
    from bot.engagement.turns import platform_overrides, policy_config
    from bot.router.scoping import ScopedEngagement

    engagement = settings.engagement  # checked before anything changes
    default, overrides = policy_config(engagement), platform_overrides(engagement)
    app.scoping.reload(settings)
    app.recall.reload(settings)  # knowledge bases: checked for changes now
    live = app.engagement
    if live is not None and isinstance(live.engagement, ScopedEngagement):
        live.engagement.refresh(default, overrides)
    return restart_only_changes(app.settings, settings)


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
