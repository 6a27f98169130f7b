"""Semantic recall: int8 vectors, the hybrid score, and the reply path's race against the read
(over the embedded ``memory://`` twin and real Redis)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from redis.asyncio import Redis

from bot.events import Author, ChatMessage, ConversationKey
from bot.memory.buffers import MemorySettings, MemoryStore, Pin, Recommendation, UserBuffer
from bot.memory.enrichment import note_texts, render_context, selected
from bot.memory.recall import Recall
from bot.memory.relevance import Scorer, select
from bot.memory.vectors import (
    HybridScorer,
    Recalled,
    cosine,
    dequantise,
    quantise,
    store_vectors,
    text_id,
    unit,
)
from bot.ops.metrics import NullMetrics
from bot.router.answer import context_for
from bot.state import keys
from bot.state.history import HistoryStore
from bot.state.people import forgotten
from bot.state.vectors import VectorStore
from tests.loopback.embedding_model import LoopbackEmbedder, embed_text
from tests.turn_rig import read_turn

NOW = datetime(2026, 11, 20, 18, 0, tzinfo=UTC)
SETTINGS = MemorySettings(CHORUS_EMBEDDING_MODEL="openai:loopback-embed")  # type: ignore[call-arg]


_TAG = [""]


@pytest.fixture(autouse=True)
def _tagged(key_tag: str) -> Iterator[None]:
    """Ids carry the test's tag, so real Redis keys are the test's own (and cleaned up)."""
    _TAG[0] = key_tag
    yield
    _TAG[0] = ""


def uid(name: str) -> str:
    return name + _TAG[0]


class Counted(NullMetrics):
    def __init__(self) -> None:
        self.outcomes: list[str] = []

    def recall(self, outcome: str) -> None:
        self.outcomes.append(outcome)


def message(text: str, user: str = "u1", n: int = 1) -> ChatMessage:
    return ChatMessage(
        platform="discord",
        id=f"m{n}",
        conversation=ConversationKey(platform="discord", channel=uid("general")),
        author=Author(id=uid(user), display_name="Ada"),
        text=text,
        sent_at=NOW,
    )


def pin(text: str) -> Pin:
    at = NOW - timedelta(days=3)
    return Pin(text=text, source="m0", confidence=0.9, created_at=at, updated_at=at)


def buffer(*texts: str, user: str = "u1") -> UserBuffer:
    return UserBuffer(platform="discord", user_id=uid(user), pins=tuple(pin(t) for t in texts))


# -- vectors ---------------------------------------------------------------------------------
def test_int8_round_trip_keeps_the_cosine() -> None:
    rng = random.Random(7)
    for _ in range(20):
        a = [rng.gauss(0, 1) for _ in range(768)]
        b = [x + rng.gauss(0, 1) for x in a]
        exact = sum(x * y for x, y in zip(unit(a), unit(b), strict=True))
        assert cosine(unit(a), dequantise(quantise(a))) > 0.999
        assert abs(cosine(unit(b), dequantise(quantise(a))) - exact) < 0.01
        assert len(quantise(a)) == 1024  # 768 bytes as base64: a quarter of float32's 3 KB


def test_a_broken_or_foreign_vector_scores_zero() -> None:
    assert len(dequantise("not base64!")) == 0
    assert cosine([1.0, 0.0], dequantise("not base64!")) == 0.0
    assert cosine([1.0, 0.0, 0.0], dequantise(quantise([1.0, 0.0]))) == 0.0  # another model's size


def test_hybrid_finds_a_paraphrase_lexical_misses() -> None:
    notes = buffer("eats no meat", "plays the guitar in a band", "works night shifts")
    ask = "any vegetarian dinner ideas?"
    assert selected(notes, ask, SETTINGS) == ([], [])  # no shared word
    vectors = {text_id("m", t): quantise(embed_text(t)) for t in note_texts(notes)}
    recall = Recalled("m", unit(embed_text(ask)), vectors)
    pins, _ = selected(notes, ask, SETTINGS, recall)
    assert [p.item.text for p in pins] == ["eats no meat"]


def test_hybrid_keeps_lexical_matches_and_notes_without_vectors() -> None:
    notes = buffer("has a dog named Rex", "plays the guitar")
    ask = "what should I feed my dog?"
    scorer = HybridScorer(
        Scorer(ask, note_texts(notes)),
        unit(embed_text(ask)),
        {},  # no vectors yet: the lexical score stands
        model="m",
        weight=0.7,
        floor=0.2,
    )
    assert scorer.score("has a dog named Rex") == Scorer(ask, note_texts(notes)).score(
        "has a dog named Rex"
    )
    recall = Recalled("m", unit(embed_text(ask)), {})
    pins, _ = selected(notes, ask, SETTINGS, recall)
    assert [p.item.text for p in pins] == ["has a dog named Rex"]


def test_without_a_query_vector_relevance_is_lexical() -> None:
    lexical = Scorer("x", ["eats no meat"])
    assert Recalled("m", None, {}).scorer(lexical, SETTINGS) is lexical


# -- the reply path ----------------------------------------------------------------------------
async def _stores(redis: Redis) -> tuple[HistoryStore, MemoryStore]:
    return HistoryStore(redis, max_messages=40, ttl_seconds=3600), MemoryStore(redis, SETTINGS)


@pytest.mark.redis
async def test_the_query_races_the_read_and_picks_the_paraphrase(redis_client: Redis) -> None:
    history, memory = await _stores(redis_client)
    await memory.save(buffer("eats no meat", "plays the guitar"))
    metrics = Counted()
    embedder = LoopbackEmbedder()
    recall = Recall(redis_client, SETTINGS, embedder, metrics=metrics)
    first = await read_turn(redis_client, history, memory, message("hello there"), recall)
    assert first is not None and first.recall is not None
    await recall.idle()  # the background refresh embedded the notes, off the reply path
    stored = await redis_client.hgetall(keys.user_vectors("discord", uid("u1")))
    assert len(stored) == 2
    assert await redis_client.ttl(keys.user_vectors("discord", uid("u1"))) > 0

    ask = message("any vegetarian dinner ideas?", n=2)
    read = await read_turn(redis_client, history, memory, ask, recall)
    assert read is not None and read.recall is not None and read.recall.query is not None
    block = context_for(read, ask, memory, NOW)
    assert "eats no meat" in block and "guitar" not in block
    assert metrics.outcomes == ["hybrid", "hybrid"]
    assert embedder.calls[-1] == ["any vegetarian dinner ideas?"]  # only the query, no notes


@pytest.mark.redis
async def test_a_slow_embedder_falls_back_to_lexical_and_is_counted(redis_client: Redis) -> None:
    history, memory = await _stores(redis_client)
    await memory.save(buffer("eats no meat", "has a dog"))
    settings = SETTINGS.model_copy(update={"embedding_deadline": 0.05})
    metrics = Counted()
    recall = Recall(redis_client, settings, LoopbackEmbedder(delay=30), metrics=metrics)
    ask = message("is my dog hungry?")
    read = await read_turn(redis_client, history, memory, ask, recall)
    for task in list(recall._tasks):
        task.cancel()  # the background refresh would wait out the slow embedder
    assert read is not None and read.recall is not None and read.recall.query is None
    assert metrics.outcomes == ["timeout"]
    block = render_context(read.buffer or buffer(), ask, settings, NOW, read.recall)
    assert "has a dog" in block and "eats no meat" not in block  # lexical only


@pytest.mark.redis
async def test_a_failing_embedder_falls_back_to_lexical(redis_client: Redis) -> None:
    history, memory = await _stores(redis_client)
    metrics = Counted()
    embedder = LoopbackEmbedder()
    embedder.fail = RuntimeError("endpoint down")
    recall = Recall(redis_client, SETTINGS, embedder, metrics=metrics)
    read = await read_turn(redis_client, history, memory, message("hello"), recall)
    assert read is not None and read.recall is not None and read.recall.query is None
    assert metrics.outcomes == ["error"]


@pytest.mark.redis
async def test_only_the_speakers_own_vectors_are_read(redis_client: Redis) -> None:
    history, memory = await _stores(redis_client)
    embedder = LoopbackEmbedder()
    recall = Recall(redis_client, SETTINGS, embedder)
    await memory.save(buffer("eats no meat", user="bob"))
    await recall.refresh_user("discord", uid("bob"), ["eats no meat"])
    read = await read_turn(
        redis_client, history, memory, message("vegetarian dinner?", user="eve"), recall
    )
    assert read is not None and read.recall is not None
    assert dict(read.recall.vectors) == {}
    assert "meat" not in context_for(read, message("vegetarian dinner?", user="eve"), memory, NOW)


@pytest.mark.redis
async def test_store_vectors_embeds_only_new_texts_and_prunes(redis_client: Redis) -> None:
    embedder = LoopbackEmbedder()
    key = keys.user_vectors("discord", uid("u9"))
    assert (
        await store_vectors(
            VectorStore(redis_client), embedder, key, ["a cat", "a dog"], ttl_seconds=60
        )
        == 2
    )
    assert (
        await store_vectors(
            VectorStore(redis_client), embedder, key, ["a dog", "a fish"], ttl_seconds=60
        )
        == 1
    )
    assert embedder.calls == [["a cat", "a dog"], ["a fish"]]
    stored = await redis_client.hgetall(key)
    assert set(stored) == {text_id(embedder.name, "a dog"), text_id(embedder.name, "a fish")}


@pytest.mark.redis
async def test_forget_deletes_the_vectors(redis_client: Redis) -> None:
    _, memory = await _stores(redis_client)
    recall = Recall(redis_client, SETTINGS, LoopbackEmbedder())
    await recall.refresh_user("discord", uid("u1"), ["eats no meat"])
    await memory.store.forget([forgotten(("discord", uid("u1")), NOW)], person=None)
    assert not await redis_client.exists(keys.user_vectors("discord", uid("u1")))


async def test_a_duplicate_turn_cancels_the_query() -> None:
    recall = Recall(None, SETTINGS, LoopbackEmbedder(delay=30))  # type: ignore[arg-type]
    pending = recall.begin(message("something to embed"), memory=True)
    assert pending.task is not None and pending.vectors and pending.base is None
    pending.abandon()
    with pytest.raises(asyncio.CancelledError):
        await pending.task
    assert recall.begin(message("/pins"), memory=True).task is None  # commands: not embedded


def test_recommendations_are_scored_with_their_tool() -> None:
    notes = UserBuffer(
        platform="discord",
        user_id="u1",
        recommendations=(
            Recommendation(text="likes short answers", tool="current_time", created_at=NOW),
        ),
    )
    assert note_texts(notes) == ["likes short answers current time"]


def test_hybrid_never_ranks_a_note_below_its_keyword_score() -> None:
    notes = buffer("has a labrador named Biscuit", "works night shifts as a nurse", "eats no meat")
    ask = "is Biscuit due for a bath?"  # a name the embedding relates to nothing
    vectors = {text_id("m", t): quantise(embed_text(t)) for t in note_texts(notes)}
    hybrid = Recalled("m", unit(embed_text(ask)), vectors)
    pins, _ = selected(notes, ask, SETTINGS, hybrid)
    assert [p.item.text for p in pins] == ["has a labrador named Biscuit"]
    cosine_only = SETTINGS.model_copy(update={"recall_weight": 1.0})
    assert selected(notes, ask, cosine_only, hybrid) == ([], [])  # weight 1: the cosine alone


@pytest.mark.redis
async def test_a_failed_refresh_pauses_refreshes(redis_client: Redis) -> None:
    history, memory = await _stores(redis_client)
    await memory.save(buffer("eats no meat"))
    embedder = LoopbackEmbedder()
    embedder.fail = RuntimeError("endpoint down")
    recall = Recall(redis_client, SETTINGS, embedder)
    for n in range(3):
        await read_turn(redis_client, history, memory, message("/pins", n=n), recall)
        await recall.idle()
    assert embedder.calls == [["eats no meat"]]  # one failed refresh, then a pause


@pytest.mark.redis
async def test_any_collection_can_be_stored_and_ranked_by_meaning(redis_client: Redis) -> None:
    """What conversation summaries use: ``store_vectors`` off the reply path, then the turn's
    query vector over that collection's vectors with ``select``."""
    embedder = LoopbackEmbedder()
    key = keys.user("discord", uid("chan"), "sumvec")
    summaries = ["the channel planned a trip to Kyoto", "everyone argued about guitar strings"]
    assert (
        await store_vectors(VectorStore(redis_client), embedder, key, summaries, ttl_seconds=600)
        == 2
    )
    vectors = {str(k): str(v) for k, v in (await redis_client.hgetall(key)).items()}
    ask = "what was our itinerary again?"
    recalled = Recalled(embedder.name, unit(embed_text(ask)), {})
    scorer = recalled.scorer(Scorer(ask, summaries), SETTINGS, vectors)
    chosen = select(scorer, summaries, lambda s: s, threshold=0.15, limit=1)
    assert [c.item for c in chosen] == ["the channel planned a trip to Kyoto"]
    assert select(Scorer(ask, summaries), summaries, lambda s: s, threshold=0.1, limit=1) == []
