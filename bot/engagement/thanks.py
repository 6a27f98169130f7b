"""The thanks policy: which stream events the bot thanks, and when, in one line for a burst.

A co-host thanks a raider, a new subscriber or a Super Chat, but a streamer does not want a
line per event: a gift burst of 20 subs is one community gift plus 20 per-recipient notices,
and a raid brings a wave of subs and cheers with it. So events accumulate per channel and the
bot speaks once the burst has *settled* (``settle_seconds`` without a new event), or at the
latest ``max_wait_seconds`` after the first one, and never sooner than ``min_gap_seconds``
after its last thanks: one turn that names up to ``max_names`` people with what each did
(raids first, then gifts, paid messages, subs, announcements; bigger first within a kind; one
person's several kinds on one line) and counts the rest.

Every kind is off until the operator turns it on (``CHORUS_THANKS``, ``bot/settings/thanks``):
an event of a kind that is off is not kept at all. What is counted together:

- one gift burst (``StreamEvent.gift_id``): the announcement's total, or the recipients' parts
  seen if more arrived; parts that arrive after the burst was thanked are absorbed, never a
  second line;
- one person's events of one kind (two cheers add up their bits, two Super Chats list both
  amounts; single gifts count their recipients);
- a message id seen twice (a redelivery) counts once.

Pure and synchronous like the engagement policy (``policy.py``): no I/O, no clock - ``now``
is passed in - so the rules are table-tested; ``LiveChat`` in ``turns.py`` calls
``ThanksChannels.observe`` as each message is dispatched and ``due`` from its one-second tick
(which also holds a thanks back while the channel cools down or, on YouTube, while the reply
budget's room is closed), and turns a ``Thanks`` into a turn with ``turn_text``/``instructions``. The state is memory only: a restart between an event
and its thanks loses that thanks (as it loses a pending batch), never doubles one.

What a viewer wrote with an event goes into the turn's text, which the prompt wraps as a
``<user_message>`` data block; the instruction to thank is the turn's context, outside it.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from cachetools import FIFOCache

import prompts
from bot.events import ChatMessage, ConversationKey, StreamEvent, StreamEventKind
from bot.settings import ThanksSettings

Kind = StreamEventKind
ALL_KINDS = frozenset(Kind) - {Kind.REDEMPTION}  # a redemption is never thanked
SEEN_CAP = 2048  # message ids remembered per channel against redelivery
DONE_GIFTS = 256  # thanked gift bursts remembered per channel, so late parts are absorbed
MAX_MESSAGES = 2  # what one person wrote, at most this many lines in the turn
MAX_MESSAGE_CHARS = 200
MAX_AMOUNTS = 5
EVICT_AFTER = 600.0  # seconds a channel's state outlives its last event or thanks
_PRIORITY = {
    Kind.RAID: 0,
    Kind.GIFT_SUB: 1,
    Kind.SUPER_CHAT: 2,
    Kind.CHEER: 2,
    Kind.SUPER_STICKER: 3,
    Kind.RESUB: 3,
    Kind.SUB: 3,
    Kind.ANNOUNCEMENT: 4,
}
_TIERS = {"1000": "Tier 1", "2000": "Tier 2", "3000": "Tier 3", "prime": "Prime"}


@dataclass(frozen=True)
class ThanksConfig:
    kinds: frozenset[StreamEventKind] = frozenset()  # nothing is thanked by default
    settle_seconds: float = 5.0
    max_wait_seconds: float = 30.0
    min_gap_seconds: float = 30.0
    max_names: int = 3
    max_pending: int = 50  # people or bursts kept per channel; more are counted, not named

    @classmethod
    def from_settings(cls, settings: ThanksSettings) -> ThanksConfig:
        """The kinds and timing of the ``CHORUS_THANKS*`` section (same field names)."""
        return cls(**settings.model_dump())

    def __post_init__(self) -> None:
        if self.settle_seconds < 0 or self.min_gap_seconds < 0:
            raise ValueError("settle_seconds and min_gap_seconds must not be negative")
        if self.max_wait_seconds < self.settle_seconds:
            raise ValueError("max_wait_seconds must be at least settle_seconds")
        if self.max_names < 1 or self.max_pending < self.max_names:
            raise ValueError("need 1 <= max_names <= max_pending")


@dataclass
class Thanked:
    """One person's events of one kind, or one gift burst: one name in the thanks."""

    kind: StreamEventKind
    user_id: str | None
    user_name: str
    seq: int
    count: int = 0  # raid viewers
    bits: int = 0
    announced: int = 0  # gifts a burst announced
    recipients: set[str] = field(default_factory=set)
    amounts: list[str] = field(default_factory=list)
    micros: int = 0
    months: int | None = None
    tier: str | None = None
    messages: list[str] = field(default_factory=list)

    @property
    def gifts(self) -> int:
        return max(self.announced, len(self.recipients))

    @property
    def weight(self) -> int:
        """Bigger first within a kind (currencies are not converted: a rough order)."""
        return self.count + self.bits + self.gifts + self.micros // 1_000_000 + (self.months or 0)


@dataclass
class ThanksState:
    """One channel's events waiting to be thanked, and what it remembers of earlier ones."""

    config: ThanksConfig
    pending: dict[tuple[str, str], Thanked] = field(default_factory=dict)
    overflow: set[tuple[str, str]] = field(default_factory=set)  # past ``max_pending``: counted
    first_at: float | None = None
    last_at: float = -math.inf
    last_thanks: float = -math.inf
    last_id: str = ""
    seen: set[str] = field(default_factory=set)
    seen_order: deque[str] = field(default_factory=deque)
    # thanked gift bursts, the first thanked forgotten first
    done_gifts: FIFOCache[str, None] = field(default_factory=lambda: FIFOCache(DONE_GIFTS))
    seq: int = 0


@dataclass(frozen=True)
class Thanks:
    """One thanks turn: the people named, in order, each with what they did (one entry per
    kind); how many more people; the last event's id."""

    named: tuple[tuple[Thanked, ...], ...]
    others: int
    last_id: str

    @property
    def user_ids(self) -> tuple[str, ...]:
        return tuple(p[0].user_id for p in self.named if p[0].user_id is not None)


class ThanksChannels:
    """The channels of this process with stream events to thank: a state per channel, made
    by the first event of a kind that is on and forgotten once idle."""

    def __init__(self, config: ThanksConfig) -> None:
        self.config = config
        self.states: dict[ConversationKey, ThanksState] = {}

    def observe(self, message: ChatMessage, now: float) -> bool:
        """``observe`` in the message's channel (see there)."""
        event = message.stream_event
        if event is None or event.kind not in self.config.kinds:
            return False  # nothing is kept for a kind that is off
        state = self.states.get(message.conversation)
        if state is None:
            state = self.states[message.conversation] = ThanksState(self.config)
        return observe(state, message, now)

    def due(
        self, now: float, may: Callable[[ConversationKey], bool | None]
    ) -> list[tuple[ConversationKey, Thanks]]:
        """The thanks due now, per channel that ``may`` speak (True); ``may`` False: it waits,
        None: what it holds is dropped (a paused channel)."""
        found = []
        for conv, state in list(self.states.items()):
            allowed = may(conv)
            if allowed is None:
                clear(state)
            if idle(state, now):
                del self.states[conv]
            elif allowed and (thanks := due(state, now)) is not None:
                found.append((conv, thanks))
        return found


def observe(state: ThanksState, message: ChatMessage, now: float) -> bool:
    """Keep ``message``'s stream event for the channel's next thanks; False when it is not one,
    its kind is off, it was seen before, or it belongs to a burst already thanked."""
    event = message.stream_event
    if event is None or event.kind not in state.config.kinds or message.id in state.seen:
        return False
    state.seen.add(message.id)
    state.seen_order.append(message.id)
    if len(state.seen_order) > SEEN_CAP:
        state.seen.discard(state.seen_order.popleft())
    gift = event.gift_id if event.kind is Kind.GIFT_SUB else None
    if gift is not None and gift in state.done_gifts:
        return False  # a late part of a burst already thanked
    key = ("gift", gift) if gift is not None else (event.kind.value, event.user_id or "")
    entry = state.pending.get(key)
    if entry is None and len(state.pending) >= state.config.max_pending:
        state.overflow.add(key)
    else:
        if entry is None:
            state.seq += 1
            entry = state.pending[key] = Thanked(event.kind, event.user_id, "", state.seq)
        _merge(entry, event, message)
    state.first_at = now if state.first_at is None else state.first_at
    state.last_at, state.last_id = now, message.id
    return True


def due(state: ThanksState, now: float) -> Thanks | None:
    """The thanks to give now, or None. Clears what it returns."""
    cfg = state.config
    if state.first_at is None or now - state.last_thanks < cfg.min_gap_seconds:
        return None
    settled = now - state.last_at >= cfg.settle_seconds
    if not settled and now - state.first_at < cfg.max_wait_seconds:
        return None
    entries = _by_gifter(state.pending)
    entries.sort(key=lambda e: (_PRIORITY[e.kind], -e.weight, e.seq))
    people = _people(entries)
    named = tuple(people[: cfg.max_names])
    thanks = Thanks(named, len(people) - len(named) + len(state.overflow), state.last_id)
    for kind, key in state.pending:
        if kind == "gift":
            state.done_gifts[key] = None
    clear(state)
    state.last_thanks = now
    return thanks


def clear(state: ThanksState) -> int:
    """Drop what waits (a paused channel thanks nobody); how many people or bursts went."""
    dropped = len(state.pending) + len(state.overflow)
    state.pending.clear()
    state.overflow.clear()
    state.first_at = None
    return dropped


def idle(state: ThanksState, now: float) -> bool:
    """Nothing waits and nothing happened for ``EVICT_AFTER``: the state may be forgotten."""
    return state.first_at is None and now - max(state.last_at, state.last_thanks) > EVICT_AFTER


def _merge(entry: Thanked, event: StreamEvent, message: ChatMessage) -> None:
    if entry.user_id is None and event.user_id is not None:
        entry.user_id = event.user_id
    if not entry.user_name and event.user_name:
        entry.user_name = event.user_name
    entry.tier = entry.tier or event.tier
    if event.kind is Kind.GIFT_SUB:
        if event.recipient_id is not None:
            entry.recipients.add(event.recipient_id)
        else:
            entry.announced = max(entry.announced, event.count or 0)
    entry.count = max(entry.count, event.count or 0) if event.kind is Kind.RAID else entry.count
    entry.bits += event.bits or 0
    if event.amount and len(entry.amounts) < MAX_AMOUNTS:
        entry.amounts.append(event.amount)
    entry.micros += event.amount_micros or 0
    if event.months is not None:
        entry.months = max(entry.months or 0, event.months)
    text = message.text.strip()
    if text and len(entry.messages) < MAX_MESSAGES:
        entry.messages.append(text[:MAX_MESSAGE_CHARS])


def _by_gifter(pending: dict[tuple[str, str], Thanked]) -> list[Thanked]:
    """The entries, with one gifter's bursts (several community gifts) as one entry."""
    merged: dict[str, Thanked] = {}
    entries: list[Thanked] = []
    for entry in pending.values():
        if entry.kind is not Kind.GIFT_SUB or entry.user_id is None:
            entries.append(entry)
            continue
        first = merged.get(entry.user_id)
        if first is None:
            merged[entry.user_id] = entry
            entries.append(entry)
            continue
        first.announced, first.recipients = first.gifts + entry.gifts, set()
        first.user_name = first.user_name or entry.user_name
        first.messages = (first.messages + entry.messages)[:MAX_MESSAGES]
    return entries


def _people(ranked: list[Thanked]) -> list[tuple[Thanked, ...]]:
    """The ranked entries as people (one person's kinds together, at their best rank)."""
    people: dict[str, list[Thanked]] = {}
    for entry in ranked:
        key = entry.user_id if entry.user_id is not None else f"#{entry.seq}"  # anonymous: apart
        people.setdefault(key, []).append(entry)
    return [tuple(entries) for entries in people.values()]


# -- what the turn says ---------------------------------------------------------------------
def instructions() -> str:
    """The turn's instruction (its context, outside the data block)."""
    return prompts.render("live/thanks")


def turn_text(thanks: Thanks, platform: str) -> str:
    """The turn's text: one line per person named, what they wrote under it, the rest counted.
    Everything here is data; the prompt wraps it as a ``<user_message>`` block."""
    lines: list[str] = []
    for person in thanks.named:
        names = [e.user_name for e in person if e.user_name]
        unnamed = "live/thanks_unnamed" if person[0].user_id else "live/thanks_anonymous"
        name = names[0] if names else prompts.render(unnamed)
        lines.append(f"- {name}: {'; '.join(_what(e, platform) for e in person)}")
        said = [text for e in person for text in e.messages][:MAX_MESSAGES]
        lines += [f"  {prompts.render('live/thanks_said', text=text)}" for text in said]
    if thanks.others:
        lines.append(prompts.render("live/thanks_others", count=thanks.others))
    return "\n".join(lines)


def _what(entry: Thanked, platform: str) -> str:
    youtube = platform == "youtube"
    label = _TIERS.get(entry.tier or "", entry.tier or "")
    tier = f" ({label})" if label else ""
    amount = f" ({' + '.join(entry.amounts)})" if entry.amounts else ""
    kind = entry.kind
    if kind is Kind.RAID:
        return prompts.render("live/thanks_raid", count=entry.count)
    if kind is Kind.GIFT_SUB:
        name = "live/thanks_gift_member" if youtube else "live/thanks_gift_sub"
        return prompts.render(name, count=max(entry.gifts, 1), tier=tier)
    if kind is Kind.RESUB and entry.months:
        name = "live/thanks_milestone" if youtube else "live/thanks_resub"
        return prompts.render(name, months=entry.months, tier=tier)
    if kind in (Kind.SUB, Kind.RESUB):
        return prompts.render("live/thanks_member" if youtube else "live/thanks_sub", tier=tier)
    if kind is Kind.CHEER:
        return prompts.render("live/thanks_cheer", bits=entry.bits)
    if kind is Kind.SUPER_CHAT:
        return prompts.render("live/thanks_super_chat", amount=amount)
    if kind is Kind.SUPER_STICKER:
        return prompts.render("live/thanks_super_sticker", amount=amount)
    return prompts.render("live/thanks_announcement")
