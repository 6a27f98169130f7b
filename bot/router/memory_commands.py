"""The memory commands: ``/pins``, ``/remember``, ``/forget`` and ``/timezone``.

Each acts on the speaker only: identity is the platform plus the author's platform user id,
so nobody can read or erase another person's memory by taking their display name. ``/forget``
erases everything kept about the speaker -- the buffer, the summaries and community notes their
lines fed, their lines in every conversation they spoke in (tracked per user by
``MemoryStore.queue_touch``), their pending insights job, and on
the Redis Streams bus their entries still held in the streams (``bot.bus.erasure``; the
in-process bus keeps nothing) -- and leaves a tombstone so an analysis already running cannot
write their pins back.

Every sentence they answer with is ``prompts/commands/*``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

import prompts
from bot.bus.erasure import BusEraser
from bot.events import ChatMessage, ConversationKey, utcnow
from bot.memory import insight_queue, recall
from bot.memory.buffers import PIN_TEXT_MAX, MemoryStore, UserBuffer, clean_text
from bot.memory.edit import Outcome, add_pin
from bot.router.text_commands import Command, Commands
from bot.state.history import HistoryStore
from bot.state.outages import until_redis_answers

Clock = Callable[[], datetime]

_CLEAR_WORDS = frozenset({"clear", "off", "none", "unset", "reset"})


def register(
    commands: Commands,
    memory: MemoryStore,
    history: HistoryStore,
    *,
    clock: Clock = utcnow,
    insights_queue: str = insight_queue.DEFAULT_QUEUE,
    eraser: BusEraser | None = None,
) -> None:
    """Add the memory commands to ``commands``; ``eraser`` reaches into a bus that keeps
    events after they are handled (``StreamEraser.for_bus``: None for the in-process bus)."""
    handlers = _Handlers(memory, history, clock, insights_queue, eraser)
    for name, summary, handler in (
        ("pins", "commands/summary_pins", handlers.pins),
        ("remember", "commands/summary_remember", handlers.remember),
        ("forget", "commands/summary_forget", handlers.forget),
        ("timezone", "commands/summary_timezone", handlers.timezone),
    ):
        commands.add(Command(name, prompts.render(summary), handler))


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
        self,
        memory: MemoryStore,
        history: HistoryStore,
        clock: Clock,
        queue: str,
        eraser: BusEraser | None,
    ) -> None:
        self._memory = memory
        self._history = history
        self._clock = clock
        self._queue = queue
        self._eraser = eraser

    async def pins(self, message: ChatMessage, args: str) -> str:
        buffer = await self._memory.load(message.platform, message.author.id)
        if buffer.is_empty:
            return prompts.render("commands/pins_empty")
        pins = [f"{n}. {pin.text}" for n, pin in enumerate(buffer.pins, 1)]
        recs = [
            f"- {rec.text}" + (f" (tool: {rec.tool})" if rec.tool else "")
            for rec in buffer.recommendations
        ]
        return prompts.render(
            "commands/pins",
            pins="\n".join(pins) or prompts.render("commands/pins_none"),
            recommendations=(
                prompts.render("commands/pins_recommendations", lines="\n".join(recs))
                if recs
                else ""
            ),
            timezone=(
                prompts.render("commands/pins_timezone", timezone=buffer.timezone)
                if buffer.timezone
                else ""
            ),
        )

    async def remember(self, message: ChatMessage, args: str) -> str:
        fact = clean_text(args)
        if not fact:
            return prompts.render("commands/remember_usage")
        if len(fact) > PIN_TEXT_MAX:
            return prompts.render(
                "commands/remember_too_long", length=len(fact), limit=PIN_TEXT_MAX
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
            return prompts.render("commands/remember_unchanged", fact=fact)
        if outcome == [Outcome.UPDATED]:
            return prompts.render("commands/remember_updated", fact=fact)
        return prompts.render("commands/remember_added", fact=fact)

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
        # Summaries and community notes their lines fed are dropped (bot/memory/recall.py).
        await recall.forget_user(self._memory.redis, platform, user_id, conversations)
        buffer = await self._memory.load(platform, user_id)
        async with self._memory.redis.pipeline(transaction=True) as pipe:
            self._memory.queue_forget(pipe, platform, user_id, now=self._clock())
            insight_queue.queue_cancel(pipe, platform, user_id, queue=self._queue)
            await pipe.execute()
        queued = await self._erase_queued(message)  # last: a failure here keeps the rest done
        parts = [
            _count(len(buffer.pins), "commands/count_note_one", "commands/count_note_other"),
            _count(
                len(buffer.recommendations),
                "commands/count_recommendation_one",
                "commands/count_recommendation_other",
            ),
        ]
        if buffer.timezone:
            parts.append(prompts.render("commands/forget_timezone"))
        messages = _count(removed, "commands/count_message_one", "commands/count_message_other")
        where = _count(
            touched, "commands/count_conversation_one", "commands/count_conversation_other"
        )
        parts.append(
            prompts.render("commands/forget_messages", messages=messages, conversations=where)
        )
        if queued is not None:
            parts.append(_count(queued, "commands/count_queued_one", "commands/count_queued_other"))
        return prompts.render("commands/forget_done", deleted=", ".join(parts))

    async def _erase_queued(self, message: ChatMessage) -> int | None:
        """The speaker's entries still held by the bus, erased (None: the bus keeps none).
        Idempotent, so a Redis outage is waited out and the erasure retried."""
        eraser = self._eraser
        if eraser is None:
            return None
        erased = await until_redis_answers(
            "erase a user's bus entries",
            lambda: eraser.erase_user(message.platform, message.author.id, request=message),
        )
        return erased.total

    async def timezone(self, message: ChatMessage, args: str) -> str:
        platform, user_id = message.platform, message.author.id
        wanted = args.strip()
        if not wanted:
            buffer = await self._memory.load(platform, user_id)
            if buffer.timezone:
                return prompts.render("commands/timezone_current", timezone=buffer.timezone)
            return prompts.render("commands/timezone_unset")
        if wanted.casefold() in _CLEAR_WORDS:
            await self._memory.update(
                platform, user_id, lambda b: b.model_copy(update={"timezone": None})
            )
            return prompts.render("commands/timezone_cleared")
        name = resolve_zone(wanted)
        if name is None:
            shown = clean_text(wanted)[:64]
            return prompts.render("commands/timezone_unknown", zone=repr(shown))
        await self._memory.update(
            platform, user_id, lambda b: b.model_copy(update={"timezone": name})
        )
        local = self._clock().astimezone(ZoneInfo(name))
        return prompts.render("commands/timezone_set", timezone=name, local_time=f"{local:%H:%M}")


def _unique(conversations: list[ConversationKey]) -> list[ConversationKey]:
    return list(dict.fromkeys(conversations))


def _count(n: int, one: str, other: str) -> str:
    """``n`` with its noun: prompt ``one`` for exactly one, ``other`` for any other count."""
    return prompts.render(one if n == 1 else other, count=n)
