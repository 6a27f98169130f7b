"""``/forget``, ``/forget all`` and ``/forget confirm``: erasing what is kept about the speaker.

``/forget`` erases everything kept about the identity that says it -- its memory entries, the
summaries and community notes its lines fed (bot/memory/summaries.py), its lines in every
conversation it spoke in (tracked per user by ``MemoryStore.activity``), its pending insights
job, what plugins keep that is its own (``bot.state.plugin_store``: its ``user`` places and the
values and list entries written with it as owner), its entries in the audit trail
(``bot.safety.audit.forget_user``), and on the Redis Streams
bus its entries still held in the streams (``bot.bus.erasure``; the in-process bus keeps
nothing) -- and leaves a tombstone so an analysis already running cannot write its pins back.

On a linked identity it forgets that identity's part only and unlinks it (``People.leave``): the
entries that came from it leave the person's memory, and the other identities keep theirs, their
lines and their summaries. One account must not erase what another account said: a link says
two accounts share a memory, not that one of them may speak for the other. To forget every
linked identity, ``/forget all`` asks and each other identity answers ``/forget confirm`` within
2 minutes (bot/memory/shared_forget.py); the last confirmation forgets them all and ends the
person. ``/forget all`` on an identity that is not linked is ``/forget``.

Every sentence is ``prompts/commands/forget_*`` and ``count_*``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import prompts
from bot.bus.erasure import BusEraser
from bot.events import ChatMessage
from bot.memory import shared_forget, summaries
from bot.memory.buffers import MemoryStore, UserBuffer
from bot.memory.people import CONFIRM_SECONDS, Identity, People
from bot.memory.shared_forget import ForgetAll
from bot.router.link_commands import platform_name
from bot.safety.audit import Audit
from bot.safety.audit import forget_user as erase_audit
from bot.state.history import HistoryStore
from bot.state.outages import until_redis_answers
from bot.state.people import forgotten
from bot.state.plugin_store import RedisPluginStore
from bot.state.summaries import SummaryStore

Clock = Callable[[], datetime]


class Forgetting:
    """The three forms of ``/forget`` without a number, over one deployment's stores."""

    def __init__(
        self,
        memory: MemoryStore,
        history: HistoryStore,
        *,
        clock: Clock,
        queue: str,
        eraser: BusEraser | None,
        audit: Audit | None,
    ) -> None:
        self._memory = memory
        self._history = history
        self._clock = clock
        self._queue = queue
        self._eraser = eraser
        self._audit = audit
        self._people = People(memory)

    async def own(self, message: ChatMessage) -> str:
        """``/forget``: this identity's part; a linked one leaves its person."""
        me = (message.platform, message.author.id)
        removed, touched = await self._forget_lines(message, [me])
        split = await self._people.leave(*me)
        buffer = split.part if split is not None else await self._memory.load(*me)
        queued = await self._wipe(message, [me], person=None)
        done = self._done(buffer, removed, touched, queued)
        if split is None or not split.others:
            return done
        unlinked = prompts.render("commands/forget_unlinked", platforms=_names(split.others))
        return f"{done}\n{unlinked}"

    async def ask_all(self, message: ChatMessage) -> str:
        """``/forget all``: ask every other identity of the person to confirm."""
        others = await shared_forget.ask(self._people, message.platform, message.author.id)
        if others is None:
            return await self.own(message)
        minutes = CONFIRM_SECONDS // 60
        return prompts.render(
            "commands/forget_all_asked", platforms=_names(others), minutes=minutes
        )

    async def confirm_all(self, message: ChatMessage) -> str:
        """``/forget confirm``: this identity's yes; the last one forgets them all."""
        platform, user_id = message.platform, message.author.id
        person = await self._people.person(platform, user_id)
        outcome, who = await shared_forget.confirm(self._people, platform, user_id)
        minutes = CONFIRM_SECONDS // 60
        if outcome is ForgetAll.NOTHING:
            return prompts.render("commands/forget_all_none", minutes=minutes)
        if outcome is ForgetAll.CHANGED:
            return prompts.render("commands/forget_all_changed")
        if outcome is ForgetAll.WAITING:
            return prompts.render(
                "commands/forget_all_waiting", platforms=_names(who), minutes=minutes
            )
        me = (platform, user_id)
        identities = [me, *(i for i in who if i != me)]
        removed, touched = await self._forget_lines(message, identities)
        buffer = await self._memory.load(platform, user_id)
        queued = await self._wipe(message, identities, person=person)
        return self._done(buffer, removed, touched, queued)

    # -- the steps ------------------------------------------------------------------------------
    async def _forget_lines(
        self, message: ChatMessage, identities: list[Identity]
    ) -> tuple[int, int]:
        """The identities' history lines and the summaries they fed: (lines, conversations)."""
        removed = touched = 0
        for platform, who in identities:
            known = await self._memory.conversations(platform, who)
            asking = (platform, who) == (message.platform, message.author.id)
            convs = list(dict.fromkeys([*([message.conversation] if asking else []), *known]))
            for conv in convs:
                count = await self._history.forget_author(conv, who)
                removed += count
                touched += bool(count)
            await summaries.forget_user(SummaryStore(self._memory.redis), platform, who, convs)
        return removed, touched

    async def _wipe(
        self, message: ChatMessage, identities: list[Identity], *, person: str | None
    ) -> int | None:
        """Everything else of the identities (and ``person``, when it ends with them): memory,
        codes, names, insights jobs, plugins' data, audit entries, bus entries. The bus entries
        erased (None: the bus keeps none)."""
        store = self._memory.store
        gone = []
        now = self._clock()
        for platform, who in identities:
            await self._people.void_code(platform, who)
            asking = (platform, who) == (message.platform, message.author.id)
            called = [message.author.display_name] if asking else []
            names = [*await store.names_of(platform, who), *called]
            gone.append(forgotten((platform, who), now, names))
        await store.forget(gone, person=person, queue=self._queue)
        plugins = RedisPluginStore(store.redis)
        for platform, who in identities:
            await plugins.forget(platform, who)
        await self._erase_audit(identities)
        return await self._erase_queued(message, identities)  # last: a failure keeps the rest

    async def _erase_audit(self, identities: list[Identity]) -> None:
        """The identities' entries in the audit trail (after this process's writes in flight)."""
        audit = self._audit
        if audit is None or audit.redis is None:
            return
        await audit.flush()
        for platform, user_id in identities:
            await until_redis_answers(
                "erase a user's audit entries",
                lambda p=platform, u=user_id: erase_audit(  # type: ignore[misc]
                    self._memory.redis, p, u, namespace=audit.namespace
                ),
            )

    async def _erase_queued(self, message: ChatMessage, identities: list[Identity]) -> int | None:
        """The identities' entries still held by the bus, erased (None: the bus keeps none).
        Idempotent, so a Redis outage is waited out and the erasure retried."""
        eraser = self._eraser
        if eraser is None:
            return None
        total = 0
        for platform, user_id in identities:
            asking = (platform, user_id) == (message.platform, message.author.id)
            erased = await until_redis_answers(
                "erase a user's bus entries",
                lambda p=platform, u=user_id, a=asking: eraser.erase_user(  # type: ignore[misc]
                    p, u, request=message if a else None
                ),
            )
            total += erased.total
        return total

    def _done(self, buffer: UserBuffer, removed: int, touched: int, queued: int | None) -> str:
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


def _names(identities: list[Identity]) -> str:
    return ", ".join(sorted({platform_name(platform) for platform, _ in identities})) or "-"


def _count(n: int, one: str, other: str) -> str:
    """``n`` with its noun: prompt ``one`` for exactly one, ``other`` for any other count."""
    return prompts.render(one if n == 1 else other, count=n)
