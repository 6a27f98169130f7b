"""The Knowledge page's parts without a browser: what an upload must be before it is written,
and the last check each indexing pass records (its outcome and the sources it skipped)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from bot.admin.knowledge_page import UPLOAD_MAX_BYTES, check_upload
from bot.admin.server import AdminServer
from bot.admin.views import Sources
from bot.knowledge.indexer import KnowledgeIndexer
from bot.memory.buffers import MemorySettings, MemoryStore
from bot.memory.knowledge import base_id
from bot.safety.audit import Audit, read_audit
from bot.settings import load_settings
from bot.state import keys
from bot.state.config_reloads import ConfigReloads
from bot.state.history import HistoryStore
from bot.state.knowledge import KnowledgeStore
from bot.tools.builtin.fetch import Fetcher

TOKEN = "admin-token-0123456789abcdef"


@pytest.mark.parametrize(
    ("name", "data", "why"),
    [
        ("faq.md", b"# FAQ\n\nYes.\n", ""),
        ("Rules 2.txt", "r\u00e8gles".encode(), ""),
        ("guide.pdf", b"%PDF-1.7\n...", ""),
        ("tool.exe", b"MZ", "not .exe"),
        ("notes", b"text", "not this"),
        (".env.md", b"x", "a file name of"),
        ("a/../b.md", b"x", "a file name of"),
        ("fake.pdf", b"<html>", "not a PDF"),
        ("latin.txt", "caf\u00e9".encode("latin-1"), "must be UTF-8"),
        ("nul.md", b"a\0b", "NUL bytes"),
        ("empty.md", b"", "an empty file"),
        ("big.md", b"x" * (UPLOAD_MAX_BYTES + 1), f"at most {UPLOAD_MAX_BYTES:,} bytes"),
    ],
)
def test_an_upload_is_checked_before_it_is_written(name: str, data: bytes, why: str) -> None:
    found = check_upload(name, data)
    assert (why in found and found) if why else found == ""


@pytest.mark.redis
async def test_each_pass_records_its_last_check_with_what_it_skipped(
    redis_client: Redis, tmp_path: Path
) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "faq.md").write_text("# FAQ\n\nThe answer is 42.\n")
    missing = str(tmp_path / "gone.md")
    sources = (str(kb), missing)
    indexer = KnowledgeIndexer(
        redis_client, MemorySettings(), None, Fetcher(), bases=lambda: [sources]
    )
    store = KnowledgeStore(redis_client)
    parts = ("version", "chunks", "vec", "sources", "status", "lock")
    try:
        await check_passes(indexer, store, sources, missing)
    finally:
        await redis_client.delete(*(keys.knowledge(base_id(sources), p) for p in parts))


async def check_passes(
    indexer: KnowledgeIndexer, store: KnowledgeStore, sources: tuple[str, ...], missing: str
) -> None:
    base = base_id(sources)
    assert await store.status_many([base]) == [None]
    await indexer.index(sources, force=True)
    [first] = await store.status_many([base])
    assert first is not None and first["outcome"] == "indexed" and first["documents"] == 1
    assert first["chunks"] == 1 and first["vectors"] == 0 and first["version"] == 1
    assert len(first["problems"]) == 1 and first["problems"][0].startswith(f"{missing}: skipped")
    await indexer.index(sources, force=True)
    [second] = await store.status_many([base])
    assert second is not None and second["outcome"] == "unchanged"
    assert second["chunks"] == 1 and second["version"] == 1  # kept from the build
    assert second["at"] >= first["at"]


@pytest.mark.redis
async def test_a_url_added_to_a_scope_is_written_checked_audited_and_reloaded(
    redis_client: Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    text = '# the rules channel (this comment stays)\n[[scope]]\nmatch = "discord:1/2"\n'
    toml = tmp_path / "chorus.toml"
    toml.write_text(text, encoding="utf-8")
    settings = load_settings(environ={}, warn=False)
    reloaded: list[bool] = []
    audit = Audit(redis_client, namespace=f"kb{uuid.uuid4().hex[:8]}")
    sources = Sources(
        settings=settings,
        redis=redis_client,
        memory=MemoryStore(redis_client),
        history=HistoryStore(redis_client, max_messages=20, ttl_seconds=3600),
        audit=audit,
        reload=lambda: reloaded.append(True),
    )
    count = await ConfigReloads(redis_client).count()
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    async with TestClient(TestServer(AdminServer(sources, TOKEN).app())) as http:
        bad = await http.post(
            "/knowledge/url", data={"scope": "0", "url": "file:///etc/passwd"}, headers=bearer
        )
        assert "not added: an http(s) URL and a scope" in await bad.text()
        assert toml.read_text(encoding="utf-8") == text
        url = "https://example.org/faq"
        done = await http.post("/knowledge/url", data={"scope": "0", "url": url}, headers=bearer)
        assert "added to the scope" in await done.text()
    assert toml.read_text(encoding="utf-8") == text + f'knowledge = ["{url}"]\n'
    assert reloaded == [True] and await ConfigReloads(redis_client).count() == count + 1
    edits = [e for e in await read_audit(redis_client, namespace=audit.namespace)]
    assert (
        edits[-1].rule == "config:edit" and edits[-1].detail == f"scope.0.knowledge: '' -> '{url}'"
    )
