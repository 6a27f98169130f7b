"""The memory commands: ``/pins``, ``/remember``, ``/forget`` and ``/timezone``.

Each acts on the speaker only: identity is the platform plus the author's platform user id,
so nobody can read or erase another person's memory by taking their display name (an identity
linked with ``/link`` shares one memory with its person's other identities: bot/memory/people.py).
``/forget`` without a number erases what is kept about the speaker, and ``/forget all`` and
``/forget confirm`` a whole linked person (bot/router/forget_commands.py).

``/pins`` numbers the entries (pins, then recommendations) and keeps the fingerprints of what
it showed for an hour (``keys.user(..., "pinsview")``); ``/forget <n>`` deletes the entry shown
as ``n`` by its fingerprint, so an insights write landing in between can never make it delete
another entry: if that entry changed or went, the user is told and shown the list again.

Every sentence they answer with is ``prompts/commands/*``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

import prompts
from bot.bus.erasure import BusEraser
from bot.events import ChatMessage, utcnow
from bot.memory.buffers import PIN_TEXT_MAX, MemoryStore, UserBuffer, clean_text
from bot.memory.edit import Outcome, add_pin, entry_print, numbered, remove_entry
from bot.router.forget_commands import Forgetting
from bot.router.text_commands import Command, Commands
from bot.safety.audit import Audit
from bot.state import insight_jobs
from bot.state.history import HistoryStore

Clock = Callable[[], datetime]

_CLEAR_WORDS = frozenset({"clear", "off", "none", "unset", "reset"})
PINS_VIEW_SECONDS = 3600


def register(
    commands: Commands,
    memory: MemoryStore,
    history: HistoryStore,
    *,
    clock: Clock = utcnow,
    insights_queue: str = insight_jobs.DEFAULT_QUEUE,
    eraser: BusEraser | None = None,
    audit: Audit | None = None,
) -> None:
    """Add the memory commands to ``commands``; ``eraser`` reaches into a bus that keeps
    events after they are handled (``StreamEraser.for_bus``: None for the in-process bus);
    ``/forget`` deletes the speaker's entries from ``audit``'s trail."""
    handlers = _Handlers(memory, history, clock, insights_queue, eraser, audit)
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
        audit: Audit | None,
    ) -> None:
        self._memory = memory
        self._clock = clock
        self._forgetting = Forgetting(
            memory, history, clock=clock, queue=queue, eraser=eraser, audit=audit
        )

    async def pins(self, message: ChatMessage, args: str) -> str:
        buffer = await self._memory.load(message.platform, message.author.id)
        return await self._show(message, buffer)

    async def _show(self, message: ChatMessage, buffer: UserBuffer) -> str:
        """The numbered list, remembering which entry each number named (for ``/forget <n>``)."""
        platform, user_id = message.platform, message.author.id
        if buffer.is_empty:
            await self._memory.store.keep_pins_view(platform, user_id, "", PINS_VIEW_SECONDS)
            return prompts.render("commands/pins_empty")
        entries = numbered(buffer)
        prints = " ".join(entry_print(entry) for entry in entries)
        await self._memory.store.keep_pins_view(platform, user_id, prints or "-", PINS_VIEW_SECONDS)
        pins = [f"{n}. {pin.text}" for n, pin in enumerate(buffer.pins, 1)]
        recs = [
            f"{n}. {rec.text}" + (f" (tool: {rec.tool})" if rec.tool else "")
            for n, rec in enumerate(buffer.recommendations, len(pins) + 1)
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
        word = args.strip().casefold()
        if word == "all":
            return await self._forgetting.ask_all(message)
        if word == "confirm":
            return await self._forgetting.confirm_all(message)
        if word:
            return await self._forget_one(message, args.strip())
        return await self._forgetting.own(message)

    async def _forget_one(self, message: ChatMessage, args: str) -> str:
        """``/forget <n>``: the entry ``/pins`` showed as ``n``, found again by fingerprint."""
        platform, user_id = message.platform, message.author.id
        if not args.isdigit() or int(args) < 1:
            return prompts.render("commands/forget_usage")
        number = int(args)
        shown = await self._memory.store.pins_view(platform, user_id)
        prints = [p for p in str(shown or "").split() if p != "-"]
        if not shown or number > len(prints):
            buffer = await self._memory.load(platform, user_id)
            listing = await self._show(message, buffer)
            reason = "commands/forget_no_list" if not shown else "commands/forget_no_such"
            return prompts.render(reason, number=number) + "\n\n" + listing
        wanted = prints[number - 1]
        gone: list[str] = []

        def change(buffer: UserBuffer) -> UserBuffer | None:
            entry = next((e for e in numbered(buffer) if entry_print(e) == wanted), None)
            kept = remove_entry(buffer, wanted)
            gone[:] = [entry.text] if entry is not None and kept is not None else []
            return kept

        stored = await self._memory.update(platform, user_id, change)
        if not gone:
            listing = await self._show(
                message, stored or UserBuffer(platform=platform, user_id=user_id)
            )
            return prompts.render("commands/forget_changed", number=number) + "\n\n" + listing
        return prompts.render("commands/forget_one_done", number=number, text=gone[0])

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
