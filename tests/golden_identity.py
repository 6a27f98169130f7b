"""The golden cases of ``/link``, ``/unlink`` and ``/forget <n>`` (``prompts/commands/link_*``,
``unlink_*``, ``forget_*``) and of the Discord slash options, registered as cases by
``tests/test_prompts_golden.py`` (``CASES``)."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from redis.asyncio import Redis

from bot.events import Author, ChatMessage, ConversationKey
from bot.memory.buffers import MemorySettings, MemoryStore
from bot.memory.people import People
from bot.router import link_commands, memory_commands
from bot.router.text_commands import Commands
from bot.state.history import HistoryStore

NOW = datetime(2025, 1, 2, 10, 4, tzinfo=UTC)


def _commands(redis: Redis, codes: list[str]) -> Commands:
    history = HistoryStore(redis, max_messages=50, ttl_seconds=3600)
    memory = MemoryStore(redis, MemorySettings())
    commands = Commands(history)
    memory_commands.register(commands, memory, history, clock=lambda: NOW, insights_queue="g")
    people = People(memory, codes=itertools.cycle(codes).__next__, person_ids=lambda: "p1")
    link_commands.register(commands, memory, audit=None, people=people)
    return commands


async def _run(commands: Commands, said: list[tuple[str, str, str, bool]]) -> str:
    replies = []
    for n, (platform, user, text, private) in enumerate(said):
        message = ChatMessage(
            platform=platform,
            id=f"m{n}",
            conversation=ConversationKey(platform=platform, channel="general"),
            author=Author(id=user, display_name=user.title()),
            text=text,
            private_reply=private,
            sent_at=NOW,
        )
        replies.append(f"> {platform} {user}: {text}\n{await commands.handle(message)}")
    return "\n\n".join(replies)


async def link_replies(redis: Redis) -> str:
    commands = _commands(redis, ["K7M2PQ9X", "H4RT8WNE", "B3VY6ZCD", "Q8NW4RTA", "T9QF2JXA"])
    wrong = [("slack", "eve", "/link 22222222", False)] * 5
    return await _run(
        commands,
        [
            ("discord", "ada", "/help", True),
            ("discord", "ada", "/unlink", True),
            ("discord", "ada", "/link", True),  # K7M2PQ9X, private
            ("twitch", "ada", "/link", False),  # public: no code
            ("twitch", "ada", "/link abc", False),
            ("slack", "ada", "/link", True),  # H4RT8WNE
            ("twitch", "ada", "/link h4rt-8wne", False),
            ("twitch", "ada", "/link K7M2PQ9X", False),
            ("slack", "ada", "/link", True),  # B3VY6ZCD
            ("discord", "ada", "/link B3VY6ZCD", True),
            ("slack", "bo", "/link", True),  # Q8NW4RTA
            ("slack", "cy", "/link Q8NW4RTA", True),
            ("discord", "cy", "/link", True),  # T9QF2JXA
            ("discord", "cy", "/link T9QF2JXA", True),
            *wrong,
            ("slack", "eve", "/link 33333333", False),
            ("discord", "ada", "/unlink", True),
        ],
    )


async def forget_one(redis: Redis) -> str:
    commands = _commands(redis, ["K7M2PQ9X"])
    return await _run(
        commands,
        [
            ("twitch", "fo", f"/{text}", False)
            for text in (
                "remember I am vegan",
                "remember Lives in Lyon",
                "forget 2",
                "forget 2",
                "forget 5",
                "forget two",
                "forget 1",
                "forget 1",
            )
        ],
    )


def slash_line(group: str, command: Any) -> str:
    """``/chorus forget [number]: ...`` and a line per option (its description)."""
    params = list(getattr(command, "parameters", []))
    head = f"/{group} {command.name}" + "".join(f" [{p.name}]" for p in params)
    lines = [f"{head}: {command.description}"]
    lines += [f"  [{p.name}]: {p.description}" for p in params]
    return "\n".join(lines)


CASES: dict[str, Callable[[Redis], Awaitable[str]]] = {
    "link_replies": link_replies,
    "command_forget_one": forget_one,
}
