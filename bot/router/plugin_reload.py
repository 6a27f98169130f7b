"""``chorus reload`` for the plugins of one running process: reload what changed
(``bot.plugins.reload``), then swap each replaced plugin's commands, tools, hooks, event
handlers and timers for the new version's, and log what happened to each.

The swap is synchronous (a reload runs in the SIGHUP handler) but for the timers, whose old
schedules are stopped by a task kept here. A command's new handler answers from the next
message on; a turn already running finishes with the tools it started with. Discord's native
slash-command list is synced once at start: a command a reload adds or removes shows there
after a restart (typed ``/name`` works at once).
"""

from __future__ import annotations

import asyncio
import logging

from bot.plugins.loader import LoadedPlugins
from bot.plugins.reload import Reloaded, reload_plugins
from bot.plugins.runtime import TurnHooks, command_handler
from bot.plugins.timers import PluginTimers
from bot.router.text_commands import Command, Commands
from bot.settings import Settings
from bot.tools.toolbox import Toolbox

log = logging.getLogger("chorus.plugins")

_swaps: set[asyncio.Task[None]] = set()  # the timers' swaps in flight (kept, not orphaned)


def reload_and_swap(
    settings: Settings,
    *,
    plugins: LoadedPlugins,
    commands: Commands,
    tools: Toolbox,
    hooks: TurnHooks,
    timers: PluginTimers,
) -> Reloaded:
    plugin_tools = {t.spec.name for t in plugins.tools}
    plugin_commands = {c.name for c in plugins.commands}
    reloaded = reload_plugins(
        plugins,
        settings.file,
        settings.variable,
        reserved_tools=set(tools.names) - plugin_tools,
        reserved_commands=(set(commands.names()) - plugin_commands) | {"chorus"},
    )
    for old, new in reloaded.swapped:
        for command in old.commands:
            commands.remove(command.name)
        for command in new.commands:
            handler = command_handler(command, new.services)
            commands.add(Command(command.name, command.summary, handler))
        tools.replace([t.spec.name for t in old.tools], new.tools)
        log.info("plugin reloaded", extra={"plugin": new.name, "adds": new.describe()})
    if reloaded.swapped:
        hooks.replace(plugins.hooks)
        hooks.events.replace(plugins.subscribers())
        names = {new.name for _, new in reloaded.swapped}
        task = asyncio.get_running_loop().create_task(
            timers.replace(names, plugins.scheduled()), name="plugin-timers-swap"
        )
        _swaps.add(task)
        task.add_done_callback(_swaps.discard)
    for name in reloaded.reconfigured:
        log.info("plugin settings reloaded", extra={"plugin": name})
    for name, why in reloaded.failed.items():
        log.error(
            "plugin reload failed; the previous version stays", extra={"plugin": name, "error": why}
        )
    return reloaded
