"""The summaries and community notes of a prompt's ``<context>`` block, under their budgets.

Every character here is paid on every turn, so each part has a budget of its own
(CHORUS_SUMMARY_CHARS, CHORUS_COMMUNITY_CHARS) on top of CHORUS_CONTEXT_CHARS. Summaries are
chosen by relevance to the message (``bot.memory.relevance``'s ``Scorer``/``select``, the same
API the pins use; with an embedding model the hybrid score of ``bot.memory.vectors`` over the
vectors the summariser stored, when the turn's query was embedded in time, so a paraphrase
sharing no word with a summary still finds it), best first, then the most recent
day (what a channel talked about yesterday is the likeliest background); what fits is shown in
date order. Notes: relevant ones first, then the most confident. The mood line, when there is
one, comes first.

All of it was written by a model from users' lines, so it is data: one printable line per
entry, ``&``/``<``/``>`` as entities, each entry length-limited (``enrichment``'s rule).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import TypeVar

import prompts
from bot.memory.buffers import MemorySettings, clean_text, clip
from bot.memory.relevance import STOP_WORDS, Scorer, TextScorer, select
from bot.memory.summaries import MOOD_MAX, NOTE_TEXT_MAX, SUMMARY_TEXT_MAX, Community, Note, Summary
from bot.memory.vectors import Recalled

T = TypeVar("T")
_WORD = re.compile(r"\w+", re.UNICODE)


@lru_cache(maxsize=4096)
def keywords(text: str) -> str:
    """``text`` reduced to its distinct words minus stop words, in order: the same terms for
    the scorer (which stems each word it gets) at a fraction of the words. A channel's summaries
    are the same from turn to turn, so each is reduced once per process."""
    words = (w for w in _WORD.findall(text.casefold()) if w not in STOP_WORDS)
    return " ".join(dict.fromkeys(words))


def data(text: str) -> str:
    """User-derived text as data: one printable line, no tag can open or close."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class _ByKeywords:
    """The lexical ``Scorer`` of ``keywords``-reduced texts, scoring a full text: the hybrid
    scorer then finds the vector of the full text (what the summariser embedded)."""

    def __init__(self, message: str, texts: Sequence[str]) -> None:
        self.scorer = Scorer(message, [keywords(t) for t in texts])

    def score(self, text: str) -> float:
        return self.scorer.score(keywords(text))


def scorer_for(
    message: str,
    texts: Sequence[str],
    settings: MemorySettings,
    recall: Recalled | None = None,
    vectors: Mapping[str, str] | None = None,
) -> tuple[TextScorer, float]:
    """The scorer of ``texts`` (summaries' or notes' own texts) and its threshold: lexical, or
    hybrid over ``vectors`` (the ``vec`` hash) when the query was embedded in time."""
    lexical = _ByKeywords(message, texts)
    if recall is None or recall.query is None:
        return lexical, settings.summary_threshold
    return recall.scorer(lexical, settings, vectors or {}), settings.recall_threshold


def _ranked(
    items: Sequence[T], scored: tuple[TextScorer, float], text_of: Callable[[T], str]
) -> list[T]:
    """Items relevant to the message (best first), then the rest in their given order."""
    scorer, threshold = scored
    relevant = [s.item for s in select(scorer, items, text_of, threshold=threshold, limit=99)]
    return relevant + [item for item in items if item not in relevant]


def summaries_block(
    summaries: Sequence[Summary],
    text: str,
    settings: MemorySettings,
    recall: Recalled | None = None,
    vectors: Mapping[str, str] | None = None,
) -> str:
    """The ``<summaries>`` section for a message (empty when nothing fits or exists)."""
    if not summaries or settings.summary_chars <= 0:
        return ""
    recent = sorted(summaries, key=lambda s: s.day, reverse=True)
    scorer, threshold = scorer_for(text, [s.text for s in recent], settings, recall, vectors)
    relevant = select(scorer, recent, lambda s: s.text, threshold=threshold, limit=len(recent))
    order = [s.item for s in relevant]
    if recent[0] not in order:
        order.append(recent[0])
    ranked = [(s.day, _summary_line(s.day, s.text)) for s in order]
    return _fit("memory/context_summaries", ranked, settings.summary_chars)  # in date order


def community_block(
    community: Community | None,
    text: str,
    settings: MemorySettings,
    recall: Recalled | None = None,
    vectors: Mapping[str, str] | None = None,
) -> str:
    """The ``<community>`` section: the mood, then the notes that fit (empty when none)."""
    if community is None or settings.community_chars <= 0:
        return ""
    ranked: list[tuple[str, str]] = []
    if community.mood:
        mood = clip(clean_text(community.mood), MOOD_MAX)
        ranked.append(("0", prompts.render("memory/context_mood", mood=data(mood))))
    by_confidence = sorted(community.notes, key=lambda n: -n.confidence)
    scored = scorer_for(text, [n.text for n in by_confidence], settings, recall, vectors)
    notes = _ranked(by_confidence, scored, _note_text)
    ranked += [(f"1{n:03d}", _note_line(note.kind, note.text)) for n, note in enumerate(notes)]
    return _fit("memory/context_community", ranked, settings.community_chars)


def _fit(name: str, ranked: Sequence[tuple[str, str]], budget: int) -> str:
    """Section ``name`` with the ``(key, line)`` pairs taken in the given (priority) order while
    it stays within ``budget`` characters, listed by key; empty when none fits."""
    taken: dict[str, str] = {}
    for key, line in ranked:
        trial = {**taken, key: line}
        if len(_section(name, trial)) <= budget:
            taken = trial
    return _section(name, taken) if taken else ""


def _section(name: str, taken: dict[str, str]) -> str:
    return prompts.render(name, lines="\n".join(taken[key] for key in sorted(taken)))


@lru_cache(maxsize=4096)
def _summary_line(day: str, text: str) -> str:
    """A summary as its data line (cleaning is per character: done once per process)."""
    return f"- {day}: " + data(clip(clean_text(text), SUMMARY_TEXT_MAX))


@lru_cache(maxsize=4096)
def _note_line(kind: str, text: str) -> str:
    return f"- {kind}: " + data(clip(clean_text(text), NOTE_TEXT_MAX))


def _note_text(note: Note) -> str:
    return note.text
