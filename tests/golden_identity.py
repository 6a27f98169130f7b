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
from bot.state import keys
from bot.state.history import HistoryStore

NOW = datetime(2025, 1, 2, 10, 4, tzinfo=UTC)
LAPSE = "(2 minutes pass)"


def _commands(redis: Redis, codes: list[str], person: str = "p1") -> Commands:
    history = HistoryStore(redis, max_messages=50, ttl_seconds=3600)
    memory = MemoryStore(redis, MemorySettings())
    commands = Commands(history)
    memory_commands.register(commands, memory, history, clock=lambda: NOW, insights_queue="g")
    people = People(memory, codes=itertools.cycle(codes).__next__, person_ids=lambda: person)
    link_commands.register(commands, memory, audit=None, people=people)
    return commands


async def _run(
    commands: Commands, said: list[tuple[str, str, str, bool]], redis: Redis | None = None
) -> str:
    """Each line said, and its answer; ``(time passes)`` lets the user's waiting link lapse."""
    replies = []
    for n, (platform, user, text, private) in enumerate(said):
        if text == LAPSE and redis is not None:
            await redis.delete(keys.link_confirm(platform, user))
            replies.append(f"> {platform} {user}: {text}")
            continue
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
    codes = ["K7M2PQ9X", "H4RT8WNE", "B3VY6ZCD", "Q8NW4RTA", "Q8NW4RTB", "T9QF2JXA"]
    commands = _commands(redis, codes)
    wrong = [("slack", "eve", "/link 22222222", False)] * 5
    return await _run(
        commands,
        [
            ("discord", "ada", "/help", True),
            ("discord", "ada", "/unlink", True),
            ("discord", "ada", "/link", True),  # K7M2PQ9X, private
            ("twitch", "ada", "/link", False),  # public: no code
            ("twitch", "ada", "/link abc", False),
            ("twitch", "ada", "/link confirm", False),  # nothing waits
            ("slack", "ada", "/link", True),  # H4RT8WNE
            ("twitch", "ada", "/link h4rt-8wne", False),
            ("twitch", "ada", LAPSE, False),
            ("twitch", "ada", "/link confirm", False),  # too late
            ("twitch", "ada", "/link K7M2PQ9X", False),
            ("twitch", "bo", "/link confirm", False),  # not the account that typed it
            ("twitch", "ada", "/link confirm", False),
            ("slack", "ada", "/link", True),  # B3VY6ZCD
            ("twitch", "ada", "/link B3VY6ZCD", False),
            ("twitch", "ada", "/link confirm", False),
            ("slack", "ada", "/link", True),  # Q8NW4RTA
            ("discord", "ada", "/link Q8NW4RTA", True),  # already one person
            ("slack", "bo", "/link", True),  # Q8NW4RTB
            ("slack", "cy", "/link Q8NW4RTB", True),
            ("discord", "cy", "/link", True),  # T9QF2JXA
            ("discord", "cy", "/link T9QF2JXA", True),
            *wrong,
            ("slack", "eve", "/link 33333333", False),
            ("discord", "ada", "/unlink", True),
        ],
        redis,
    )


async def forget_linked(redis: Redis) -> str:
    """``/forget`` on a linked account (its own part), ``/forget all`` and its confirmations."""
    commands = _commands(redis, ["K7M2PQ9X", "H4RT8WNE"], person="p2")
    return await _run(
        commands,
        [
            ("discord", "fl", "/remember I keep bees", True),
            ("twitch", "fl", "/remember I play chess", False),
            ("discord", "fl", "/link", True),  # K7M2PQ9X
            ("twitch", "fl", "/link K7M2PQ9X", False),
            ("twitch", "fl", "/link confirm", False),
            ("twitch", "fl", "/forget confirm", False),  # nothing asked
            ("twitch", "fl", "/forget all", False),
            ("twitch", "fl", "/forget confirm", False),  # the asker: waits for the others
            ("slack", "fl", "/link", True),  # H4RT8WNE: a third account joins meanwhile
            ("twitch", "fl", "/link H4RT8WNE", False),
            ("twitch", "fl", "/link confirm", False),
            ("discord", "fl", "/forget confirm", False),  # who agreed is not who is linked
            ("discord", "fl", "/forget", True),  # its own part only
            ("twitch", "fl", "/forget all", False),
            ("slack", "fl", "/forget confirm", True),
            ("twitch", "fl", "/pins", False),
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
    "command_forget_linked": forget_linked,
}
