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

A plugin's own settings are a pydantic model marked ``@settings`` (``[plugins.NAME]`` in
``chorus.toml``, per scope ``[scope.plugins.NAME]``, secrets from the environment by
``secret("VARIABLE")``: ``config``), and it keeps data in ``ctx.store`` (``store``, over
``bot/state/plugin_store.py``); both reach handlers through their context (``context``).
docs/plugins.md is the author's guide.

May import: the foundation, ``bot.llm``, ``bot.tools``, ``bot.state`` (the store) and
``bot.ops`` (the log's masking). The router and the composition root import it.
"""

from __future__ import annotations

from bot.events import ChatMessage, ConversationKey, ModerationRequest, Role
from bot.plugins.api import (
    CommandContext,
    Hook,
    Plugin,
    PluginCommand,
    after_reply,
    before_turn,
    command,
)
from bot.plugins.config import secret, settings
from bot.plugins.events import (
    EventContext,
    EventHandler,
    on_member_join,
    on_member_leave,
    on_message,
    on_reaction,
    on_reply,
    on_screened,
    on_stream_event,
    on_stream_offline,
    on_stream_online,
)
from bot.plugins.reach import QuotaReached
from bot.plugins.store import Bucket, Item, PluginStore
from bot.plugins.timers import Timer, TimerContext, cron, every
from bot.state.plugin_store import Owner
from bot.tools.base import Permission, Tool, ToolContext, ToolError
from bot.tools.function import FunctionTool, tool

__all__ = [
    "Bucket",
    "ChatMessage",
    "ConversationKey",
    "CommandContext",
    "EventContext",
    "EventHandler",
    "FunctionTool",
    "Hook",
    "Item",
    "ModerationRequest",
    "Owner",
    "Permission",
    "Plugin",
    "PluginCommand",
    "QuotaReached",
    "PluginStore",
    "Role",
    "Tool",
    "Timer",
    "TimerContext",
    "ToolContext",
    "ToolError",
    "after_reply",
    "before_turn",
    "command",
    "cron",
    "every",
    "on_member_join",
    "on_member_leave",
    "on_message",
    "on_reaction",
    "on_reply",
    "on_screened",
    "on_stream_event",
    "on_stream_offline",
    "on_stream_online",
    "secret",
    "settings",
    "tool",
]
