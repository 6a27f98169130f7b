"""Keeping a process's live channels in step with their durable state (bot/state/engagement.py).

Why here and not in the policy: the policy stays pure and O(1) per message (the ingest budget is
>= 20,000 messages/s per process), so no message waits for Redis. Instead:

- **load once per activation**: before the first message of a channel this process has not seen,
  or not seen for ``resync_seconds`` (the channel may have been held by another worker
  meanwhile), one read merges the stored state into the ledger: the pause, the last time the bot
  spoke, the users still in their cooldown, and the messages already answered (their ids join
  the ledger's ``seen``, so a redelivery of one is a duplicate). A busy channel is never re-read.
- **write with the reply**: what a turn decided (who it answers, which messages, that the bot
  speaks) is written by the commit that records that turn's reply (``save_for``), so
  the reply and its record are durable together; a turn that never commits leaves no record and
  its messages may be answered after a restart. A pause or resume is written with its
  acknowledgement and again by the next ``maintain`` pass, at most a second later.
- **maintain** (the router's one-second tick): writes pending pauses and resumes, restarts the
  pause TTL of a paused channel whose chat goes on (so a pause lapses only after the channel has
  been quiet for the whole TTL, or is resumed elsewhere, which this pass notices), drops expired
  turn records and evicts idle channels from memory (bounded: least recently seen first).
  Turn records are a ``cachetools.TTLCache`` on the ledger's clock: a turn not committed within
  ``TURN_RECORD_SECONDS`` is never looked up again, and at most ``TURN_RECORDS`` are held.
- **follow the pause feed** (same pass): every pause or resume is also written to a feed (a
  stream every process reads with its own cursor), so a channel paused elsewhere -- by
  ``!chorus pause`` on another worker, or from the admin dashboard -- is reloaded here within
  a second even while it is busy (a busy channel is otherwise never re-read). It costs one
  read a second per process, none per message.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable

from cachetools import TTLCache

from bot.engagement.ledger import ChannelState, Engagement
from bot.engagement.policy import SEEN_CAP, apply_pause, note_answered
from bot.events import ConversationKey
from bot.state.engagement import Changes, LiveStore, Snapshot
from bot.state.turn import ChannelSave

log = logging.getLogger("chorus.live")

TURN_RECORDS = 4096  # turns whose record waits for their commit, at most
TURN_RECORD_SECONDS = 600.0  # a turn not committed within this never will be


class DurableLedger:
    """The durable side of one process's ``Engagement``: loads, pending writes, eviction."""

    def __init__(
        self,
        engagement: Engagement,
        store: LiveStore,
        clock: Callable[[], float],
        *,
        resync_seconds: float = 5.0,
        evict_after_seconds: float = 900.0,
        max_channels: int = 10_000,
        pause_refresh_seconds: float = 60.0,
    ) -> None:
        self.engagement = engagement
        self.store = store
        self.clock = clock
        self.resync_seconds = resync_seconds
        self.evict_after_seconds = evict_after_seconds
        self.max_channels = max_channels
        self.pause_refresh_seconds = pause_refresh_seconds
        self.pauses: dict[ConversationKey, tuple[bool, float]] = {}  # unsaved: (paused, when)
        self.turns: TTLCache[tuple[ConversationKey, str], Changes] = TTLCache(
            TURN_RECORDS, TURN_RECORD_SECONDS, timer=clock
        )
        self.refreshed: dict[ConversationKey, float] = {}  # when each pause TTL last restarted
        self.pause_cursor: str | None = None  # how far this process read the pause feed

    # -- reads --------------------------------------------------------------------------------
    def needs_load(self, state: ChannelState | None, now: float) -> bool:
        """Whether the channel is new here, or quiet long enough for another process to have
        held it meanwhile."""
        seen = None if state is None else state.last_seen
        return seen is None or now - seen > self.resync_seconds

    async def load(self, conv: ConversationKey, now: float) -> None:
        """Merge the stored state of ``conv`` into its ledger (one store round trip; the first
        load also starts this process's place in the pause feed, so no later pause is missed)."""
        if self.pause_cursor is None:
            self.pause_cursor, _ = await self.store.pause_changes(None)
        cooldown = self.engagement.config_for(conv).user_cooldown_seconds
        snapshot = await self.store.load(conv, now=now, users_since=now - cooldown)
        self.restore(self.engagement.state(conv), conv, snapshot, now)

    def restore(
        self, state: ChannelState, conv: ConversationKey, snap: Snapshot, now: float
    ) -> None:
        """The stored pause wins (it is the newest decision of any process, or has lapsed)
        unless this process changed it and has not saved that yet; times keep the later of the
        two; answered messages count as seen."""
        if conv not in self.pauses and snap.paused != state.paused:
            apply_pause(state, snap.paused, now)
            self.refreshed[conv] = now
            log.info(
                "live chat: %s restored from the store",
                "pause" if snap.paused else "resume",
                extra={"conversation": str(conv)},
            )
        if snap.spoke is not None:
            state.last_spoke = max(state.last_spoke, snap.spoke)
        for uid, at in snap.users.items():
            note_answered(state, uid, at)
        for message_id in snap.answered:
            if message_id not in state.seen:
                state.seen.add(message_id)
                state.seen_order.append(message_id)
        _trim_seen(state.seen, state.seen_order)

    # -- what happened ------------------------------------------------------------------------
    def paused(self, conv: ConversationKey, paused: bool, now: float) -> None:
        self.pauses[conv] = (paused, now)
        self.refreshed[conv] = now

    def turn(self, conv: ConversationKey, turn_id: str, changes: Changes) -> None:
        """What the turn ``turn_id`` decided; written when (if) its reply commits."""
        self.turns[(conv, turn_id)] = changes

    # -- writes -------------------------------------------------------------------------------
    def save_for(self, conv: ConversationKey, turn_id: str) -> ChannelSave | None:
        """The turn's record and the channel's unsaved pause, as a change of the commit that
        records the reply (None: nothing to write)."""
        record = self.turns.get((conv, turn_id))
        pause = self.pauses.get(conv)
        if record is None and pause is None:
            return None
        changes = Changes() if record is None else _copy(record)
        if pause is not None:
            changes.paused, changes.pause_at = pause
        return ChannelSave(conv, changes, self.clock())

    async def maintain(self) -> None:
        """Write unsaved pauses, restart the TTL of paused channels with chat, forget old turn
        records and evict idle channels. Raises what the store raises (the caller logs it)."""
        now = self.clock()
        pending = dict(self.pauses)
        if pending:
            await self.store.save({c: Changes(*pause) for c, pause in pending.items()}, now)
            for conv, saved in pending.items():
                if self.pauses.get(conv) == saved:  # not changed again meanwhile
                    del self.pauses[conv]
        await self._refresh_pauses(now)
        await self._follow_pauses(now)
        self.turns.expire(now)
        self._evict(now)

    async def _refresh_pauses(self, now: float) -> None:
        states = self.engagement.states
        due = [
            conv
            for conv, at in self.refreshed.items()
            if conv not in self.pauses
            and conv in states
            and states[conv].paused
            and now - at >= self.pause_refresh_seconds
            and (states[conv].last_seen or at) > at  # chat went on since the last refresh
        ]
        if not due:
            return
        for conv, held in zip(due, await self.store.refresh_pause(due), strict=True):
            self.refreshed[conv] = now
            state = states.get(conv)
            if not held and state is not None and state.paused and conv not in self.pauses:
                apply_pause(state, False, now)
                log.info("live chat: the pause ended elsewhere", extra={"conversation": str(conv)})

    async def _follow_pauses(self, now: float) -> None:
        """Reload each channel held here that another process (a worker's ``!chorus pause``,
        the admin dashboard) paused or resumed since the last pass: one read when none was."""
        self.pause_cursor, changed = await self.store.pause_changes(self.pause_cursor)
        states = self.engagement.states
        for conv in dict.fromkeys(changed):
            if conv in states and conv not in self.pauses:
                await self.load(conv, now)

    def _evict(self, now: float) -> None:
        """Forget channels idle for ``evict_after_seconds`` (and, beyond ``max_channels``, the
        least recently seen) that hold no waiting mention and nothing unsaved."""
        states = self.engagement.states
        over = len(states) - self.max_channels
        idle = now - self.evict_after_seconds
        candidates = [(s.last_seen or 0.0, conv) for conv, s in states.items()]
        if over > 0:  # least recently seen first (a walk of every channel, once a second)
            candidates.sort(key=lambda item: item[0])
        for seen, conv in candidates:
            if seen > idle and over <= 0:
                continue
            state = states[conv]
            if conv in self.pauses or _busy(state, over > 0):
                continue
            del states[conv]
            self.refreshed.pop(conv, None)
            over -= 1


def _busy(state: ChannelState, over: bool) -> bool:
    """A waiting mention, or (unless memory is over its bound) an idle line still to come."""
    if state.addressed_pending:
        return True
    idle = state.config.idle_prompt_after_seconds is not None
    return not over and idle and not state.idle_fired and state.last_activity is not None


def _copy(changes: Changes) -> Changes:
    return Changes(
        changes.paused, changes.pause_at, changes.spoke, dict(changes.users), dict(changes.answered)
    )


def _trim_seen(seen: set[str], order: deque[str]) -> None:
    while len(order) > SEEN_CAP:
        seen.discard(order.popleft())
