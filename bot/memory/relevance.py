"""Which remembered notes are relevant to the message being answered.

Only a couple of a user's pins and one recommendation go into each prompt (every character costs
tokens on every turn), so each candidate gets a score against the new message and only the best
ones above a threshold are used. The score keeps the shape of the reference design -- keyword
overlap plus a boost when the note touches the first words of the message -- and fixes its
weaknesses: words are stemmed ("veganism" meets "vegan"), stop words never count ("the", "is"),
and each word is weighted by how rare it is among the user's own notes (BM25's IDF), so a word
that appears in every note says little about which one fits.

    terms(x)  = distinct stems of x's words, minus stop words and one-letter tokens
                (for a message: its first ``MAX_QUERY_TERMS`` terms, in order)
    w(t)      = ln(1 + (N - n_t + 0.5) / (n_t + 0.5))    N = the user's notes, n_t = notes with t
    overlap   = sum(w(t) for t in terms(msg) & terms(note)) / sum(w(t) for t in terms(msg))
    boost     = FIRST_WORDS_BOOST (0.2) if terms(note) meets the first 3 terms of msg, else 0
    score     = overlap + boost               a note is used when score > threshold

A message term that no note contains gets the highest weight, so an off-topic message dilutes
every score: notes appear only when the message is about them. Ties keep the caller's order.
The stemmer is a small suffix stripper, not Porter's: it only has to map a word and its
inflections to the same key, consistently on both sides, and it leaves non-ASCII words alone.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

T = TypeVar("T")

FIRST_WORDS = 3
FIRST_WORDS_BOOST = 0.2
MAX_QUERY_TERMS = 32

_WORD = re.compile(r"\w+", re.UNICODE)

_STOP_TEXT = """
    a about above after again against all am an and any are aren as at be because been before
    being below between both but by can cannot could couldn did didn do does doesn doing don down
    during each few for from further had hadn has hasn have haven having he her here hers herself
    him himself his how i if in into is isn it its itself just let ll me more most my myself no
    nor not now of off on once only or other ought our ours ourselves out over own re same she
    should shouldn so some such than that the their theirs them themselves then there these they
    this those through to too under until up ve very was wasn we were weren what when where which
    while who whom why will with won would wouldn you your yours yourself yourselves
    also get got really much many lot lots thing things something anything maybe
    hi hey hello thanks thank please ok okay yes yeah yep nope lol haha pls thx
    user users person people someone
"""
STOP_WORDS = frozenset(_STOP_TEXT.split())

# Longest first; each strips once, then undoubling and a final "e" make inflections converge.
_SUFFIXES = (
    "izations",
    "ization",
    "ational",
    "fulness",
    "ousness",
    "iveness",
    "ations",
    "ation",
    "ments",
    "ment",
    "nesses",
    "ness",
    "isms",
    "ism",
    "ists",
    "ist",
    "ings",
    "ing",
    "edly",
    "ers",
    "er",
    "ed",
    "ly",
    "es",
    "s",
)
_Y_SUFFIXES = ("ies", "ied")
_MIN_STEM = 3


def stem(word: str) -> str:
    """A light English stemmer: ``veganism``/``vegans`` -> ``vegan``, ``running`` -> ``run``."""
    if len(word) <= _MIN_STEM or not word.isascii() or not word.isalpha():
        return word
    for suffix in _Y_SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= _MIN_STEM - 1:
            return word[: -len(suffix)] + "y"
    for suffix in _SUFFIXES:
        if not word.endswith(suffix) or len(word) - len(suffix) < _MIN_STEM:
            continue
        if suffix == "s" and word[-2] in "su":  # "class", "status" are not plurals
            break
        word = word[: -len(suffix)]
        break
    if len(word) > _MIN_STEM and word[-1] == word[-2] and word[-1] not in "aeiousl":
        word = word[:-1]  # runn -> run, stopp -> stop
    if len(word) > _MIN_STEM and word.endswith("e"):
        word = word[:-1]  # like / liked / liking -> lik
    return word


def terms(text: str) -> list[str]:
    """The distinct content terms of ``text`` in order of first appearance."""
    seen: dict[str, None] = {}
    for match in _WORD.finditer(text.casefold()):
        word = match.group().strip("_")
        if len(word) < 2 or word in STOP_WORDS or word.isdigit() and len(word) < 3:
            continue
        seen.setdefault(stem(word), None)
    return list(seen)


def jaccard(a: Iterable[str], b: Iterable[str]) -> float:
    """Overlap of two term sets (1.0 when both are empty)."""
    set_a, set_b = set(a), set(b)
    if not set_a and not set_b:
        return 1.0
    return len(set_a & set_b) / len(set_a | set_b)


@dataclass(frozen=True)
class Scored(Generic[T]):
    item: T
    score: float


class TextScorer(Protocol):
    """What ``select`` ranks with: the lexical ``Scorer`` or ``bot.memory.vectors.HybridScorer``."""

    def score(self, text: str) -> float: ...


class Scorer:
    """Scores notes against one message, with IDF weights from the user's own notes."""

    def __init__(
        self, message: str, corpus: Sequence[str], *, docs: Sequence[AbstractSet[str]] = ()
    ) -> None:
        """``docs``: the corpus's term sets when the caller keeps them (a knowledge base)."""
        self._query = terms(message)[:MAX_QUERY_TERMS]
        self._first = set(self._query[:FIRST_WORDS])
        docs = list(docs) or [set(terms(text)) for text in corpus]
        size = len(docs)
        self._weight = {
            term: math.log(1 + (size - n + 0.5) / (n + 0.5))
            for term in self._query
            for n in [sum(term in doc for doc in docs)]
        }
        self._total = sum(self._weight.values())

    def score(self, text: str) -> float:
        return self.score_terms(set(terms(text)))

    def score_terms(self, note: AbstractSet[str]) -> float:
        """``score`` of a text whose term set is already known."""
        if not self._total:
            return 0.0
        shared = [term for term in self._query if term in note]
        if not shared:
            return 0.0
        overlap = sum(self._weight[term] for term in shared) / self._total
        boost = FIRST_WORDS_BOOST if self._first & note else 0.0
        return round(overlap + boost, 6)


def select(
    scorer: TextScorer,
    items: Sequence[T],
    text_of: Callable[[T], str],
    *,
    threshold: float,
    limit: int,
) -> list[Scored[T]]:
    """The ``limit`` best items scoring above ``threshold``, best first (ties: input order)."""
    if limit <= 0:
        return []
    scored = [Scored(item, scorer.score(text_of(item))) for item in items]
    ranked = sorted(
        (entry for entry in enumerate(scored) if entry[1].score > threshold),
        key=lambda entry: (-entry[1].score, entry[0]),
    )
    return [entry for _, entry in ranked[:limit]]
