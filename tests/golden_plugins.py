"""The golden case of what a plugin's command answers when it cannot (``prompts/plugins/*``),
rendered by the wrapper production runs every plugin command through. Registered as a case by
``tests/test_prompts_golden.py``."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from redis.asyncio import Redis

from bot.events import Author, ChatMessage, ConversationKey, Role
from bot.plugins import CommandContext, Permission, command
from bot.plugins.runtime import command_handler


def _message(roles: frozenset[Role] = frozenset()) -> ChatMessage:
    return ChatMessage(
        platform="discord",
        id="m1",
        conversation=ConversationKey(platform="discord", channel="general"),
        author=Author(id="u1", display_name="Ada", roles=roles),
        text="/x",
        sent_at=datetime(2025, 1, 2, 10, 4, 30, tzinfo=UTC),
    )


@command(permission=Permission.MODERATOR)
async def kick(ctx: CommandContext) -> str:
    """Kick someone."""
    return "kicked"


@command(permission=Permission.OWNER)
async def shutdown(ctx: CommandContext) -> str:
    """Stop the game."""
    return "stopped"


@command
async def broken(ctx: CommandContext) -> str:
    """Always fails."""
    raise RuntimeError("the dice fell off the table")


@command(timeout=0.01)
async def slow(ctx: CommandContext) -> str:
    """Never answers in time."""
    await asyncio.sleep(5)
    return "late"


@command
async def quiet(ctx: CommandContext) -> None:
    """Answers nothing."""


async def plugin_commands(redis: Redis) -> str:
    lines = []
    for cmd in (kick, shutdown, broken, slow, quiet):
        lines.append(f"/{cmd.name}: " + await command_handler(cmd)(_message(), ""))
    return "\n".join(lines)
