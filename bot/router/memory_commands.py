"""The memory commands: ``/pins``, ``/remember``, ``/forget`` and ``/timezone``.

Each acts on the speaker only: identity is the platform plus the author's platform user id,
so nobody can read or erase another person's memory by taking their display name. ``/forget``
erases everything kept about the speaker -- the buffer, their lines in every conversation they
spoke in (tracked per user by ``MemoryStore.queue_touch``), their pending insights job -- and
leaves a tombstone so an analysis already running cannot write their pins back.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from bot.events import ChatMessage, ConversationKey, utcnow
from bot.memory import insight_queue
from bot.memory.buffers import PIN_TEXT_MAX, MemoryStore, UserBuffer, clean_text
from bot.memory.edit import Outcome, add_pin
from bot.router.text_commands import Command, Commands
from bot.state.history import HistoryStore

Clock = Callable[[], datetime]

_CLEAR_WORDS = frozenset({"clear", "off", "none", "unset", "reset"})


def register(
    commands: Commands,
    memory: MemoryStore,
    history: HistoryStore,
    *,
    clock: Clock = utcnow,
    insights_queue: str = insight_queue.DEFAULT_QUEUE,
) -> None:
    """Add the memory commands to ``commands``."""
    handlers = _Handlers(memory, history, clock, insights_queue)
    commands.add(Command("pins", "show what I remember about you", handlers.pins))
    commands.add(
        Command("remember", "remember something about you: /remember <fact>", handlers.remember)
    )
    commands.add(Command("forget", "delete everything I store about you", handlers.forget))
    commands.add(
        Command("timezone", "set your timezone: /timezone Europe/Paris", handlers.timezone)
    )


def resolve_zone(text: str) -> str | None:
    """The canonical IANA name for ``text`` (case-insensitive), or None if there is none."""
    wanted = text.strip().replace(" ", "_")
    if not wanted:
        return None
    if wanted.upper() in {"UTC", "GMT", "Z"}:
        return "UTC"
    name = _zones().get(wanted.casefold())
    if name is None:
        return None
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None
    return name


@cache
def _zones() -> dict[str, str]:
    return {name.casefold(): name for name in available_timezones()}


class _Handlers:
    def __init__(
        self, memory: MemoryStore, history: HistoryStore, clock: Clock, queue: str
    ) -> None:
        self._memory = memory
        self._history = history
        self._clock = clock
        self._queue = queue

    async def pins(self, message: ChatMessage, args: str) -> str:
        buffer = await self._memory.load(message.platform, message.author.id)
        if buffer.is_empty:
            return (
                "I don't remember anything about you yet. Tell me something with /remember <fact>."
            )
        lines = ["What I remember about you:"]
        lines += [f"{n}. {pin.text}" for n, pin in enumerate(buffer.pins, 1)] or ["(no notes)"]
        if buffer.recommendations:
            lines.append("How I try to help you:")
            lines += [
                f"- {rec.text}" + (f" (tool: {rec.tool})" if rec.tool else "")
                for rec in buffer.recommendations
            ]
        if buffer.timezone:
            lines.append(f"Your timezone: {buffer.timezone}")
        lines.append("/remember <fact> adds a note; /forget deletes everything.")
        return "\n".join(lines)

    async def remember(self, message: ChatMessage, args: str) -> str:
        fact = clean_text(args)
        if not fact:
            return "Usage: /remember <fact>, for example /remember I prefer metric units"
        if len(fact) > PIN_TEXT_MAX:
            return (
                f"That note is {len(fact)} characters long; I keep notes of at most "
                f"{PIN_TEXT_MAX}. Please shorten it."
            )
        outcome: list[Outcome] = []

        def change(buffer: UserBuffer) -> UserBuffer:
            changed, result = add_pin(
                buffer,
                fact,
                source_message_id=message.id,
                confidence=1.0,
                now=self._clock(),
                max_pins=self._memory.settings.pins_max,
            )
            outcome[:] = [result]
            return changed

        await self._memory.update(message.platform, message.author.id, change)
        if outcome == [Outcome.UNCHANGED]:
            return f"I already remember that: {fact}"
        if outcome == [Outcome.UPDATED]:
            return f"Updated my note: {fact}"
        return f"Got it, I'll remember: {fact}"

    async def forget(self, message: ChatMessage, args: str) -> str:
        platform, user_id = message.platform, message.author.id
        conversations = _unique(
            [message.conversation, *await self._memory.conversations(platform, user_id)]
        )
        removed = 0
        touched = 0
        for conv in conversations:
            count = await self._history.forget_author(conv, user_id)
            removed += count
            touched += bool(count)
        buffer = await self._memory.load(platform, user_id)
        async with self._memory.redis.pipeline(transaction=True) as pipe:
            self._memory.queue_forget(pipe, platform, user_id, now=self._clock())
            insight_queue.queue_cancel(pipe, platform, user_id, queue=self._queue)
            await pipe.execute()
        parts = [
            _count(len(buffer.pins), "note"),
            _count(len(buffer.recommendations), "recommendation"),
        ]
        if buffer.timezone:
            parts.append("your timezone")
        parts.append(f"{_count(removed, 'message')} you wrote in {_count(touched, 'conversation')}")
        return "Done: I deleted everything I stored about you (" + ", ".join(parts) + ")."

    async def timezone(self, message: ChatMessage, args: str) -> str:
        platform, user_id = message.platform, message.author.id
        wanted = args.strip()
        if not wanted:
            buffer = await self._memory.load(platform, user_id)
            current = (
                f"Your timezone is {buffer.timezone}."
                if buffer.timezone
                else ("I don't know your timezone.")
            )
            return f"{current} Set it with /timezone <IANA zone>, e.g. /timezone Europe/Paris."
        if wanted.casefold() in _CLEAR_WORDS:
            await self._memory.update(
                platform, user_id, lambda b: b.model_copy(update={"timezone": None})
            )
            return "Done: I no longer keep your timezone."
        name = resolve_zone(wanted)
        if name is None:
            shown = clean_text(wanted)[:64]
            return (
                f"I don't know the timezone {shown!r}. Use an IANA name such as "
                "Europe/Paris, America/New_York or Asia/Tokyo."
            )
        await self._memory.update(
            platform, user_id, lambda b: b.model_copy(update={"timezone": name})
        )
        local = self._clock().astimezone(ZoneInfo(name))
        return f"Your timezone is now {name} (local time {local:%H:%M})."


def _unique(conversations: list[ConversationKey]) -> list[ConversationKey]:
    return list(dict.fromkeys(conversations))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")
