"""Recall benchmark: does a fact told days ago reach the prompt when it matters?

Eight scripted people each tell five facts over three daily sessions (each fact is the pin the
insights agent writes from it); then the channel chats on for 60 messages, so the history
(CHORUS_HISTORY_MAX, 40) no longer holds any fact, and two days later each person asks two
questions per fact: one sharing a word with it, one paraphrase sharing none
(``bench/recall_data.py``). A question counts as recalled when its fact is in the prompt: the
trimmed history (``HistoryStore`` on the embedded store) or the context block the router renders
(``render_context`` at today's defaults: 2 pins, CHORUS_CONTEXT_CHARS 800). Scored three ways:
lexical (today's IDF score), embedding only (``CHORUS_RECALL_WEIGHT=1``) and hybrid (default
0.7), with the loopback embedder in process (deterministic, no network).

Also measured: the reply path's added latency (median read stage with and without recall, on
real Redis, loopback embedder in process), the in-process search cost at real vendors' vector
sizes (is a vector index needed?), and Redis bytes per user with vectors (``MEMORY USAGE``).
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from bench.memory import REAL
from bench.recall_data import CHATTER, PEOPLE
from bot.events import Author, ChatMessage, ConversationKey
from bot.memory.buffers import MemorySettings, MemoryStore, Pin, UserBuffer
from bot.memory.enrichment import note_texts, render_context
from bot.memory.knowledge import Chunk, KnowledgeIndex
from bot.memory.recall import Recall
from bot.memory.vectors import Recalled, quantise, text_id, unit
from bot.state import connect, keys
from bot.state.history import HistoryEntry, HistoryStore
from tests.loopback.embedding_model import LoopbackEmbedder, embed_text
from tests.memory_samples import full_buffer
from tests.turn_rig import read_turn

DAY0 = datetime(2026, 11, 1, 19, 0, tzinfo=UTC)
ASKED = DAY0 + timedelta(days=5)  # two days after the last session
OTHER_PINS = ("uses dark mode everywhere", "prefers short answers", "streams on Fridays")
MODEL = "openai:loopback-embed"


def _message(person: str, text: str, n: int, at: datetime) -> ChatMessage:
    return ChatMessage(
        platform="discord",
        id=f"{person}-{n}",
        conversation=ConversationKey(platform="discord", channel="general"),
        author=Author(id=person, display_name=person.title()),
        text=text,
        sent_at=at,
    )


def _buffer(person: str) -> UserBuffer:
    pins = []
    for text, session, _ in PEOPLE[person]:
        at = DAY0 + timedelta(days=session - 1)
        pins.append(Pin(text=text, source="m1", confidence=0.8, created_at=at, updated_at=at))
    for text in OTHER_PINS:
        pins.append(Pin(text=text, source="m2", confidence=0.9, created_at=DAY0, updated_at=DAY0))
    return UserBuffer(platform="discord", user_id=person, pins=tuple(pins))


async def _trimmed_history() -> list[HistoryEntry]:
    """The channel's history when the questions come: the sessions, then 60 lines of chatter."""
    redis = await connect.open_redis(f"memory://bench-recall-{uuid.uuid4().hex[:8]}")
    history = HistoryStore(redis, max_messages=40, ttl_seconds=7 * 86400)
    conv = ConversationKey(platform="discord", channel="general")
    n = 0
    for session in (1, 2, 3):
        for person, facts in PEOPLE.items():
            for text, said, _ in facts:
                if said == session:
                    n += 1
                    at = DAY0 + timedelta(days=session - 1, minutes=n)
                    await history.append(conv, _entry(person, f"fyi I {text}", n, at))
    for i in range(60):
        n += 1
        at = ASKED - timedelta(hours=2, minutes=60 - i)
        await history.append(conv, _entry("zed", CHATTER[i % len(CHATTER)], n, at))
    entries = await history.load(conv)
    await redis.aclose()
    return entries


def _entry(person: str, text: str, n: int, at: datetime) -> HistoryEntry:
    return HistoryEntry(
        role="user",
        text=text,
        message_id=f"h{n}",
        author_id=person,
        author_name=person,
        at=at,
    )


async def coverage() -> dict[str, dict[str, float]]:
    """Share of questions whose fact reaches the prompt, by scoring mode and question kind."""
    history = " ".join(e.text for e in await _trimmed_history())
    modes = {
        "lexical": None,
        "embedding": MemorySettings(CHORUS_RECALL_WEIGHT=1.0),  # type: ignore[call-arg]
        "hybrid": MemorySettings(),
    }
    out: dict[str, dict[str, float]] = {}
    for mode, settings in modes.items():
        hits = {"overlap": 0, "paraphrase": 0}
        total = {"overlap": 0, "paraphrase": 0}
        chars = []
        for person, facts in PEOPLE.items():
            buffer = _buffer(person)
            vectors = {text_id(MODEL, t): quantise(embed_text(t)) for t in note_texts(buffer)}
            for fact, _, questions in facts:
                for n, (question, paraphrase) in enumerate(questions):
                    kind = "paraphrase" if paraphrase else "overlap"
                    message = _message(person, question, n, ASKED)
                    recall = None
                    if settings is not None:
                        recall = Recalled(MODEL, unit(embed_text(question)), vectors)
                    block = render_context(
                        buffer, message, settings or MemorySettings(), ASKED, recall
                    )
                    total[kind] += 1
                    hits[kind] += fact in block or fact in history
                    chars.append(len(block))
        every = sum(total.values())
        out[mode] = {
            "all": sum(hits.values()) / every,
            "overlap": hits["overlap"] / total["overlap"],
            "paraphrase": hits["paraphrase"] / total["paraphrase"],
            "tokens": statistics.mean(chars) / 4,
            "max_chars": max(chars),
            "questions": every,
        }
    return out


async def reply_path_ms(url: str, rounds: int = 200) -> dict[str, float]:
    """Median time of the router's read stage with and without recall (loopback embedder in
    process)."""
    redis = await connect.open_redis(url)
    settings = MemorySettings(CHORUS_EMBEDDING_MODEL=MODEL)  # type: ignore[call-arg]
    memory = MemoryStore(redis, settings)
    history = HistoryStore(redis, max_messages=40, ttl_seconds=3600)
    recall = Recall(redis, settings, LoopbackEmbedder(MODEL))
    person = f"bench-{uuid.uuid4().hex[:8]}"
    buffer = _buffer("ada").model_copy(update={"user_id": person})
    await memory.save(buffer)
    await recall.refresh_user("discord", person, note_texts(buffer))
    timings: dict[str, list[float]] = {"lexical": [], "hybrid": []}
    try:
        for n in range(rounds):
            message = _message(person, "any vegetarian dinner ideas?", n, ASKED)
            for mode, used in (("lexical", None), ("hybrid", recall)):
                started = time.perf_counter()
                read = await read_turn(redis, history, memory, message, used)
                assert read is not None and read.buffer is not None
                render_context(read.buffer, message, settings, ASKED, read.recall)
                timings[mode].append((time.perf_counter() - started) * 1000)
    finally:
        await redis.delete(keys.memory("discord", person), keys.user_vectors("discord", person))
        await redis.aclose()
    lexical, hybrid = (statistics.median(timings[m]) for m in ("lexical", "hybrid"))
    return {"lexical": lexical, "hybrid": hybrid, "added": hybrid - lexical}


def search_cost(dims: int = 1536, notes: int = 30, chunks: int = 300) -> dict[str, float]:
    """Pure-Python scoring time at a real model's vector size: a user's notes, a scope's base."""
    rng = random.Random(5)
    query = unit([rng.gauss(0, 1) for _ in range(dims)])
    stored = [quantise([rng.gauss(0, 1) for _ in range(dims)]) for _ in range(chunks)]
    texts = [f"note number {i} about topic {i % 17}" for i in range(chunks)]
    buffer = UserBuffer(
        platform="discord",
        user_id="u",
        pins=tuple(
            Pin(text=texts[i], source="m", confidence=0.5, created_at=DAY0, updated_at=DAY0)
            for i in range(min(notes, 100))
        )[:20],
    )
    vectors = {text_id(MODEL, t): stored[i] for i, t in enumerate(note_texts(buffer))}
    message = _message("u", "topic 3 please", 1, ASKED)
    settings = MemorySettings()

    def timed(run: Callable[[], object], repeat: int) -> float:
        samples = []
        for _ in range(repeat):
            started = time.perf_counter()
            run()
            samples.append((time.perf_counter() - started) * 1000)
        return statistics.median(samples)

    hybrid = Recalled(MODEL, query, vectors)
    notes_ms = timed(lambda: render_context(buffer, message, settings, ASKED, hybrid), 41)
    lexical_ms = timed(lambda: render_context(buffer, message, settings, ASKED), 41)
    index = KnowledgeIndex(1, MODEL, [Chunk("faq.md", "", t) for t in texts], list(stored))
    chunks_ms = timed(lambda: index.search("topic 3 please", query, limit=4, threshold=0.1), 11)
    return {
        "notes_ms": notes_ms,
        "lexical_ms": lexical_ms,
        "chunks_ms": chunks_ms,
        "dims": dims,
        "chunks": chunks,
    }


async def redis_bytes(url: str) -> dict[int, tuple[int, int]]:
    """MEMORY USAGE of a full buffer (20 pins, 10 recommendations) and of its vectors, per size."""
    redis = await connect.open_redis(url)
    settings = MemorySettings()
    memory = MemoryStore(redis, settings)
    rng = random.Random(3)
    out = {}
    try:
        for dims in (256, 768, 1536):
            person = f"bench-{uuid.uuid4().hex[:8]}"
            buffer = await memory.save(full_buffer(person, "a"))
            key = keys.user_vectors("discord", person)
            mapping = {
                text_id(MODEL, t): quantise([rng.gauss(0, 1) for _ in range(dims)])
                for t in note_texts(buffer)
            }
            await redis.hset(key, mapping=dict(mapping))  # type: ignore[arg-type]
            out[dims] = (
                int(await redis.memory_usage(keys.memory("discord", person)) or 0),
                int(await redis.memory_usage(key) or 0),
            )
            await redis.delete(key, keys.memory("discord", person))
    finally:
        await redis.aclose()
    return out


async def main() -> list[str]:
    lines = ["## Recall: facts from earlier sessions in today's prompt", ""]
    cover = await coverage()
    questions = int(cover["lexical"]["questions"])
    lines += [
        f"{len(PEOPLE)} people, {questions} questions two days after the last session, "
        "history trimmed to 40 lines (no fact left in it); context budget CHORUS_CONTEXT_CHARS "
        "800, 2 pins per prompt (today's defaults).",
        "",
        "| scoring | recalled (all) | with a shared word | paraphrase | context tokens/question (chars/4) | largest block (chars) |",
        "|---|---|---|---|---|---|",
    ]
    for mode, row in cover.items():
        lines.append(
            f"| {mode} | {row['all']:.0%} | {row['overlap']:.0%} | {row['paraphrase']:.0%} "
            f"| {row['tokens']:.0f} | {row['max_chars']:.0f} |"
        )
    lines.append("")
    try:
        ms = await reply_path_ms(REAL)
        lines.append(
            f"Reply path (real Redis, loopback embedder in process, 200 reads): median read + "
            f"context {ms['lexical']:.2f} ms lexical, {ms['hybrid']:.2f} ms hybrid "
            f"(+{ms['added']:.2f} ms); no added round trip (vectors ride the turn's pipeline)."
        )
    except Exception as exc:
        lines.append(f"Reply path: not measured ({exc})")
    for dims in (256, 1536):
        cost = search_cost(dims)
        lines.append(
            f"In-process search, pure Python, {dims}-dim int8 vectors (medians): a context "
            f"block over 20 notes {cost['notes_ms']:.2f} ms hybrid vs {cost['lexical_ms']:.2f} ms "
            f"lexical; a knowledge base of {cost['chunks']:.0f} chunks {cost['chunks_ms']:.1f} ms "
            "per query."
        )
    lines += [
        "",
        "| vector size | buffer MEMORY USAGE bytes | vectors MEMORY USAGE bytes (30 notes) |",
        "|---|---|---|",
    ]
    try:
        for dims, (buffer_bytes, vector_bytes) in (await redis_bytes(REAL)).items():
            lines.append(f"| {dims} | {buffer_bytes} | {vector_bytes} |")
    except Exception as exc:
        lines.append(f"| (real Redis needed) | not measured: {exc} | |")
    return lines


if __name__ == "__main__":
    print("\n".join(asyncio.run(main())))
