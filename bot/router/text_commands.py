"""Text commands (``/help``, ``/reset``) answered without calling the model.

Commands are parsed from the message text so every platform gets them for free; native slash
commands of Discord and Slack map onto the same handlers. Where the chat client keeps ``/`` for
its own commands (Twitch's and YouTube's web chat), people address the bot instead:
``@chorus /pins`` is ``/pins`` (``command_text``). A command never reaches the LLM.
Summaries and replies are ``prompts/commands/*``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import prompts
from bot.events import ChatMessage
from bot.settings.scopes import LIVE_PLATFORMS
from bot.state.history import HistoryStore

Handler = Callable[[ChatMessage, str], Awaitable[str]]


@dataclass(frozen=True)
class Command:
    name: str
    summary: str
    handler: Handler


def parse(text: str) -> tuple[str, str] | None:
    """``"/reset now"`` -> ``("reset", "now")``; anything not starting with ``/`` -> None."""
    stripped = text.strip()
    if not stripped.startswith("/") or len(stripped) < 2 or stripped[1].isspace():
        return None
    name, _, args = stripped[1:].partition(" ")
    return name.lower(), args.strip()


def command_text(message: ChatMessage) -> str:
    """The text a command is parsed from: on the live platforms, a leading ``@mention`` of the
    bot is skipped (elsewhere the adapter removes the bot's mention itself, and a leading
    ``@someone`` is not the bot)."""
    text = message.text.strip()
    if message.platform in LIVE_PLATFORMS and message.mentions_bot and text.startswith("@"):
        rest = text.partition(" ")[2].lstrip()
        if rest.startswith("/"):
            return rest
    return text


class Commands:
    """The command table of one deployment."""

    def __init__(self, history: HistoryStore) -> None:
        self._history = history
        self._table: dict[str, Command] = {}
        self.add(Command("help", prompts.render("commands/summary_help"), self._help))
        self.add(Command("reset", prompts.render("commands/summary_reset"), self._reset))

    def add(self, command: Command) -> None:
        self._table[command.name] = command

    def remove(self, name: str) -> None:
        """Take a command out (a plugin's reload); an unknown name is no error."""
        self._table.pop(name, None)

    def names(self) -> list[str]:
        return sorted(self._table)

    async def handle(self, message: ChatMessage) -> str | None:
        """The command's answer, or None when the message is not a known command."""
        parsed = parse(command_text(message))
        if parsed is None:
            return None
        name, args = parsed
        command = self._table.get(name)
        if command is None:
            return None
        return await command.handler(message, args)

    async def _help(self, message: ChatMessage, args: str) -> str:
        lines = [
            f"/{c.name} - {c.summary}" for c in sorted(self._table.values(), key=lambda c: c.name)
        ]
        return prompts.render("commands/help", commands="\n".join(lines))

    async def _reset(self, message: ChatMessage, args: str) -> str:
        await self._history.clear(message.conversation)
        return prompts.render("commands/reset_done")
