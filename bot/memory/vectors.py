"""Embedding vectors: stored compactly in Redis, compared in-process, mixed with the lexical score.

Why int8: a vendor's vector is 768-3072 float32s (3-12 KB); a user has a few dozen notes and a
knowledge base a few hundred chunks, so the vectors would dwarf the 4 KB memory buffer. Each
component is stored as one signed byte, ``round(x / max|x| * 127)``: a quarter of float32, and
a cosine against the stored vector stays within ~0.01 of the exact one
(``tests/test_recall.py``), far below the gap between a related note and an unrelated one. The connection decodes replies as text, so the bytes travel as base64 (4/3).

Why no vector index: the reply path scores one user's own few dozen vectors and, where a scope
has a knowledge base, its few hundred chunks, all held in process; a pure-Python dot product of
1536 int8 components takes tens of microseconds, so a ranking is a millisecond or two
(``bench/recall.py`` measures it). RediSearch is a module most Redis deployments do not have;
it would pay off past tens of thousands of chunks per scope.

``HybridScorer`` is a ``relevance.TextScorer``: the lexical ``Scorer`` when there is no query
vector or no vector for a note, else ``max(w * cos' + (1 - w) * lex', lex')`` where
``lex' = min(lexical, 1)`` and ``cos' = max(0, (cos - floor) / (1 - floor))`` (a cosine below
``floor`` counts as unrelated: real embedding models put unrelated sentences at 0.0-0.2). The
``max`` keeps what words alone find: a rare name ("Biscuit") that an embedding model does not
relate to anything still ranks as high as it does lexically; the embedding only lifts notes.
``weight`` 1 (CHORUS_RECALL_WEIGHT=1) is the cosine alone.

``Bounded`` gives an embedder an overall deadline per call (CHORUS_BACKGROUND_MODEL_DEADLINE),
so background embedding (knowledge bases, notes' and summaries' vectors) never waits forever.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import math
import operator
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from bot.memory.relevance import Scorer, TextScorer
from bot.settings.memory import MemorySettings
from bot.state.vectors import VectorStore

SCALE = 127


class Embedder(Protocol):
    """Turns texts into vectors (``bot.llm.embeddings`` has the vendors' implementations)."""

    name: str  # provider:model, part of every stored vector's id

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...

    async def aclose(self) -> None: ...


class Bounded:
    """``embedder`` with an overall deadline per ``embed`` call (retries included): a stuck
    embedding model raises ``TimeoutError`` after ``deadline`` seconds instead of holding a
    background job (a knowledge base's refresh, a user's or a summary's vectors) forever. The
    reply path bounds its query much tighter itself (``bot.memory.recall``)."""

    def __init__(self, embedder: Embedder, deadline: float) -> None:
        self.embedder = embedder
        self.deadline = deadline
        self.name = embedder.name

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        async with asyncio.timeout(self.deadline):
            return await self.embedder.embed(texts)

    async def aclose(self) -> None:
        await self.embedder.aclose()


def bounded(embedder: Embedder | None, deadline: float) -> Embedder | None:
    """``embedder`` under ``Bounded`` (None stays None: no embedding model)."""
    return None if embedder is None else Bounded(embedder, deadline)


def unit(vector: Sequence[float]) -> list[float]:
    """``vector`` scaled to length 1 (the zero vector stays zero)."""
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm else [0.0 for _ in vector]


def quantise(vector: Sequence[float]) -> str:
    """The stored form: base64 of the components as signed bytes, scaled so the largest is
    +-127 (a cosine does not depend on the scale, so it is not stored)."""
    peak = max((abs(x) for x in vector), default=0.0) or 1.0
    packed = array("b", (max(-SCALE, min(SCALE, round(x / peak * SCALE))) for x in vector))
    return base64.b64encode(packed.tobytes()).decode("ascii")


def dequantise(stored: str) -> array[int]:
    """The signed bytes of a stored vector (empty when it is not valid base64)."""
    try:
        raw = base64.b64decode(stored, validate=True)
    except ValueError:
        return array("b")
    packed = array("b")
    packed.frombytes(raw)
    return packed


def cosine(query: Sequence[float], stored: array[int], norm: float | None = None) -> float:
    """Cosine of a unit ``query`` and a stored vector (0.0 when their sizes differ);
    ``norm``: the stored vector's, when the caller keeps it (``vector_norm``)."""
    if len(query) != len(stored) or not stored:
        return 0.0
    norm = vector_norm(stored) if norm is None else norm
    return sum(map(operator.mul, query, stored)) / norm if norm else 0.0


def vector_norm(stored: array[int]) -> float:
    return math.sqrt(sum(map(operator.mul, stored, stored)))


def text_id(model: str, text: str) -> str:
    """The id of ``text``'s vector: a new model or new wording is a new vector."""
    return hashlib.blake2b(f"{model}\0{text}".encode(), digest_size=8).hexdigest()


class HybridScorer:
    """Lexical relevance mixed with the cosine of the query and each note's stored vector."""

    def __init__(
        self,
        lexical: TextScorer,
        query: Sequence[float] | None,
        vectors: Mapping[str, str],
        *,
        model: str,
        weight: float,
        floor: float,
    ) -> None:
        self.lexical = lexical
        self.query = query
        self.vectors = vectors
        self.model = model
        self.weight = weight
        self.floor = floor

    @property
    def semantic(self) -> bool:
        return self.query is not None

    def score(self, text: str) -> float:
        lexical = self.lexical.score(text)
        stored = self.vectors.get(text_id(self.model, text)) if self.query is not None else None
        if stored is None or self.query is None:
            return lexical
        return self.mix(lexical, cosine(self.query, dequantise(stored)))

    def mix(self, lexical: float, cos: float) -> float:
        return mix(lexical, cos, weight=self.weight, floor=self.floor)


def mix(lexical: float, cos: float, *, weight: float, floor: float) -> float:
    """The hybrid score of a lexical score and a cosine (see the module docstring)."""
    near = max(0.0, (cos - floor) / (1.0 - floor))
    word = min(lexical, 1.0)
    blended = weight * near + (1.0 - weight) * word
    return round(blended if weight >= 1.0 else max(blended, word), 6)


async def store_vectors(
    store: VectorStore,
    embedder: Embedder,
    key: str,
    texts: Iterable[str],
    *,
    ttl_seconds: int | None,
    prune: bool = True,
) -> int:
    """Embed the ``texts`` whose vector ``key`` (a hash) lacks and store them; with ``prune``
    drop the vectors of texts no longer listed. Returns how many texts were embedded.

    For any collection of short texts scored with ``HybridScorer`` (pins, recommendations,
    conversation summaries): the hash maps ``text_id`` -> ``quantise(vector)``. Never call it
    on the reply path: it is one embedding request.
    """
    wanted = {text_id(embedder.name, text): text for text in texts if text.strip()}
    present = await store.ids(key)
    missing = [(tid, text) for tid, text in wanted.items() if tid not in present]
    stale = [tid for tid in present if tid not in wanted] if prune else []
    vectors = await embedder.embed([text for _, text in missing]) if missing else []
    if not missing and not stale:
        return 0
    added = {tid: quantise(v) for (tid, _), v in zip(missing, vectors, strict=True)}
    await store.update(key, added, stale, ttl_seconds=ttl_seconds if wanted else None)
    return len(missing)


@dataclass(frozen=True)
class Recalled:
    """What a turn's read brought for relevance: the query's vector (None: lexical only, no
    model or it missed its deadline), the speaker's stored vectors, the knowledge block."""

    model: str = ""
    query: list[float] | None = None
    vectors: Mapping[str, str] = field(default_factory=dict)
    knowledge: str = ""

    def scorer(
        self,
        lexical: Scorer | TextScorer,
        settings: MemorySettings,
        vectors: Mapping[str, str] | None = None,
    ) -> Scorer | TextScorer:
        """``lexical``, or the hybrid over it when the query was embedded in time. ``vectors``:
        another collection's stored vectors (e.g. conversation summaries, read in the turn's
        pipeline and stored with ``store_vectors``); default the speaker's notes'."""
        if self.query is None:
            return lexical
        return HybridScorer(
            lexical,
            self.query,
            self.vectors if vectors is None else vectors,
            model=self.model,
            weight=settings.recall_weight,
            floor=settings.recall_floor,
        )
