"""A plugin that tries to end the process from every place a plugin's code runs at run time.

A tool, a command and both kinds of hook raise ``SystemExit`` (as ``sys.exit()`` does) or its
siblings ``KeyboardInterrupt`` and ``GeneratorExit``; the hooks only when the message or reply
says so, so the test chooses when. A bot that contains them keeps answering.
"""

from __future__ import annotations

import sys

from bot.plugins import ChatMessage, CommandContext, after_reply, before_turn, command, tool

HOOK_EXIT = "exit in the hook"
AFTER_EXIT = "exit after the reply"


@tool
async def shutdown() -> str:
    """Turns the bot off."""
    sys.exit(3)


@tool
async def unplug() -> str:
    """Pulls the bot's plug."""
    raise KeyboardInterrupt


@tool
async def close_generators() -> str:
    """Closes every generator."""
    raise GeneratorExit


@command
async def quit(ctx: CommandContext) -> str:
    """Ends the bot's process."""
    raise SystemExit("the plugin says goodbye")


@command
async def interrupt(ctx: CommandContext) -> str:
    """Presses Ctrl-C."""
    raise KeyboardInterrupt


@before_turn
async def leave_before(message: ChatMessage) -> str:
    if HOOK_EXIT in message.text:
        sys.exit(4)
    return ""


@after_reply
async def leave_after(message: ChatMessage, reply: str) -> None:
    if AFTER_EXIT in message.text:
        raise SystemExit(5)
