"""Plugins: your own tools, chat commands and event hooks, in a Python module of your own.

This package is the plugin API, and ``bot.plugins`` is its stable import path::

    from bot.plugins import Permission, ToolContext, ToolError, command, tool

    @tool(permission=Permission.MODERATOR, timeout=5)
    async def slowmode(seconds: int) -> str:
        '''Set the channel's slow mode.'''

    @command
    async def roll(ctx: CommandContext) -> str:
        '''Roll dice: /roll 2d6'''

A module is loaded when it is named in ``CHORUS_PLUGINS`` (or the config file's ``plugins``)
or registered in the ``chorus.plugins`` entry-point group of an installed distribution.
``examples/plugins/chorus_dice`` is a complete one. Tools join the built-ins in the one
toolbox (permissions, timeouts, per-channel enabling, errors the model reads); commands are
``/name`` on every platform and native slash commands on Discord; hooks run before a turn and
after a reply (``runtime``). Loading (``loader``) skips, with a logged error, a plugin that
fails to import or register.

May import: the foundation, ``bot.llm`` and ``bot.tools``. The router and the composition
root import it.
"""

from __future__ import annotations

from bot.events import ChatMessage, Role
from bot.plugins.api import (
    CommandContext,
    Hook,
    Plugin,
    PluginCommand,
    after_reply,
    before_turn,
    command,
)
from bot.tools.base import Permission, Tool, ToolContext, ToolError
from bot.tools.function import FunctionTool, tool

__all__ = [
    "ChatMessage",
    "CommandContext",
    "FunctionTool",
    "Hook",
    "Permission",
    "Plugin",
    "PluginCommand",
    "Role",
    "Tool",
    "ToolContext",
    "ToolError",
    "after_reply",
    "before_turn",
    "command",
    "tool",
]
