"""Native slash commands: the ``/chorus`` group and the plugins' commands, mapped onto text.

Discord shows native commands in its command picker and lets the bot answer them privately
(ephemeral). The router already answers ``/help``, ``/pins``, ``/forget``, ``/reset``,
``/link`` and ``/unlink`` as text, so each subcommand only forwards its name (with its option:
``forget``'s optional ``number`` or ``linked`` choice -- ``all`` or ``confirm``, the two steps of
forgetting every linked account --, ``link``'s optional ``code``, which takes ``confirm`` too);
the adapter publishes it as a
ChatMessage and answers the interaction with the Reply. The answer being ephemeral is what lets
``/link`` show its one-time code privately. Nothing about a command's behaviour lives here; the
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
    "link": "discord/command_link",
    "unlink": "discord/command_unlink",
}

OnCommand = Callable[[discord.Interaction, str], Awaitable[None]]


def build_group(on_command: OnCommand) -> app_commands.Group:
    """``/chorus help|pins|forget [number|linked]|reset|link [code]|unlink``, each calling
    ``on_command(interaction, "<name>[ <option>]")``."""
    group = app_commands.Group(name=GROUP_NAME, description=prompts.render("discord/group"))
    for name, prompt in SUBCOMMANDS.items():
        callback = {"forget": _forget(on_command), "link": _link(on_command)}.get(name)
        group.add_command(
            app_commands.Command(
                name=name,
                description=prompts.render(prompt),
                callback=callback or _forward(on_command, name),
            )
        )
    return group


def _forget(on_command: OnCommand) -> Callable[..., Coroutine[Any, Any, None]]:
    @app_commands.describe(
        number=prompts.render("discord/command_forget_number"),
        linked=prompts.render("discord/command_forget_linked"),
    )
    @app_commands.choices(
        linked=[
            app_commands.Choice(
                name=prompts.render("discord/command_forget_linked_all"), value="all"
            ),
            app_commands.Choice(
                name=prompts.render("discord/command_forget_linked_confirm"), value="confirm"
            ),
        ]
    )
    async def callback(
        interaction: discord.Interaction,
        number: app_commands.Range[int, 1, 1000] | None = None,
        linked: app_commands.Choice[str] | None = None,
    ) -> None:
        if linked is not None:  # one step of /forget all; a number alongside is ignored
            await on_command(interaction, f"forget {linked.value}")
        else:
            await on_command(interaction, "forget" if number is None else f"forget {number}")

    return callback


def _link(on_command: OnCommand) -> Callable[..., Coroutine[Any, Any, None]]:
    @app_commands.describe(code=prompts.render("discord/command_link_code"))
    async def callback(interaction: discord.Interaction, code: str = "") -> None:
        await on_command(interaction, f"link {code.strip()}".strip())

    return callback


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
