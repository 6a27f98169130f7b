"""The knowledge base: chunking, indexing files and URLs (embedded and real Redis), freshness,
the reply path's excerpts with their sources, and the ``search_knowledge`` tool."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import pytest
from aiohttp import web
from redis.asyncio import Redis

from bot.events import Author, ChatMessage, ConversationKey
from bot.knowledge import indexer as indexer_module
from bot.knowledge.indexer import KnowledgeIndexer
from bot.knowledge.tool import knowledge_tool
from bot.memory.buffers import MemorySettings
from bot.memory.knowledge import base_id, chunk_text, load_index
from bot.memory.recall import Recall
from bot.settings.allowlist import Allowlist
from bot.state import keys
from bot.state.knowledge import KnowledgeStore
from bot.tools.base import ToolContext
from bot.tools.builtin.fetch import Fetcher
from bot.tools.netguard import NetGuard
from tests.loopback.base import LoopbackServer
from tests.loopback.embedding_model import LoopbackEmbedder
from tests.redis_cluster import WITH_CLUSTER, store_url
from tests.turn_rig import read_recall

SETTINGS = MemorySettings()

RULES = """# Server rules

Be kind to each other.

## Voice chat

Push-to-talk is required in the voice channels after 10 pm. Music bots only in #music-voice.

## Events

The book club meets every Sunday at 18:00 UTC in the reading room.
"""


@pytest.fixture(params=WITH_CLUSTER)
def redis_url(request: pytest.FixtureRequest, key_tag: str) -> Iterator[str]:
    """The stores, and a Redis Cluster of three primaries (``tests/redis_cluster.py``)."""
    yield from store_url(request, key_tag)


KB_PARTS = ("version", "chunks", "vec", "sources", "lock")


@pytest.fixture
async def kb_redis(redis_client: Redis, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Redis]:
    """``redis_client``; afterwards the knowledge bases this test's indexers wrote are deleted (a
    base's keys carry a digest of its sources, not the test's tag)."""
    bases: set[str] = set()

    def recorded(sources: Sequence[str]) -> str:
        bases.add(base_id(sources))
        return base_id(sources)

    monkeypatch.setattr(indexer_module, "base_id", recorded)
    yield redis_client
    for base in bases:
        await redis_client.delete(*(keys.knowledge(base, part) for part in KB_PARTS))


def message(text: str, channel: str = "general") -> ChatMessage:
    return ChatMessage(
        platform="discord",
        id="m1",
        conversation=ConversationKey(platform="discord", channel=channel),
        author=Author(id="u1", display_name="Ada"),
        text=text,
    )


def test_chunks_keep_their_heading_path_and_stay_bounded() -> None:
    chunks = chunk_text("rules.md", RULES, 600)
    assert [(c.heading, c.text[:20]) for c in chunks] == [
        ("Server rules", "Be kind to each othe"),
        ("Server rules > Voice chat", "Push-to-talk is requ"),
        ("Server rules > Events", "The book club meets "),
    ]
    assert chunks[1].where == "rules.md # Server rules > Voice chat"
    long = "# FAQ\n\n" + " ".join(f"Sentence number {n} is here." for n in range(200))
    pieces = chunk_text("faq.md", long, 300)
    assert len(pieces) > 10 and all(len(c.text) <= 300 for c in pieces)
    assert all(c.text.endswith(".") for c in pieces)  # cut at sentence ends
    assert chunk_text("plain.txt", "one\n\ntwo", 300)[0].text == "one\n\ntwo"  # packed, no heading


class Docs(LoopbackServer):
    def routes(self) -> list[web.RouteDef]:
        return [web.get("/faq", self.faq)]

    async def faq(self, request: web.Request) -> web.Response:
        await self.record(request)
        body = "<html><title>FAQ</title><main><p>Refunds are possible within 14 days.</p></main>"
        return web.Response(text=body, content_type="text/html")


@pytest.fixture
async def docs() -> AsyncIterator[Docs]:
    async with Docs() as server:
        yield server


def _fetcher(server: LoopbackServer) -> Fetcher:
    port = server.url.rsplit(":", 1)[1]
    return Fetcher(NetGuard(allow=Allowlist.parse([f"127.0.0.1:{port}"])))


@pytest.mark.redis
async def test_index_files_and_urls_then_search_with_sources(
    kb_redis: Redis, tmp_path: Path, docs: Docs
) -> None:
    rules = tmp_path / "rules.md"
    rules.write_text(RULES)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "pets.txt").write_text("Dogs are welcome in the garden channel photos.")
    (tmp_path / "notes" / "image.png").write_bytes(b"\x89PNG")  # not a text file: skipped
    sources = (str(rules), str(tmp_path / "notes"), docs.url + "/faq", str(tmp_path / "missing"))
    embedder = LoopbackEmbedder()
    indexer = KnowledgeIndexer(
        kb_redis, SETTINGS, embedder, _fetcher(docs), bases=lambda: [sources]
    )
    [report] = await indexer.index_all()
    assert (report.chunks, report.embedded, report.changed) == (5, 5, True)
    index = await load_index(KnowledgeStore(kb_redis), base_id(sources))
    assert index is not None and index.model == embedder.name and all(index.vectors)
    assert {c.source for c in index.chunks} == {"rules.md", "notes/pets.txt", docs.url + "/faq"}

    recall = Recall(kb_redis, SETTINGS, embedder, knowledge_of=lambda m: sources)
    hits = await recall.search_for(message("when does the book club meet?"), "book club", limit=2)
    assert hits is not None and hits[0].chunk.where == "rules.md # Server rules > Events"
    web_hits = await recall.search_for(message("x"), "refund", limit=1)
    assert web_hits is not None and web_hits[0].chunk.source == docs.url + "/faq"
    assert web_hits[0].chunk.heading == "FAQ"


@pytest.mark.redis
async def test_unchanged_sources_cost_nothing_and_a_change_reembeds_only_new_text(
    kb_redis: Redis, tmp_path: Path
) -> None:
    rules = tmp_path / "rules.md"
    rules.write_text(RULES)
    embedder = LoopbackEmbedder()
    indexer = KnowledgeIndexer(
        kb_redis, SETTINGS, embedder, Fetcher(), bases=lambda: [(str(rules),)]
    )
    first = await indexer.index((str(rules),), force=True)
    again = await indexer.index((str(rules),), force=True)
    assert (first.changed, again.changed) == (True, False)
    version = await kb_redis.get(keys.knowledge(base_id((str(rules),)), "version"))
    rules.write_text(RULES + "\n## Bots\n\nAsk a moderator before adding a bot.\n")
    stat = rules.stat()
    os.utime(rules, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    changed = await indexer.index((str(rules),), force=True)
    assert (changed.changed, changed.chunks, changed.embedded) == (True, 4, 1)
    now = await kb_redis.get(keys.knowledge(base_id((str(rules),)), "version"))
    assert int(str(now)) == int(str(version)) + 1


@pytest.mark.redis
async def test_the_prompt_carries_relevant_excerpts_with_sources_within_budget(
    kb_redis: Redis, tmp_path: Path
) -> None:
    rules = tmp_path / "rules.md"
    rules.write_text(RULES)
    sources = (str(rules),)
    indexer = KnowledgeIndexer(kb_redis, SETTINGS, None, Fetcher(), bases=lambda: [sources])
    await indexer.index_all()
    recall = Recall(kb_redis, SETTINGS, None, knowledge_of=lambda m: sources)
    ask = message("is push-to-talk required in voice chat?")
    pending = recall.begin(ask, memory=True)
    recalled = await recall.finish(pending, await read_recall(kb_redis, pending), None)
    assert 'source="rules.md # Server rules &gt; Voice chat"' in recalled.knowledge
    assert (
        "Push-to-talk is required" in recalled.knowledge and "book club" not in recalled.knowledge
    )
    assert len(recalled.knowledge) < SETTINGS.knowledge_chars + 300
    off_topic = message("hello, how are you?")
    pending = recall.begin(off_topic, memory=True)
    assert (
        await recall.finish(pending, await read_recall(kb_redis, pending), None)
    ).knowledge == ""


@pytest.mark.redis
async def test_search_knowledge_tool_answers_from_the_askers_scope(
    kb_redis: Redis, tmp_path: Path
) -> None:
    rules = tmp_path / "rules.md"
    rules.write_text(RULES)
    sources = (str(rules),)
    await KnowledgeIndexer(kb_redis, SETTINGS, None, Fetcher(), bases=lambda: [sources]).index_all()
    recall = Recall(
        kb_redis,
        SETTINGS,
        None,
        knowledge_of=lambda m: sources if m.conversation.channel == "general" else (),
    )
    tool = knowledge_tool(recall)
    assert tool.spec.name == "search_knowledge"
    assert set(tool.spec.parameters["properties"]) == {"query", "limit"}
    ctx = ToolContext(message=message("?"))
    answer = await tool.call({"query": "music bots"}, ctx)
    assert answer.startswith("[1] source: rules.md # Server rules > Voice chat\n")
    assert "Music bots only" in answer
    none = await tool.call({"query": "quantum chromodynamics"}, ctx)
    assert "no passage" in none
    from bot.tools.base import ToolError

    with pytest.raises(ToolError, match="no knowledge base"):
        await tool.call({"query": "music"}, ToolContext(message=message("?", channel="other")))


def tiny_pdf(lines: list[str]) -> bytes:
    """A one-page PDF whose text layer holds ``lines`` (Helvetica, one text object), written by
    hand so the test needs nothing beyond the reader."""
    text = "BT /F1 12 Tf 72 720 Td 14 TL " + " ".join(f"({line}) '" for line in lines) + " ET"
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        " /Resources << /Font << /F1 5 0 R >> >> >>",
        f"<< /Length {len(text)} >>\nstream\n{text}\nendstream",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\n".encode()
    return out + f"startxref\n{xref}\n%%EOF\n".encode()


@pytest.mark.e2e
@pytest.mark.redis
async def test_a_pdf_in_a_folder_is_indexed_from_its_text_layer(
    kb_redis: Redis, tmp_path: Path
) -> None:
    (tmp_path / "handbook").mkdir()
    pdf = tmp_path / "handbook" / "moderation.pdf"
    pdf.write_bytes(tiny_pdf(["Moderators answer appeals within two days.", "Email the team."]))
    (tmp_path / "handbook" / "broken.pdf").write_bytes(b"%PDF-1.4 not really")  # skipped alone
    sources = (str(tmp_path / "handbook"),)
    indexer = KnowledgeIndexer(kb_redis, SETTINGS, None, Fetcher(), bases=lambda: [sources])
    [report] = await indexer.index_all()
    assert report.chunks == 1
    recall = Recall(kb_redis, SETTINGS, None, knowledge_of=lambda m: sources)
    hits = await recall.search_for(message("?"), "how long do appeals take", limit=2)
    assert hits is not None and [h.chunk.source for h in hits] == ["handbook/moderation.pdf"]
    assert "appeals within two days" in hits[0].chunk.text
