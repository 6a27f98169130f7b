"""Semantic recall on the reply path: the query's embedding raced against the turn's one read.

Why this shape: embedding the message is a network call, and the reply path allows one round
trip (the turn's read, ``bot.state.turn``). So ``begin`` starts the embedding request as a task
before the read is sent; the read also carries what recall needs (the speaker's stored vectors,
the scope's knowledge-base version: ``Pending.vectors``, ``Pending.base``); ``finish`` then
gives the embedding what is left of CHORUS_EMBEDDING_DEADLINE (300 ms by default, counted
from ``begin``). In time: hybrid scoring. Late or failed: the request is cancelled, the turn uses the lexical
score, and ``chorus_recall_queries{outcome="timeout"|"error"}`` counts it.

Vectors are never computed on the reply path: when the speaker's notes lack vectors (new pins,
a new model), ``finish`` starts a background refresh (one embedding request, one write), kept
in a task set and drained by ``aclose``. The insights worker's new pins get theirs on the
speaker's next turn.

Only the speaker's own vectors are read (their platform + user id), like their buffer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import prompts
from bot.events import ChatMessage
from bot.memory.buffers import UserBuffer
from bot.memory.enrichment import data_text, note_texts
from bot.memory.knowledge import Hit, KnowledgeCache, base_id
from bot.memory.vectors import Embedder, Recalled, store_vectors, text_id, unit
from bot.ops.metrics import MetricsSink, NullMetrics
from bot.settings.memory import MemorySettings
from bot.state import keys
from bot.state.connect import Client
from bot.state.knowledge import KnowledgeStore
from bot.state.turn import TurnState
from bot.state.vectors import VectorStore

log = logging.getLogger("chorus.recall")

REFRESH_PAUSE = 60.0  # seconds without note refreshes after one failed (the model is down)
KNOWLEDGE_THRESHOLD = 0.1  # lexical and hybrid scores alike: below this a chunk is off topic


@dataclass(frozen=True)
class Pending:
    """One turn's recall in flight: its query embedding (None: no model, or a command), when it
    started, the scope's knowledge base, and whether the speaker's vectors are read."""

    message: ChatMessage
    task: asyncio.Task[list[float]] | None
    began: float
    base: str | None
    vectors: bool

    def abandon(self) -> None:
        """The turn will not be answered (a duplicate, an error): stop the query."""
        if self.task is not None:
            self.task.cancel()


class Recall:
    """The embedder, the knowledge cache and the reply-path race, for one process."""

    def __init__(
        self,
        redis: Client,
        settings: MemorySettings,
        embedder: Embedder | None,
        *,
        knowledge_of: Callable[[ChatMessage], Sequence[str]] = lambda message: (),
        metrics: MetricsSink | None = None,
    ) -> None:
        self.redis = redis
        self.settings = settings
        self.embedder = embedder
        self.knowledge_of = knowledge_of
        self.metrics: MetricsSink = metrics or NullMetrics()
        self.cache = KnowledgeCache(KnowledgeStore(redis))
        self._tasks: set[asyncio.Task[object]] = set()
        self._refreshing: set[tuple[str, str]] = set()
        self._refresh_paused_until = 0.0  # after a failed refresh: no request per turn
        self._bases: dict[tuple[str, ...], str] = {}  # a scope's sources -> its base id

    @property
    def model(self) -> str:
        return self.embedder.name if self.embedder is not None else ""

    # -- the reply path ---------------------------------------------------------------------
    def begin(self, message: ChatMessage, *, memory: bool) -> Pending:
        """Start embedding the message (unless there is no model or it is a command) and work
        out what the turn's read must carry for recall."""
        text = message.text.strip()
        task = None
        if self.embedder is not None and text and not text.startswith("/"):
            task = asyncio.create_task(self._embed_query(text))
        return Pending(
            message, task, time.monotonic(), self.base_of(message), memory and bool(self.embedder)
        )

    async def _embed_query(self, text: str) -> list[float]:
        assert self.embedder is not None
        [vector] = await self.embedder.embed([text])
        return unit(vector)

    def base_of(self, message: ChatMessage) -> str | None:
        sources = tuple(self.knowledge_of(message))
        if not sources:
            return None
        base = self._bases.get(sources)
        if base is None:
            base = self._bases[sources] = base_id(sources)
        return base

    async def finish(
        self, pending: Pending, state: TurnState, buffer: UserBuffer | None
    ) -> Recalled:
        """The turn's ``Recalled`` from what its read found and the embedding, if in time."""
        vectors = dict(state.user_vectors) if pending.vectors else {}
        base, message = pending.base, pending.message
        version = state.knowledge_version if base is not None else 0
        query = await self._query(pending)
        knowledge = ""
        if base is not None and version and not message.text.lstrip().startswith("/"):
            hits = await self.search(base, version, message.text, query, limit=4)
            knowledge = self.render_knowledge(hits)
        if buffer is not None and self.embedder is not None:
            self._refresh_if_stale(buffer, vectors)
        return Recalled(self.model, query, vectors, knowledge)

    async def _query(self, pending: Pending) -> list[float] | None:
        task, began = pending.task, pending.began
        if task is None:
            return None
        left = self.settings.embedding_deadline - (time.monotonic() - began)
        try:
            done, _ = await asyncio.wait({task}, timeout=max(0.0, left))
        except BaseException:  # the turn is cancelled: so is its query
            task.cancel()
            raise
        if not done:
            task.cancel()
            self.metrics.recall("timeout")
            return None
        error = task.exception()
        if error is not None:
            log.warning("query embedding failed; lexical relevance", extra={"error": str(error)})
            self.metrics.recall("error")
            return None
        self.metrics.recall("hybrid")
        return task.result()

    # -- knowledge ----------------------------------------------------------------------------
    async def search(
        self, base: str, version: int, text: str, query: Sequence[float] | None, *, limit: int
    ) -> list[Hit]:
        index = await self.cache.get(base, version)
        if index is None:
            return []
        if index.model != self.model:
            query = None  # vectors of another model (or none): lexical until re-indexed
        return index.search(
            text,
            query,
            limit=limit,
            threshold=KNOWLEDGE_THRESHOLD,
            weight=self.settings.recall_weight,
            floor=self.settings.recall_floor,
        )

    async def search_for(self, message: ChatMessage, text: str, *, limit: int) -> list[Hit] | None:
        """The ``search_knowledge`` tool's search (None: this scope has no knowledge base);
        the query is embedded with the full CHORUS_EMBEDDING_TIMEOUT, not the reply deadline."""
        base = self.base_of(message)
        if base is None:
            return None
        version = await self.cache.store.version(base)
        query: list[float] | None = None
        if self.embedder is not None:
            try:
                query = await self._embed_query(text)
            except Exception as exc:
                log.warning("knowledge query embedding failed", extra={"error": str(exc)})
        return await self.search(base, version, text, query, limit=limit)

    def render_knowledge(self, hits: Sequence[Hit]) -> str:
        """The ``<knowledge>`` block: excerpts with their sources, within CHORUS_KNOWLEDGE_CHARS."""
        budget = self.settings.knowledge_chars
        lines: list[str] = []
        used = 0
        for hit in hits:
            source = data_text(hit.chunk.where).replace('"', "&quot;")
            line = prompts.render(
                "memory/knowledge_excerpt", source=source, text=data_text(hit.chunk.text)
            )
            if used + len(line) > budget:
                continue
            lines.append(line)
            used += len(line)
        return prompts.render("memory/knowledge", lines="\n".join(lines)) if lines else ""

    # -- vectors off the reply path ------------------------------------------------------------
    def _refresh_if_stale(self, buffer: UserBuffer, vectors: dict[str, str]) -> None:
        texts = note_texts(buffer)
        wanted = {text_id(self.model, t) for t in texts}
        if wanted == set(vectors):
            return
        who = (buffer.platform, buffer.user_id)
        if who in self._refreshing or time.monotonic() < self._refresh_paused_until:
            return
        self._refreshing.add(who)
        task = asyncio.create_task(self._refresh(buffer, texts), name="recall-refresh")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _refresh(self, buffer: UserBuffer, texts: list[str]) -> None:
        try:
            await self.refresh_user(buffer.platform, buffer.user_id, texts)
        except Exception as exc:
            self._refresh_paused_until = time.monotonic() + REFRESH_PAUSE
            log.warning("could not embed a user's notes", extra={"error": str(exc)})
        finally:
            self._refreshing.discard((buffer.platform, buffer.user_id))

    async def refresh_user(self, platform: str, user_id: str, texts: Sequence[str]) -> int:
        """Embed and store the vectors of a user's notes (``texts``: ``note_texts``)."""
        if self.embedder is None:
            return 0
        key = keys.user_vectors(platform, user_id)
        ttl = self.settings.ttl_seconds
        return await store_vectors(
            VectorStore(self.redis), self.embedder, key, texts, ttl_seconds=ttl
        )

    async def idle(self) -> None:
        """Wait for the background refreshes running now (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def aclose(self) -> None:
        await self.idle()
        if self.embedder is not None:
            await self.embedder.aclose()
