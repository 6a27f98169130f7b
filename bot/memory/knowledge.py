"""A scope's knowledge base: the operator's documents cut into chunks, stored in Redis, searched
in process.

Why chunks: a model needs the paragraph that answers, with where it came from, not the whole
FAQ in every prompt. A document is cut at its Markdown headings, then at blank lines, and long
paragraphs at sentence ends, so no chunk exceeds ``max_chars``; each keeps its source (file path
or URL) and the heading path above it ("Rules > Voice chat"), so the prompt and the
``search_knowledge`` tool can name where an answer is from.

Why a version counter: the reply path must not read hundreds of chunks per message. It reads
one small integer in the router's pipelined read; ``KnowledgeCache`` keeps each base's chunks,
term sets and vectors in process and reloads them only when the indexer bumped the version.

Search is the lexical ``Scorer`` (IDF over the chunks) mixed with the cosine of stored vectors
when an embedding model is configured (``HybridScorer.mix``).
"""

from __future__ import annotations

import hashlib
import json
import re
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

from bot.memory.relevance import Scorer, terms
from bot.memory.vectors import cosine, dequantise, mix, vector_norm
from bot.state.knowledge import KnowledgeStore

_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class Chunk:
    source: str
    heading: str
    text: str

    @property
    def where(self) -> str:
        """``source`` and, when there is one, ``# heading``: how a chunk is cited."""
        return f"{self.source} # {self.heading}" if self.heading else self.source

    def to_json(self) -> list[str]:
        return [self.source, self.heading, self.text]


def base_id(sources: Sequence[str]) -> str:
    """The Redis id of the knowledge base over ``sources`` (scopes with the same list share it)."""
    joined = "\n".join(sorted(set(sources)))
    return hashlib.blake2b(joined.encode(), digest_size=8).hexdigest()


def chunk_text(source: str, text: str, max_chars: int) -> list[Chunk]:
    """``text`` (Markdown or plain) cut at headings, then paragraphs, then sentences."""
    chunks: list[Chunk] = []
    path: list[tuple[int, str]] = []  # (level, title) of the headings above
    lines: list[str] = []

    def flush() -> None:
        body = "\n".join(lines).strip()
        lines.clear()
        if body:
            chunks.extend(_pack(source, " > ".join(t for _, t in path), body, max_chars))

    for line in text.splitlines():
        match = _HEADING.match(line)
        if match is None:
            lines.append(line)
            continue
        flush()
        level = len(match.group(1))
        while path and path[-1][0] >= level:
            path.pop()
        path.append((level, match.group(2).strip()))
    flush()
    return chunks


def _pack(source: str, heading: str, body: str, max_chars: int) -> list[Chunk]:
    pieces: list[str] = []
    for paragraph in re.split(r"\n\s*\n", body):
        paragraph = " ".join(paragraph.split())
        while len(paragraph) > max_chars:
            cut = max((m.end() for m in _SENTENCE_END.finditer(paragraph[:max_chars])), default=0)
            if cut < max_chars // 3:
                cut = paragraph.rfind(" ", 0, max_chars) + 1 or max_chars
            pieces.append(paragraph[:cut].strip())
            paragraph = paragraph[cut:].strip()
        if paragraph:
            pieces.append(paragraph)
    packed: list[str] = []
    for piece in pieces:  # small paragraphs of one section share a chunk
        if packed and len(packed[-1]) + 2 + len(piece) <= max_chars:
            packed[-1] += "\n\n" + piece
        else:
            packed.append(piece)
    return [Chunk(source, heading, text) for text in packed]


@dataclass(frozen=True)
class Hit:
    chunk: Chunk
    score: float


@dataclass
class KnowledgeIndex:
    """One base's chunks with their term sets and vectors, ready to search."""

    version: int
    model: str
    chunks: list[Chunk]
    vectors: list[str | None]
    docs: list[frozenset[str]] = field(default_factory=list)
    _decoded: list[tuple[array[int], float] | None] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        """Term sets, decoded vectors and their norms once per version, not per query."""
        if not self.docs:
            self.docs = [frozenset(terms(f"{c.heading} {c.text}")) for c in self.chunks]
        for i in range(len(self.chunks)):
            stored = self.vectors[i] if i < len(self.vectors) else None
            packed = dequantise(stored) if stored else None
            self._decoded.append((packed, vector_norm(packed)) if packed else None)

    def search(
        self,
        query: str,
        query_vector: Sequence[float] | None,
        *,
        limit: int,
        threshold: float,
        weight: float = 0.7,
        floor: float = 0.2,
    ) -> list[Hit]:
        """The ``limit`` best chunks for ``query`` above ``threshold``, best first: lexical,
        or hybrid (``vectors.mix``) for chunks with a vector when there is a ``query_vector``."""
        lexical = Scorer(query, (), docs=self.docs or [frozenset()])
        hits = []
        for i, chunk in enumerate(self.chunks):
            score = lexical.score_terms(self.docs[i])
            decoded = self._decoded[i]
            if query_vector is not None and decoded is not None:
                cos = cosine(query_vector, *decoded)
                score = mix(score, cos, weight=weight, floor=floor)
            if score > threshold:
                hits.append((score, i, chunk))
        hits.sort(key=lambda hit: (-hit[0], hit[1]))
        return [Hit(chunk, score) for score, _, chunk in hits[:limit]]


class KnowledgeCache:
    """Every base this process has read, reloaded from Redis when its version moves."""

    def __init__(self, store: KnowledgeStore) -> None:
        self.store = store
        self._bases: dict[str, KnowledgeIndex] = {}

    def cached(self, base: str) -> KnowledgeIndex | None:
        return self._bases.get(base)

    async def get(self, base: str, version: int) -> KnowledgeIndex | None:
        """The base at ``version`` (one extra round trip when it changed since the last read)."""
        if version <= 0:
            return None
        index = self._bases.get(base)
        if index is not None and index.version == version:
            return index
        index = await load_index(self.store, base)
        if index is not None:
            self._bases[base] = index
        return index


async def load_index(store: KnowledgeStore, base: str) -> KnowledgeIndex | None:
    stored = await store.load(base)
    if stored is None:
        return None
    data = json.loads(stored.chunks)
    chunks = [Chunk(*row) for row in data["chunks"]]
    return KnowledgeIndex(
        stored.version,
        str(data.get("model", "")),
        chunks,
        [stored.vectors.get(str(i)) for i in range(len(chunks))],
    )


async def save_index(
    store: KnowledgeStore,
    base: str,
    chunks: Sequence[Chunk],
    vectors: Sequence[str | None],
    model: str,
) -> int:
    """Replace a base's chunks and vectors in one step; returns the new version."""
    payload = json.dumps({"model": model, "chunks": [c.to_json() for c in chunks]})
    return await store.save(base, payload, {str(i): v for i, v in enumerate(vectors) if v})
