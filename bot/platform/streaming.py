"""Streamed answers, gateway side: the drafts of one answer become edits of its live message.

A worker publishes ``ReplyDraft`` events (the whole text so far) on ``outbound:<platform>``
before the final ``Reply`` of the same message (``bot/router/drafts.py``). An adapter hands each
draft to ``LiveAnswers.draft`` (it returns at once) and each final reply to ``finish`` before
sending it. Per answer (conversation + the message it answers) there is one ``DraftView``, the
platform's own rendering (Discord posts then edits a message, Slack streams or updates one, the
console prints), driven by one task:

- **latest wins**: drafts that arrive while a view is busy or waiting for its rate limit replace
  each other, so a view shows the newest text at most once per ``interval`` and never queues
  stale edits; ``DraftView.pace`` waits for the platform's chokepoint (``sender``) to have room;
- **the final replaces the drafts**: ``finish`` stops the task (an edit in progress completes
  first, never cut: a cancelled post would leave a message nobody knows of), then the view turns
  its message(s) into the final answer, exactly the pieces an unstreamed reply would have sent;
- **late drafts are dropped**: an answer that was finished (streamed or not) is remembered for
  ``ttl`` seconds (the latest ``remember`` of them, in a ``cachetools.TTLCache`` on the
  adapter's clock), so a draft from a worker that lost its claim (paused, then resumed after
  another worker answered) cannot re-open it;
- **takeovers keep one message**: drafts from the worker that took a crashed worker's turn over
  carry the same key, so they edit the same message, and the final fills it in;
- an answer whose final never comes (nobody took the turn over within ``ttl``) is forgotten;
- **a restarted gateway finishes the same message**: with a ``store`` (``AnswerStore``: Redis,
  ``bot/state/draft_messages.py``) each answer's live message identity (``DraftView.state``) is
  saved when it is created or changes, and a gateway that gets drafts or the final reply of an
  answer it never showed (it was restarted mid-stream) reads it back and ``resume``s that
  message. A final that cannot be put there (the message was deleted, the stream expired past
  repair) is sent the usual way after ``discard`` removed the partial: never two answers.

Adapters only convert and do I/O; this is the platform-neutral bookkeeping they share.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from cachetools import TTLCache

from bot.events import ConversationKey, Reply, ReplyDraft

log = logging.getLogger("chorus.platform.streaming")

Key = tuple[str, str]


class DraftView(Protocol):
    """One answer's rendering on a platform, from its first draft to its final reply."""

    async def pace(self) -> None:
        """Wait until the platform's chokepoint has room for the next draft's calls."""

    async def show(self, draft: ReplyDraft) -> None:
        """Render ``draft`` (the text so far and what runs)."""

    async def finish(self, reply: Reply) -> None:
        """Render the final answer in place of the drafts."""

    def state(self) -> dict[str, Any] | None:
        """What identifies the answer's message(s) now (JSON-able), None before there is one."""

    def resume(self, state: Mapping[str, Any]) -> None:
        """Adopt the message(s) a previous process showed (its last ``state``)."""

    async def discard(self) -> None:
        """Remove what this view showed (the final could not be put there)."""


class AnswerStore(Protocol):
    """Where live messages' identities outlive the process (``bot.state.draft_messages``)."""

    async def save(self, answer: Key, state: Mapping[str, Any]) -> None: ...

    async def load(self, answer: Key) -> dict[str, Any] | None: ...

    async def forget(self, answer: Key) -> None: ...


OpenView = Callable[[ReplyDraft], DraftView | None]


def answer_key(conversation: ConversationKey, reply_to_id: str | None) -> Key:
    return str(conversation), reply_to_id or ""


@dataclass(eq=False)
class _Live:
    view: DraftView
    opened: float
    latest: ReplyDraft | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    stopped: asyncio.Event = field(default_factory=asyncio.Event)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    task: asyncio.Task[None] | None = None
    shown: int = 0
    key: Key = ("", "")
    saved: dict[str, Any] | None = None  # the state last saved to the store
    resumed: bool = False  # showing a message a previous process created


class LiveAnswers:
    """The answers being streamed by one adapter (see the module docstring)."""

    def __init__(
        self,
        open_view: OpenView,
        *,
        interval: float,
        ttl: float = 900.0,
        remember: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
        store: AnswerStore | None = None,
    ) -> None:
        self._open = open_view
        self.store = store
        self._started = clock()
        self.interval = interval
        self.ttl = ttl
        self._clock = clock
        self._live: dict[Key, _Live] = {}
        self._done: TTLCache[Key, None] = TTLCache(remember, ttl, timer=clock)
        self._forgotten: set[asyncio.Task[None]] = set()  # expired answers' tasks, ending

    @property
    def active(self) -> int:
        return len(self._live)

    def draft(self, draft: ReplyDraft) -> None:
        """Take a draft (non-blocking): it is shown by its answer's task, latest first."""
        key = answer_key(draft.conversation, draft.reply_to_id)
        now = self._clock()
        self._expire(now)
        if key in self._done:
            return  # the answer went out already: a late draft must not reopen it
        live = self._live.get(key)
        if live is None:
            view = self._open(draft)
            if view is None:
                return
            live = self._live[key] = _Live(view, opened=now, key=key)
            live.task = asyncio.create_task(self._run(live), name="live-answer")
        live.latest = draft
        live.changed.set()

    async def finish(self, reply: Reply) -> bool:
        """Stop the drafts of ``reply``'s answer and let its view render the final answer;
        False when nothing was shown for it (send it the usual way)."""
        key = answer_key(reply.conversation, reply.reply_to_id)
        self._done[key] = None
        live = self._live.pop(key, None)
        saved = live is not None and (live.saved is not None or live.resumed)
        try:
            if live is not None:
                live.stopped.set()
                async with live.lock:  # an edit in progress completes first
                    if live.shown or live.resumed:
                        return await self._final(live.view, reply)
            state = await self._left_by_previous(key, reply)
            if state is None:
                return False  # nothing reached the platform yet: a plain send
            saved = True
            view = live.view if live is not None else self._open(_draft_of(reply))
            if view is None:
                return False
            view.resume(state)
            return await self._final(view, reply)
        finally:
            if live is not None:
                await self._stop(live)
            if saved and self.store is not None:
                await self.store.forget(key)

    async def _left_by_previous(self, key: Key, reply: Reply) -> dict[str, Any] | None:
        """The live message a previous process left for this answer, if any. Asked only in a
        process's first ``ttl`` seconds: anything older than that has expired in the store."""
        if reply.reply_to_id is None or not self._may_resume():
            return None
        assert self.store is not None
        return await self.store.load(key)

    def _may_resume(self) -> bool:
        """Whether a previous process's live message may still be in the store: only in this
        process's first ``ttl`` seconds (later, anything it saved has expired)."""
        return self.store is not None and self._clock() - self._started <= self.ttl

    async def _final(self, view: DraftView, reply: Reply) -> bool:
        """The final answer in ``view``; when it cannot be put there, what the view showed is
        removed and False says "send it the usual way": one answer, never two."""
        try:
            await view.finish(reply)
            return True
        except Exception:
            log.warning(
                "could not turn the live message into the answer; sending it anew",
                extra={"conversation": str(reply.conversation)},
                exc_info=True,
            )
        try:
            await view.discard()
        except Exception:
            log.warning("could not remove a partial answer", exc_info=True)
        return False

    async def aclose(self) -> None:
        lives, self._live = list(self._live.values()), {}
        for live in lives:
            live.stopped.set()
            await self._stop(live)
        await asyncio.gather(*self._forgotten, return_exceptions=True)

    async def _run(self, live: _Live) -> None:
        last = float("-inf")
        while not live.stopped.is_set():
            await _first(live.changed, live.stopped)
            wait = last + self.interval - self._clock()
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await live.stopped.wait()
            if live.stopped.is_set():
                return
            await _either(live.view.pace(), live.stopped)
            async with live.lock:
                if live.stopped.is_set() or live.latest is None:
                    return
                if live.shown == 0 and not live.resumed:
                    await self._load(live)
                live.changed.clear()
                draft = live.latest
                try:
                    await live.view.show(draft)
                except Exception:
                    log.warning(
                        "could not show a draft; the answer will still come",
                        extra={"conversation": str(draft.conversation)},
                        exc_info=True,
                    )
                live.shown += 1
                await self._save(live)
            last = self._clock()

    async def _load(self, live: _Live) -> None:
        """Before an answer's first draft here: the message a previous process left, if any."""
        if not self._may_resume():
            return
        assert self.store is not None
        saved = await self.store.load(live.key)
        if saved is not None:
            live.view.resume(saved)
            live.saved, live.resumed = saved, True

    async def _save(self, live: _Live) -> None:
        """The view's message identity, when it changed (created, split, stream stopped)."""
        state = live.view.state()
        if self.store is None or state is None or state == live.saved:
            return
        await self.store.save(live.key, state)
        live.saved = state

    async def _stop(self, live: _Live) -> None:
        if live.task is not None and live.task is not asyncio.current_task():
            live.task.cancel()
            await asyncio.gather(live.task, return_exceptions=True)

    def _expire(self, now: float) -> None:
        for key in [k for k, live in self._live.items() if live.opened < now - self.ttl]:
            live = self._live.pop(key)
            live.stopped.set()
            if live.task is not None:
                live.task.cancel()  # kept until it has ended; nothing awaits it
                self._forgotten.add(live.task)
                live.task.add_done_callback(self._forgotten.discard)


def _draft_of(reply: Reply) -> ReplyDraft:
    """A draft standing for ``reply``, to open its view when no draft came here."""
    return ReplyDraft(
        conversation=reply.conversation,
        reply_to_id=reply.reply_to_id or "-",
        addressed_user_ids=reply.addressed_user_ids,
        seq=1,
    )


async def _first(changed: asyncio.Event, stopped: asyncio.Event) -> None:
    """Until ``changed`` or ``stopped`` is set."""
    if changed.is_set() or stopped.is_set():
        return
    await _either(changed.wait(), stopped)


async def _either(work: object, stopped: asyncio.Event) -> None:
    """Run ``work`` (a coroutine) until it ends or ``stopped`` is set."""
    task = asyncio.ensure_future(work)  # type: ignore[call-overload]
    stop = asyncio.ensure_future(stopped.wait())
    try:
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (task, stop):
            if not pending.done():
                pending.cancel()
        await asyncio.gather(task, stop, return_exceptions=True)
