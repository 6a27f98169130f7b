"""What a conversation keeps past its history: daily summaries, community notes and a mood.

The history holds the last CHORUS_HISTORY_MAX lines for a week; everything older is gone. The
insights agent (insights/summarise.py) folds older lines into one summary per conversation and
UTC day, and -- where a scope turns community memory on -- keeps notes on recurring topics, norms
and in-jokes plus a one-line mood. This module is the core's half, like ``insight_queue``: the
stored shapes, what a turn's one read found (``from_read``), the schedule a turn's one commit
writes (``due``), and ``forget_user``. The core never imports the ``insights`` package.

Provenance, as for pins: a summary lists the user ids whose lines fed it and the first and last
line's time; a note names the one line it came from (author, message id, time) and a confidence.
That is what makes forgetting honest: a user's own lines cannot be taken back out of a summary
the model wrote from them, so ``/forget`` *drops* every summary that any of their lines fed,
every note sourced from their line, and the mood they contributed to (the other people's lines
in those summaries go too; the summaries they did not feed stay).

The job: the history list keeps the lines past its window until they are summarised
(``HistoryStore(keep=...)``, so no line falls off before), and the turn's read shows whether
CHORUS_SUMMARY_AFTER_LINES of them wait (``probe``). The turn's write then schedules the
conversation in the ``due`` zset (``ZADD LT``): now when lines wait, else just after its UTC day
ends. The schedule and the job hash (the scope's settings -- TTL, community memory; the worker
resolves no scopes -- and ``mark``, the last line summarised) ride with the user's activity
record, at most once a minute per user and conversation (``touch``), and whenever lines wait:
one answered message in a busy chat adds no command at all, and a conversation with new lines
always has a schedule, since its first turn in a minute writes one.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bot.events import AwareDatetime, ConversationKey
from bot.memory.buffers import MemorySettings
from bot.state import keys
from bot.state.summaries import DEFAULT_QUEUE, Dropped, Stored, SummaryStore
from bot.state.turn import SummaryDue, TurnState

log = logging.getLogger("chorus.summaries")

SUMMARY_TEXT_MAX = 600
MAX_SUMMARIES = 60  # days per conversation, at most (the TTL usually drops them first)
NOTE_TEXT_MAX = 120
MAX_NOTES = 12
MOOD_MAX = 100
DAY_GRACE = timedelta(minutes=5)  # the daily summary runs this long after the UTC day ends

NoteKind = Literal["topic", "norm", "joke"]


class Summary(BaseModel):
    """One conversation's lines of one UTC day, in a few sentences."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    day: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")
    text: str = Field(max_length=SUMMARY_TEXT_MAX)
    users: tuple[str, ...] = ()  # the user ids whose lines fed it (same platform)
    first: AwareDatetime
    last: AwareDatetime
    lines: int = 0


class Note(BaseModel):
    """A community note, with the line it came from."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    kind: NoteKind
    text: str = Field(max_length=NOTE_TEXT_MAX)
    user: str  # the author of the source line
    message_id: str
    at: AwareDatetime  # when that line was said
    confidence: float = Field(ge=0, le=1)


class Community(BaseModel):
    """A channel's notes and mood."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    notes: tuple[Note, ...] = ()
    mood: str = Field(default="", max_length=MOOD_MAX)
    mood_users: tuple[str, ...] = ()
    mood_at: AwareDatetime | None = None

    @property
    def users(self) -> set[str]:
        return {note.user for note in self.notes} | set(self.mood_users)


@dataclass(frozen=True)
class ChannelMemory:
    """What the read pipeline brought back for one turn."""

    summaries: tuple[Summary, ...] = ()
    community: Community | None = None
    vectors: Mapping[str, str] = field(default_factory=dict)  # the ``vec`` hash, when read


@dataclass(frozen=True)
class SummaryPlan:
    """What a scope asks of summaries: summaries kept ``ttl_days``, community memory on or off."""

    ttl_days: int
    community: bool

    @classmethod
    def of(cls, settings: MemorySettings, values: Mapping[str, Any]) -> SummaryPlan | None:
        """The plan from a scope's resolved ``values`` (None: no summaries here, as where the
        scope turns memory or insights off)."""
        insights = values.get("insights", settings.insights_enabled)
        if not (settings.summaries_enabled and insights and values.get("memory", True)):
            return None
        return cls(
            ttl_days=int(values.get("summary_ttl_days", settings.summary_ttl_days)),
            community=bool(values.get("community_memory", settings.community_memory)),
        )


# -- stored shapes -------------------------------------------------------------------------------
def dump_summaries(summaries: Sequence[Summary]) -> str:
    return json.dumps([s.model_dump(mode="json") for s in summaries], separators=(",", ":"))


def load_summaries(raw: object, where: str = "") -> tuple[Summary, ...]:
    """Stored summaries (``raw``: the GET result, decoded by ``connect``); unreadable: none."""
    if not isinstance(raw, str) or not raw:
        return ()
    try:
        rows = json.loads(raw)
        return tuple(Summary.model_validate(row) for row in rows)
    except (ValueError, ValidationError, TypeError):
        log.warning("unreadable summaries skipped", extra={"key": where}, exc_info=True)
        return ()


def dump_community(community: Community) -> str:
    return community.model_dump_json(exclude_defaults=True)


def load_community(raw: object, where: str = "") -> Community:
    if not isinstance(raw, str) or not raw:
        return Community()
    try:
        return Community.model_validate_json(raw)
    except ValidationError:
        log.warning("unreadable community notes skipped", extra={"key": where}, exc_info=True)
        return Community()


def day_of(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d")


def next_day_due(now: datetime) -> datetime:
    start = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return start + timedelta(days=1) + DAY_GRACE


KEEP_PAST_WINDOW = 360  # lines kept past the history window for the summariser, at most


def history_room(settings: MemorySettings) -> dict[str, int]:
    """``HistoryStore``'s ``keep`` and ``probe`` for these settings (none without summaries)."""
    if not (settings.summaries_enabled and settings.insights_enabled):
        return {"keep": 0, "probe": 0}
    return {"keep": KEEP_PAST_WINDOW, "probe": settings.summary_after_lines}


# -- the reply path: one read, one write --------------------------------------------------------
def from_read(
    state: TurnState, conv: ConversationKey, plan: SummaryPlan, *, vectors: bool = False
) -> ChannelMemory:
    """The summaries, (when on) the community notes and (with ``vectors``: the turn's query is
    being embedded) their stored vectors, as the turn's read found them (``TurnQuery``:
    ``summaries``, ``community`` = ``plan.community``, ``summary_vectors`` = ``vectors``)."""
    summaries = load_summaries(state.summaries, keys.summary("sum", conv))
    notes = keys.summary("notes", conv)
    community = load_community(state.community, notes) if plan.community else None
    return ChannelMemory(summaries, community, dict(state.summary_vectors) if vectors else {})


def due(
    conv: ConversationKey,
    plan: SummaryPlan,
    now: datetime,
    *,
    waiting: bool,
    touch: bool,
    ttl_seconds: int,
    queue: str = DEFAULT_QUEUE,
) -> SummaryDue | None:
    """The conversation's summary schedule after an answered turn, as a change of its commit:
    due now when lines wait, at the end of the day with the user's activity record (``touch``,
    which also keeps the scope's settings ``ttl_seconds``, the history's TTL); else None."""
    if not (waiting or touch):
        return None
    moment = now if waiting else next_day_due(now)
    return SummaryDue(
        conv,
        queue,
        due_ms=int(moment.timestamp() * 1000),
        ttl_days=plan.ttl_days if touch else None,
        community=plan.community,
        ttl_seconds=ttl_seconds,
    )


# -- forgetting ----------------------------------------------------------------------------------
@dataclass
class Forgotten:
    summaries: int = 0
    notes: int = 0


async def forget_user(
    store: SummaryStore, platform: str, user_id: str, conversations: Iterable[ConversationKey]
) -> Forgotten:
    """Drop every summary fed by ``user_id``'s lines, every note sourced from them and a mood
    they contributed to, in ``conversations`` and wherever the user's summary index points.
    (Their lines awaiting a summary are history lines: ``HistoryStore.forget_author``.)"""

    def drop(stored: Stored) -> Dropped:
        summaries = load_summaries(stored.summaries)
        community = load_community(stored.notes)
        kept = [s for s in summaries if user_id not in s.users]
        notes = tuple(n for n in community.notes if n.user != user_id)
        mood_gone = user_id in community.mood_users
        left = community.model_copy(update={"notes": notes})
        if mood_gone:
            left = left.model_copy(update={"mood": "", "mood_users": (), "mood_at": None})
        gone_summaries, gone_notes = len(summaries) - len(kept), len(community.notes) - len(notes)
        return Dropped(
            dump_summaries(kept) if kept else None,
            None if left == Community() else dump_community(left),
            gone_summaries,
            gone_notes,
            changed=bool(gone_summaries or gone_notes or mood_gone),
        )

    done = Forgotten()
    for dropped in await store.forget(platform, user_id, conversations, drop):
        done.summaries += dropped.summaries_gone
        done.notes += dropped.notes_gone
    return done
