"""Starting the dashboard from a process's parts (``bot/app.py`` for ``chorus run`` and
``chorus chat``, ``bot/cli.py`` for ``chorus insights``), so the composition root stays short.

Why a module of its own: the dashboard's web stack (Jinja2) is imported only when
``CHORUS_ADMIN_PORT`` turns it on, so a deployment without it never loads it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from bot.engagement.turns import LiveChat
from bot.events import ModerationRequest
from bot.memory.buffers import MemoryStore
from bot.router.text_commands import Commands
from bot.safety.audit import Audit
from bot.settings import ConfigError, Settings
from bot.state.connect import Client
from bot.state.history import HistoryStore

if TYPE_CHECKING:
    from bot.admin.server import AdminServer


async def start_admin(
    settings: Settings,
    redis: Client,
    *,
    memory: MemoryStore | None = None,
    history: HistoryStore | None = None,
    audit: Audit | None = None,
    checks: Mapping[str, Callable[[], Awaitable[bool]]] | None = None,
    provider: object | None = None,
    commands: Commands | None = None,
    live: LiveChat | None = None,
    reload: Callable[[], None] | None = None,
    moderate: Callable[[ModerationRequest], Awaitable[None]] | None = None,
    plugins: object | None = None,
    chat: object | None = None,
) -> AdminServer | None:
    """The dashboard, started, when ``CHORUS_ADMIN_PORT`` is set (None otherwise). What a
    process lacks is built from Redis (memory, history, the audit trail, ``/forget``)."""
    if not settings.admin.enabled:
        return None
    try:
        from bot.admin.server import AdminServer
        from bot.admin.views import Sources
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in {"jinja2", "markupsafe"}:
            raise ConfigError(
                "CHORUS_ADMIN_PORT is set but the dashboard's templates need Jinja2; "
                "run: pip install 'chorus-bot[admin]'"
            ) from None
        raise
    memory = memory or MemoryStore(redis, settings.memory)
    if history is None:
        state = settings.state
        history = HistoryStore(
            redis, max_messages=state.history_max_messages, ttl_seconds=state.history_ttl_seconds
        )
    if commands is None:
        from bot.router import memory_commands

        commands = Commands(history)
        memory_commands.register(commands, memory, history)
    sources = Sources(
        settings=settings,
        redis=redis,
        memory=memory,
        history=history,
        audit=audit or Audit(redis, namespace=settings.state.bus_namespace),
        checks=dict(checks or {}),
        provider=provider,
        commands=commands,
        live=live,
        reload=reload,
        moderate=moderate,
        plugins=plugins,
        chat=chat,
    )
    server = AdminServer.from_settings(settings.admin, sources)
    if server is not None:
        await server.start()
    return server
