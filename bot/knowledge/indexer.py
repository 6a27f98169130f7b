"""Keeping each knowledge base fresh: read the operator's files and URLs, chunk, embed, store.

Sources are what a scope's ``knowledge`` list (or CHORUS_KNOWLEDGE_PATHS) names: a Markdown or
text file, a PDF (its text layer, page by page, through ``pypdf``: the ``pdf`` extra), a folder
(its ``.md``, ``.markdown``, ``.txt``, ``.rst`` and ``.pdf`` files, recursively), or an
``http(s)`` URL. Files and folders are read by ``files``: never outside their folder, named
relative to it, within the base's bounds (CHORUS_KNOWLEDGE_MAX_FILES, CHORUS_KNOWLEDGE_MAX_BYTES,
which the URLs count towards too). URLs go through the tools' SSRF-guarded ``Fetcher`` with the
knowledge base's own allow list (CHORUS_KNOWLEDGE_FETCH_ALLOW lets an operator name an internal
host; CHORUS_FETCH_ALLOW is the chat tools' and does not apply), so a knowledge list cannot be
turned against the network the bot runs in. Relative paths are relative to the working
directory.

Freshness: every CHORUS_KNOWLEDGE_REFRESH seconds, and at once on ``chorus reload``, each base's
sources get a mark (a file's mtime and size, a URL's body digest); an unchanged set of marks
costs nothing more, files are not even read. A changed one re-chunks the base and re-embeds only
chunks whose text is new (vectors are reused by text digest), then replaces chunks and vectors
in one transaction and bumps the version the reply path watches. With several processes, a
short Redis lock per base (``SET NX``) lets one of them do the work per interval.

A source that cannot be read is logged and skipped (and left out of the stored marks, so the
next pass tries it again); the rest of the base is indexed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from bot.knowledge.files import Budget, Listed, list_source, read_listed
from bot.memory.knowledge import Chunk, base_id, chunk_text, load_index, save_index
from bot.memory.vectors import Embedder, quantise, text_id
from bot.settings.memory import MemorySettings
from bot.state.connect import Client
from bot.state.knowledge import KnowledgeStore
from bot.tools.base import ToolError
from bot.tools.builtin.fetch import Fetcher, readable_text

log = logging.getLogger("chorus.knowledge")

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
START_WAIT = 30.0  # seconds a start waits for the first indexing pass


@dataclass(frozen=True)
class Report:
    base: str
    sources: int
    chunks: int
    embedded: int
    changed: bool


class KnowledgeIndexer:
    """Indexes the bases ``bases()`` names, on a schedule and on demand."""

    def __init__(
        self,
        redis: Client,
        settings: MemorySettings,
        embedder: Embedder | None,
        fetcher: Fetcher,
        *,
        bases: Callable[[], Iterable[Sequence[str]]],
    ) -> None:
        self.store = KnowledgeStore(redis)
        self.settings = settings
        self.embedder = embedder
        self.fetcher = fetcher
        self.bases = bases
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._first_pass = asyncio.Event()

    # -- schedule ------------------------------------------------------------------------------
    async def start(self, wait: float = START_WAIT) -> None:
        """Start the schedule and wait (at most ``wait`` seconds) for the first pass, so the
        first messages after a start find the knowledge base; a slow source finishes later."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="knowledge-indexer")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait):
                await self._first_pass.wait()

    def reindex(self) -> None:
        """Check every base now (``chorus reload``), not at the next interval."""
        self._wake.set()

    async def _run(self) -> None:
        force = False
        while True:
            await self.index_all(force=force)
            self._first_pass.set()
            self._wake.clear()
            try:
                async with asyncio.timeout(self.settings.knowledge_refresh):
                    await self._wake.wait()
                force = True
            except TimeoutError:
                force = False

    async def index_all(self, *, force: bool = False) -> list[Report]:
        reports = []
        for sources in {tuple(s) for s in self.bases() if s}:
            try:
                reports.append(await self.index(sources, force=force))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("knowledge base not indexed", extra={"sources": len(sources)})
        return reports

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    # -- one base ------------------------------------------------------------------------------
    async def index(self, sources: Sequence[str], *, force: bool = False) -> Report:
        """Bring the base over ``sources`` up to date (``force``: now, even if a process checked
        it within the interval)."""
        base = base_id(sources)
        ttl_ms = max(1000, int(self.settings.knowledge_refresh * 900))
        if not force and not await self.store.lock(base, secrets.token_hex(8), ttl_ms):
            return Report(base, len(sources), 0, 0, changed=False)
        problems: list[str] = []
        listed = await self._list_all(base, sources, problems)
        stored = await self.store.sources(base)
        if _marks(listed) == stored:
            await self.store.set_status(base, "unchanged", len(listed), problems)
            return Report(base, len(listed), 0, 0, changed=False)
        docs = await self._read(listed, problems)
        marks = _marks(docs)
        if marks == stored:  # what changed is a document that still cannot be read
            await self.store.set_status(base, "unchanged", len(docs), problems)
            return Report(base, len(docs), 0, 0, changed=False)
        chunks = [
            chunk
            for source, _, text in docs
            for chunk in chunk_text(source, text, self.settings.knowledge_chunk_chars)
        ]
        vectors, embedded = await self._vectors(base, chunks)
        model = self.embedder.name if self.embedder is not None else ""
        version = await save_index(self.store, base, chunks, vectors, model)
        await self.store.set_sources(base, marks)
        built = {"chunks": len(chunks), "vectors": sum(1 for v in vectors if v), "model": model}
        await self.store.set_status(base, "indexed", len(docs), problems, built)
        log.info(
            "knowledge base indexed",
            extra={"base": base, "chunks": len(chunks), "embedded": embedded, "version": version},
        )
        return Report(base, len(docs), len(chunks), embedded, changed=True)

    async def _vectors(self, base: str, chunks: list[Chunk]) -> tuple[list[str | None], int]:
        if self.embedder is None or not chunks:
            return [None] * len(chunks), 0
        name = self.embedder.name
        old = await load_index(self.store, base)
        known: dict[str, str] = {}
        if old is not None and old.model == name:
            for chunk, vector in zip(old.chunks, old.vectors, strict=False):
                if vector:
                    known[text_id(name, _embedded_text(chunk))] = vector
        ids = [text_id(name, _embedded_text(c)) for c in chunks]
        missing = sorted({i: c for i, c in zip(ids, chunks, strict=True) if i not in known}.items())
        if missing:
            fresh = await self.embedder.embed([_embedded_text(c) for _, c in missing])
            known.update({i: quantise(v) for (i, _), v in zip(missing, fresh, strict=True)})
        return [known.get(i) for i in ids], len(missing)

    async def _list_all(
        self, base: str, sources: Sequence[str], problems: list[str]
    ) -> list[tuple[str, str, Listed | str]]:
        """``(name, mark, file or text)`` of every document of ``sources`` within the base's
        bounds: a URL fetched (its text), a file listed (read only if the marks changed)."""
        memory = self.settings
        budget = Budget(base, memory.knowledge_max_files, memory.knowledge_max_bytes)
        found: list[tuple[str, str, Listed | str]] = []
        for source in sources:
            if budget.full:
                break
            try:
                if source.startswith(("http://", "https://")):
                    url, mark, text, size = await self._fetch(source)
                    if budget.take(url, size):
                        found.append((url, mark, text))
                    continue
                follow = memory.knowledge_follow_symlinks
                files = await asyncio.to_thread(list_source, source, follow=follow, budget=budget)
                found.extend((item.name, item.mark, item) for item in files)
            except (OSError, ToolError) as exc:
                log.warning("knowledge source skipped", extra={"source": source, "error": str(exc)})
                problems.append(f"{source}: skipped: {exc}")
        return found

    async def _read(
        self, listed: list[tuple[str, str, Listed | str]], problems: list[str]
    ) -> list[tuple[str, str, str]]:
        """``(name, mark, text)`` of every listed document that can be read."""
        timeout = self.settings.knowledge_pdf_timeout
        docs = []
        for name, mark, item in listed:
            if isinstance(item, str):
                docs.append((name, mark, item))
                continue
            try:
                text = await asyncio.to_thread(read_listed, item, pdf_timeout=timeout)
            except (OSError, RuntimeError, UnicodeDecodeError) as exc:
                log.warning(
                    "knowledge file unreadable; skipped",
                    extra={"document": name, "error": str(exc)},
                )
                problems.append(f"{name}: unreadable: {exc}")
                continue
            docs.append((name, mark, text))
        return docs

    async def _fetch(self, url: str) -> tuple[str, str, str, int]:
        page = await self.fetcher.get(url, accept="text/markdown,text/plain,text/html;q=0.9")
        text = page.text()
        if page.content_type in HTML_TYPES:
            title, body = readable_text(text)
            text = f"# {title}\n\n{body}" if title else body
        mark = hashlib.blake2b(page.body, digest_size=8).hexdigest()
        return url, mark, text, len(page.body)


def _marks(docs: Iterable[tuple[str, str, object]]) -> str:
    """A base's documents' names and marks as stored: what tells a changed base from an
    unchanged one."""
    return json.dumps(sorted((name, mark) for name, mark, _ in docs))


def _embedded_text(chunk: Chunk) -> str:
    """What a chunk's vector is of: its heading path and text."""
    return f"{chunk.heading}\n{chunk.text}" if chunk.heading else chunk.text
