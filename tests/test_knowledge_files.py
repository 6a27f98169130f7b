"""A knowledge base's files never lead out of their folder, and a base stays within its bounds.

A docs folder synced from pull requests may hold ``faq.md -> ../../.env``: the link is skipped
(and with CHORUS_KNOWLEDGE_FOLLOW_SYMLINKS only links that stay inside are followed), a file
swapped after it was listed is not read, documents are named relative to their folder. The
same through a real ``chorus chat``: ``search_knowledge`` shows neither the secret nor an
absolute path. Bounds: files, bytes and a PDF's extraction time, each logged when reached.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from redis.asyncio import Redis

from bot.knowledge.files import Budget, list_source, read_listed
from bot.knowledge.indexer import KnowledgeIndexer
from bot.memory.buffers import MemorySettings
from bot.memory.knowledge import base_id, load_index
from bot.state.knowledge import KnowledgeStore
from bot.tools.builtin.fetch import Fetcher
from tests.loopback.openai_server import OpenAIServer
from tests.test_chat_e2e import base_env, run_chorus
from tests.test_knowledge import kb_redis, tiny_pdf  # noqa: F401 (a fixture)
from tests.test_plugins_e2e import playing_model

SECRET = "OPENAI_API_KEY=sk-live-0123"
GUIDE = "# Guide\n\nVoice chat needs push-to-talk after 10 pm.\n"


def synced_docs(tmp_path: Path) -> Path:
    """``docs/`` as a pull request could leave it: a guide, and links in and out of the folder."""
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / ".env").write_text(SECRET + "\n")
    (tmp_path / "app" / "notes").mkdir()
    (tmp_path / "app" / "notes" / "private.md").write_text(f"# Private\n\n{SECRET}\n")
    docs = tmp_path / "app" / "docs"
    (docs / "guides").mkdir(parents=True)
    (docs / "guides" / "voice.md").write_text(GUIDE)
    (docs / "faq.md").symlink_to("../.env")  # a file outside the folder
    (docs / "more").symlink_to("../notes")  # a folder outside the folder
    (docs / "same.md").symlink_to("guides/voice.md")  # a link that stays inside
    (docs / "loop").symlink_to(".")  # a folder loop
    return docs


async def indexed(redis: Redis, sources: tuple[str, ...], settings: MemorySettings) -> list[str]:
    """The ``where`` of every chunk the indexer stores for ``sources``."""
    indexer = KnowledgeIndexer(redis, settings, None, Fetcher(), bases=lambda: [sources])
    await indexer.index(sources, force=True)
    index = await load_index(KnowledgeStore(redis), base_id(sources))
    assert index is not None
    assert all(SECRET not in chunk.text for chunk in index.chunks)
    return sorted(chunk.where for chunk in index.chunks)


@pytest.mark.redis
async def test_symlinks_are_skipped_and_named_relative_to_the_folder(
    kb_redis: Redis,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
) -> None:
    docs = synced_docs(tmp_path)
    assert await indexed(kb_redis, (str(docs),), MemorySettings()) == [
        "docs/guides/voice.md # Guide"
    ]


@pytest.mark.redis
async def test_followed_symlinks_still_stay_inside_the_folder(
    kb_redis: Redis,  # noqa: F811
    tmp_path: Path,
) -> None:
    docs = synced_docs(tmp_path)
    follow = MemorySettings(knowledge_follow_symlinks=True)
    assert await indexed(kb_redis, (str(docs),), follow) == [
        "docs/guides/voice.md # Guide",
        "docs/same.md # Guide",
    ]


@pytest.mark.redis
@pytest.mark.parametrize("follow", [False, True])
async def test_a_named_file_that_links_out_of_its_folder_is_not_read(
    kb_redis: Redis,  # noqa: F811
    tmp_path: Path,
    follow: bool,
) -> None:
    docs = synced_docs(tmp_path)
    settings = MemorySettings(knowledge_follow_symlinks=follow)
    sources = (str(docs / "faq.md"), str(docs / "guides" / "voice.md"))
    assert await indexed(kb_redis, sources, settings) == ["voice.md # Guide"]


def test_a_file_swapped_for_a_link_after_listing_is_not_read(tmp_path: Path) -> None:
    docs = synced_docs(tmp_path)
    budget = Budget("b", max_files=10, max_bytes=10_000)
    [item] = list_source(str(docs), follow=False, budget=budget)
    assert item.name == "docs/guides/voice.md"
    voice = docs / "guides" / "voice.md"
    voice.unlink()
    voice.symlink_to("../../.env")
    with pytest.raises(OSError):
        read_listed(item, pdf_timeout=30)


@pytest.mark.redis
async def test_a_base_stops_at_its_file_and_byte_limits_with_a_log_line(
    kb_redis: Redis,  # noqa: F811
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(1, 5):
        (docs / f"{n}.md").write_text(f"# Part {n}\n\n" + "word " * 100 + "\n")
    size = (docs / "1.md").stat().st_size
    assert 3 * size > 1024  # (the least CHORUS_KNOWLEDGE_MAX_BYTES takes)
    few_files = MemorySettings(knowledge_max_files=2)
    caplog.set_level(logging.WARNING, logger="chorus.knowledge")
    assert await indexed(kb_redis, (str(docs),), few_files) == [
        "docs/1.md # Part 1",
        "docs/2.md # Part 2",
    ]
    [limit] = [r for r in caplog.records if r.getMessage().startswith("knowledge base limit")]
    assert (limit.setting, limit.limit, limit.document) == (  # type: ignore[attr-defined]
        "CHORUS_KNOWLEDGE_MAX_FILES",
        2,
        "docs/3.md",
    )
    caplog.clear()
    few_bytes = MemorySettings(knowledge_max_bytes=3 * size + 1)
    assert len(await indexed(kb_redis, (str(docs) + "/",), few_bytes)) == 3
    [limit] = [r for r in caplog.records if r.getMessage().startswith("knowledge base limit")]
    assert limit.setting == "CHORUS_KNOWLEDGE_MAX_BYTES"  # type: ignore[attr-defined]
    assert limit.document == "docs/4.md"  # type: ignore[attr-defined]


@pytest.mark.e2e
@pytest.mark.redis
async def test_a_pdf_that_takes_too_long_is_stopped_and_skipped(
    kb_redis: Redis,  # noqa: F811
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "slow.pdf").write_bytes(tiny_pdf(["Appeals are answered within two days."]))
    (docs / "rules.md").write_text(GUIDE)
    caplog.set_level(logging.WARNING, logger="chorus.knowledge")
    hasty = MemorySettings(knowledge_pdf_timeout=0.001)  # no interpreter starts that fast
    assert await indexed(kb_redis, (str(docs),), hasty) == ["docs/rules.md # Guide"]
    [skipped] = [
        r for r in caplog.records if r.getMessage().startswith("knowledge file unreadable")
    ]
    assert "CHORUS_KNOWLEDGE_PDF_TIMEOUT" in skipped.error  # type: ignore[attr-defined]
    assert "slow.pdf" in skipped.document  # type: ignore[attr-defined]


@pytest.mark.e2e
async def test_search_knowledge_in_a_real_chat_shows_no_secret_and_no_absolute_path(
    tmp_path: Path,
) -> None:
    docs = synced_docs(tmp_path)
    async with OpenAIServer() as server:
        server.default_reply = playing_model
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": "openai:gpt-test",
            "OPENAI_API_KEY": "k-test",
            "OPENAI_BASE_URL": server.base_url,
            "CHORUS_KNOWLEDGE_PATHS": f"{docs},{docs / 'faq.md'}",
            "CHORUS_INSIGHTS_ENABLED": "false",
        }
        asks = [
            {"query": "OPENAI_API_KEY", "limit": 10},
            {"query": "voice chat push-to-talk", "limit": 10},
        ]
        lines = "".join(f"please call tool search_knowledge with {json.dumps(a)}\n" for a in asks)
        code, out, err = await run_chorus(["chat"], env, tmp_path, lines.encode())
    assert code == 0, err[-3000:]
    secret, voice = out.splitlines()
    assert "sk-live" not in out and str(tmp_path) not in out, out
    assert secret.startswith("Tool said: ") and "[1]" not in secret  # no passage matches
    assert voice.startswith("Tool said: [1] source: docs/guides/voice.md # Guide"), voice
    prompts = json.dumps(server.bodies)
    assert "sk-live" not in prompts and str(tmp_path) not in prompts
    assert "knowledge file skipped" in err and "docs/faq.md" in err
