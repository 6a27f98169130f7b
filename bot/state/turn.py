"""The state seam of one turn: what it reads (``TurnQuery`` -> ``TurnState``) and what it leaves
behind (``TurnChanges``), as typed values, and the ``TurnStore`` that does both.

Why a seam: an answered message costs two round trips to the store, one read and one
transaction, and six owners take part in each (history, memory, summaries and recall, the
live-chat ledger, the quotas and the cost cap, the bus). Each owner *says* what it needs read or what changed,
here, in terms of its own data; the store alone turns that into commands. So the router never
holds a Redis pipeline, no owner writes into another's, and the turn runs unchanged on
``bot.state.redis_turn`` (Redis, real or embedded) and ``bot.state.memory_turn`` (plain Python
objects, the twin the tests use); ``tests/test_turn_store_contract.py`` holds both to one
contract.

The values are what the store keeps, not the owners' parsed models (``bot.state`` may not
import the owners): a memory buffer is its stored JSON, a summary list its stored text. The
owners parse them (``bot.memory``), as they would any value they read.

The commit is guarded by the message's claim (``bot.state.claims``): the store writes the
changes and the claim's "done" marker only while the claim still holds the worker's token,
atomically; that is the exactly-once answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple, Protocol

from bot.events import ConversationKey
from bot.state.engagement import Changes
from bot.state.history import HistoryEntry

__all__ = [
    "Activity",
    "ChannelSave",
    "ClaimTake",
    "CostSettle",
    "CounterAdd",
    "Guard",
    "HistoryAppend",
    "InsightDue",
    "Record",
    "Release",
    "Renew",
    "StreamAck",
    "StreamAppend",
    "SummaryDue",
    "TurnChanges",
    "TurnQuery",
    "TurnState",
    "TurnStore",
]


# -- what a turn reads ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ClaimTake:
    """Claim the message (``bot.state.claims``): set ``token`` unless a value is there."""

    key: str
    token: str
    lease_ms: int


@dataclass(frozen=True, slots=True)
class TurnQuery:
    """What one turn reads, in one round trip. ``memory_refresh``: the author's memory is read
    (following a ``/link`` alias, whose link is kept alive that many seconds); None: memory is
    off. ``summaries``/``community``/``summary_vectors``: the conversation's summaries, its
    community notes and their vectors; ``user_vectors``: the author's note vectors;
    ``knowledge_base``: the version of the scope's knowledge base."""

    conversation: ConversationKey
    platform: str
    user_id: str
    claim: ClaimTake | None = None
    memory_refresh: int | None = None
    summaries: bool = False
    community: bool = False
    summary_vectors: bool = False
    user_vectors: bool = False
    knowledge_base: str | None = None


@dataclass(frozen=True, slots=True)
class TurnState:
    """What the read found. ``claimed``: the claim's previous value (None: it was free; the
    worker's own token: an earlier attempt of this worker; ``done``: answered; another token:
    another worker's). ``history`` is the window, oldest first; ``waiting``: lines past the
    window wait for the summariser. ``person``/``memory``: the alias the author's memory was
    read through and the stored buffer (None: none)."""

    claimed: object = None
    history: list[HistoryEntry] = field(default_factory=list)
    waiting: bool = False
    person: str | None = None
    memory: str | None = None
    summaries: str | None = None
    community: str | None = None
    summary_vectors: Mapping[str, str] = field(default_factory=dict)
    user_vectors: Mapping[str, str] = field(default_factory=dict)
    knowledge_version: int = 0


# -- what a turn leaves behind --------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StreamAppend:
    """An event appended to a bus stream (the reply, on the Redis Streams bus)."""

    stream: str
    fields: Mapping[str, str]
    maxlen: int


@dataclass(frozen=True, slots=True)
class StreamAck:
    """A stream entry acknowledged for its consumer group (the message being answered)."""

    stream: str
    group: str
    entry_id: str


@dataclass(frozen=True, slots=True)
class HistoryAppend:
    """The turn's lines. ``keep``: lines past the window stay for the summariser."""

    conversation: ConversationKey
    entries: tuple[HistoryEntry, ...]
    keep: bool = False


@dataclass(frozen=True, slots=True)
class Activity:
    """The author spoke in ``conversation`` at ``at``: their memory lives another
    ``memory_ttl`` seconds (never created by this), and the conversation joins their recent
    ones (pruned to ``window_seconds`` and ``max_conversations``)."""

    platform: str
    user_id: str
    conversation: ConversationKey
    at: datetime
    memory_ttl: int
    window_seconds: int
    max_conversations: int


@dataclass(frozen=True, slots=True)
class InsightDue:
    """The author's insights job: due ``due_ms`` (pushed later by each turn), at the latest
    ``deadline_ms`` (set by the first pending turn); ``ref`` is the turn in ``conversation``
    (stored JSON), ``ttl_seconds`` how long an unclaimed job lives."""

    platform: str
    user_id: str
    display_name: str
    conversation: ConversationKey
    ref: str
    due_ms: int
    deadline_ms: int
    ttl_seconds: int
    queue: str
    conversation_field: str


@dataclass(frozen=True, slots=True)
class SummaryDue:
    """The conversation's summary: due at ``due_ms`` (earlier wins; None: no change), and
    (``ttl_days`` set) the job's settings, kept ``ttl_seconds``."""

    conversation: ConversationKey
    queue: str
    due_ms: int | None = None
    ttl_days: int | None = None
    community: bool = False
    ttl_seconds: int = 0


@dataclass(frozen=True, slots=True)
class ChannelSave:
    """What a live-chat turn decided (answered, cooldowns, a pause), written with its reply."""

    conversation: ConversationKey
    changes: Changes
    now: float


@dataclass(frozen=True, slots=True)
class CounterAdd:
    """``amount`` added to a counter (``field`` of a hash, or a plain counter when None) that
    lives ``ttl_seconds`` from now (quotas: tokens and cost of the turn)."""

    key: str
    field: str | None
    amount: int
    ttl_seconds: int


class CostSettle(NamedTuple):
    """The turn's model spend settled (``bot.state.cost``): its reservation ``hold`` leaves the
    day's holds hash and ``amount`` micro-USD (the real cost; 0: released) is added to the day's
    spend, which lives ``ttl_seconds`` from now. (A named tuple, immutable like the dataclasses
    here and a fraction of their cost to create at import, which start-up is budgeted for.)"""

    spent_key: str
    holds_key: str
    hold: str
    amount: int
    ttl_seconds: int


@dataclass(frozen=True, slots=True)
class TurnChanges:
    """Everything an answered (or settled) turn leaves behind, committed in one step."""

    reply: StreamAppend | None = None
    ack: StreamAck | None = None
    history: HistoryAppend | None = None
    activity: Activity | None = None
    insight: InsightDue | None = None
    summary: SummaryDue | None = None
    channel: ChannelSave | None = None
    usage: tuple[CounterAdd, ...] = ()
    cost: CostSettle | None = None


# -- what runs only while a claim is ours -----------------------------------------------------
@dataclass(frozen=True, slots=True)
class Renew:
    lease_ms: int


@dataclass(frozen=True, slots=True)
class Release:
    pass


@dataclass(frozen=True, slots=True)
class Record:
    """The turn's changes and the claim's ``done`` marker (kept ``done_seconds``)."""

    changes: TurnChanges
    done_seconds: int


Effect = Renew | Release | Record


class Guard(Protocol):
    """The atomic steps claims are made of (``bot.state.claims``)."""

    async def take(self, key: str, token: str, lease_ms: int) -> object:
        """Set ``key`` to ``token`` for ``lease_ms`` unless it holds a value; the value it
        held (None: it was free)."""
        ...

    async def remaining_ms(self, key: str) -> int:
        """How long ``key`` lives (negative: no key or no expiry, as Redis's ``PTTL``)."""
        ...

    async def if_holds(self, key: str, token: str, effect: Effect) -> bool:
        """Apply ``effect`` atomically, only while ``key`` holds ``token``; whether it did."""
        ...


class TurnStore(Guard, Protocol):
    """Where turns are read and recorded (recorded under a claim: ``Guard.if_holds`` with a
    ``Record``)."""

    async def read(self, query: TurnQuery) -> TurnState:
        """Everything ``query`` names, in one round trip (the claim taken first)."""
        ...

    async def write(self, changes: TurnChanges) -> None:
        """``changes`` in one atomic step, guarded by no claim (what a command or a test
        writes outside a turn)."""
        ...
