"""A deterministic stand-in for an embedding model: the loopback OpenAI and Gemini servers'
``/embeddings`` and ``batchEmbedContents`` answer with it, and ``bench/recall.py`` calls it
in-process.

Why not random vectors: the tests must show that a paraphrase ("any vegetarian dinner ideas?")
finds a note that shares no word with it ("eats no meat"), as a real model does, and that an
unrelated note does not. So each content word (stemmed, stop words dropped, as the lexical
scorer does) adds a signed hashed component for itself (weight 0.5) and one for its concept in
a small synonym table (weight 1.0): words of one concept land near each other, everything else
is near-orthogonal. It is a bag of concepts, not a language model; figures measured with it show
what the recall pipeline does with a model that knows these synonyms, not a vendor's quality.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

from bot.memory.relevance import terms

DIM = 256
_WORD_WEIGHT = 0.5
_CONCEPT_WEIGHT = 1.0

CONCEPTS: dict[str, tuple[str, ...]] = {
    "diet_veg": ("vegetarian", "vegan", "veggie", "meat", "meatless", "plant", "tofu", "beef"),
    "meal": (
        "dinner",
        "lunch",
        "breakfast",
        "eat",
        "eats",
        "food",
        "meal",
        "cook",
        "recipe",
        "dish",
        "restaurant",
        "snack",
        "cuisine",
    ),
    "pet": ("dog", "puppy", "cat", "kitten", "pet", "labrador", "terrier", "vet", "walk"),
    "music": ("guitar", "piano", "drums", "band", "song", "music", "chord", "violin", "sing"),
    "work": (
        "job",
        "work",
        "office",
        "employer",
        "career",
        "boss",
        "colleague",
        "shift",
        "nurse",
        "hospital",
        "engineer",
    ),
    "travel": (
        "trip",
        "travel",
        "vacation",
        "holiday",
        "flight",
        "visit",
        "abroad",
        "japan",
        "tokyo",
        "kyoto",
        "itinerary",
    ),
    "allergy": (
        "allergic",
        "allergy",
        "peanut",
        "nut",
        "gluten",
        "intolerant",
        "lactose",
        "dairy",
        "celiac",
        "bread",
        "milk",
    ),
    "language": (
        "spanish",
        "french",
        "german",
        "language",
        "learn",
        "fluent",
        "duolingo",
        "grammar",
        "vocabulary",
        "italian",
    ),
    "family": ("kid", "child", "children", "daughter", "son", "baby", "toddler", "family"),
    "fitness": (
        "run",
        "running",
        "marathon",
        "jog",
        "cycling",
        "bike",
        "gym",
        "training",
        "exercise",
        "race",
        "workout",
    ),
    "coding": (
        "python",
        "rust",
        "programming",
        "code",
        "developer",
        "typescript",
        "software",
        "debug",
        "compiler",
        "project",
    ),
    "home": (
        "live",
        "lives",
        "moved",
        "city",
        "apartment",
        "berlin",
        "lisbon",
        "neighborhood",
        "town",
        "house",
    ),
    "sleep": ("sleep", "insomnia", "night", "tired", "nap", "awake", "bedtime"),
    "games": ("game", "gaming", "chess", "minecraft", "console", "play", "zelda", "board"),
    "reading": ("book", "novel", "read", "reading", "author", "fantasy", "library", "sci"),
    "weather_cold": ("cold", "winter", "snow", "freezing", "heat", "hot", "summer", "warm"),
}
_CONCEPT_OF = {
    stem: concept for concept, words in CONCEPTS.items() for w in words for stem in terms(w)
}


def _component(token: str) -> tuple[int, float]:
    digest = hashlib.blake2b(token.encode(), digest_size=4).digest()
    index = int.from_bytes(digest[:3], "big") % DIM
    return index, 1.0 if digest[3] & 1 else -1.0


def embed_text(text: str, dimensions: int | None = None) -> list[float]:
    """The loopback model's vector of ``text`` (unit length; all zeros for no content words);
    ``dimensions`` keeps the first components, renormalised, as a Matryoshka model does."""
    vector = [0.0] * DIM
    for term in terms(text):
        index, sign = _component("w:" + term)
        vector[index] += sign * _WORD_WEIGHT
        concept = _CONCEPT_OF.get(term)
        if concept is not None:
            index, sign = _component("c:" + concept)
            vector[index] += sign * _CONCEPT_WEIGHT
    vector = vector[: dimensions or DIM]
    norm = math.sqrt(sum(x * x for x in vector))
    return [round(x / norm, 6) for x in vector] if norm else vector


class LoopbackEmbedder:
    """``bot.memory.vectors.Embedder`` over ``embed_text``, in process (no network)."""

    def __init__(self, name: str = "openai:loopback-embed", *, delay: float = 0.0) -> None:
        self.name = name
        self.delay = delay
        self.calls: list[list[str]] = []
        self.fail: BaseException | None = None

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        import asyncio

        self.calls.append(list(texts))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        return [embed_text(text) for text in texts]

    async def aclose(self) -> None:
        return None
