"""Community memory: notes on a channel's recurring topics, norms and in-jokes, and its mood.

Off by default; a scope turns it on (``community_memory = true`` / CHORUS_COMMUNITY_MEMORY). It
runs on the same batch of lines as the summary (``insights.summariser``), one more structured
call. Provenance follows the pins' rule, enforced in code: each proposed note must cite a line
label of a *user's* line in the batch, or it is dropped; the note keeps that line's author,
message id and time, and the model's confidence (below ``MIN_CONFIDENCE``: dropped). The mood
is a property of all the batch's lines, so it lists every author in the batch.

Bounded: at most ``MAX_NOTES`` notes; a note that restates one already kept (same kind, word
overlap >= ``SAME_NOTE``) refreshes it instead of adding a copy; beyond the cap the least
confident, then the oldest, go.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

import prompts
from bot.events import ConversationKey
from bot.llm.types import LLMRequest
from bot.memory.buffers import clean_text, clip
from bot.memory.relevance import jaccard, terms
from bot.memory.summaries import MAX_NOTES, MOOD_MAX, NOTE_TEXT_MAX, Community, Note
from bot.memory.summaries_context import data
from bot.state.history import HistoryEntry
from insights.summarise import authors, name, render_lines, structured_request

log = logging.getLogger("chorus.insights.community")

MAX_PROPOSALS = 4
MIN_CONFIDENCE = 0.5
SAME_NOTE = 0.6


class NoteProposal(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)  # built at the first job

    kind: Literal["topic", "norm", "joke"]
    text: str = Field(description=f"the note, at most {NOTE_TEXT_MAX} characters")
    source_line: str = Field(description="id of the user line that shows it, e.g. L3")
    confidence: float = Field(ge=0, le=1)


class CommunityAnswer(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)  # built at the first job

    notes: list[NoteProposal] = Field(default_factory=list)
    mood: str = Field(default="", description=f"at most {MOOD_MAX} characters, or empty")


def community_request(
    model: str, conv: ConversationKey, current: Community, entries: Sequence[HistoryEntry]
) -> LLMRequest:
    notes = "\n".join(f"- {n.kind}: {data(clean_text(n.text))}" for n in current.notes)
    text = prompts.render(
        "insights/community_request",
        notes=notes,
        where=name(str(conv)),
        lines=render_lines(entries, labels=True),
    )
    return structured_request(model, "insights/community_instructions", text, CommunityAnswer)


def sourced_notes(
    answer: CommunityAnswer, entries: Sequence[HistoryEntry]
) -> tuple[list[Note], int]:
    """The proposals that cite a user's line of the batch, as notes; returns (notes, dropped)."""
    by_label = {
        f"L{n}": entry
        for n, entry in enumerate(entries, 1)
        if entry.role == "user" and entry.author_id and entry.message_id
    }
    notes: list[Note] = []
    dropped = 0
    for proposal in answer.notes[:MAX_PROPOSALS]:
        line = by_label.get(proposal.source_line.strip())
        text = clip(clean_text(proposal.text), NOTE_TEXT_MAX)
        if line is None or not text or proposal.confidence < MIN_CONFIDENCE:
            dropped += 1
            continue
        notes.append(
            Note(
                kind=proposal.kind,
                text=text,
                user=line.author_id or "",
                message_id=line.message_id or "",
                at=line.at,
                confidence=proposal.confidence,
            )
        )
    if dropped:
        log.info(
            "community proposals dropped (no user line cited, or too unsure)",
            extra={"count": dropped},
        )
    return notes, dropped


def merge_notes(
    current: Community,
    notes: Sequence[Note],
    mood: str,
    entries: Sequence[HistoryEntry],
    now: datetime,
) -> Community:
    """``current`` with ``notes`` added (restated ones refreshed), capped, and the new mood."""
    kept = list(current.notes)
    for note in notes:
        words = set(terms(note.text))
        same = next(
            (
                i
                for i, old in enumerate(kept)
                if old.kind == note.kind and jaccard(words, terms(old.text)) >= SAME_NOTE
            ),
            None,
        )
        if same is None:
            kept.append(note)
        else:
            kept[same] = note
    kept.sort(key=lambda n: (n.confidence, n.at), reverse=True)
    mood = clip(clean_text(mood), MOOD_MAX)
    if not mood:
        return current.model_copy(update={"notes": tuple(kept[:MAX_NOTES])})
    return Community(
        notes=tuple(kept[:MAX_NOTES]),
        mood=mood,
        mood_users=tuple(authors(entries)),
        mood_at=now,
    )
