"""Native slash commands: the ``/chorus`` group and the plugins' commands, mapped onto text.

Discord shows native commands in its command picker and lets the bot answer them privately
(ephemeral). The router already answers ``/help``, ``/pins``, ``/forget`` and ``/reset`` as
text, so each subcommand only forwards its name; the adapter publishes it as a ChatMessage and
answers the interaction with the Reply. Nothing about a command's behaviour lives here; the
descriptions Discord shows are ``prompts/discord/*``.

A plugin's command (``NativeCommand``) becomes a top-level ``/name`` with one optional ``text``
option, published as the text command ``/name <text>``: the same answer as typing it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import discord
from discord import app_commands

import prompts
from bot.platform.commands import NativeCommand

GROUP_NAME = "chorus"

# name -> the prompt holding the description shown in Discord's picker (at most 100 characters).
SUBCOMMANDS: dict[str, str] = {
    "help": "discord/command_help",
    "pins": "discord/command_pins",
    "forget": "discord/command_forget",
    "reset": "discord/command_reset",
}

OnCommand = Callable[[discord.Interaction, str], Awaitable[None]]


def build_group(on_command: OnCommand) -> app_commands.Group:
    """``/chorus help|pins|forget|reset``, each calling ``on_command(interaction, name)``."""
    group = app_commands.Group(name=GROUP_NAME, description=prompts.render("discord/group"))
    for name, prompt in SUBCOMMANDS.items():
        group.add_command(
            app_commands.Command(
                name=name,
                description=prompts.render(prompt),
                callback=_forward(on_command, name),
            )
        )
    return group


def _forward(
    on_command: OnCommand, name: str
) -> Callable[[discord.Interaction], Coroutine[Any, Any, None]]:
    async def callback(interaction: discord.Interaction) -> None:
        await on_command(interaction, name)

    return callback


def build_native(
    command: NativeCommand, on_command: OnCommand
) -> app_commands.Command[Any, ..., None]:
    """``/<name> [text]`` for a plugin's command: ``on_command(interaction, "<name> <text>")``."""
    name = command.name

    @app_commands.describe(text=prompts.render("discord/command_text"))
    async def callback(interaction: discord.Interaction, text: str = "") -> None:
        await on_command(interaction, f"{name} {text.strip()}".strip())

    return app_commands.Command(name=name, description=command.description, callback=callback)
