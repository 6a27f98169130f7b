"""Knowledge bases from the configuration: per scope, the tool only where configured, indexing at
start and at once on reload, URLs only through the SSRF guard."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from redis.asyncio import Redis

from bot.events import Author, ChatMessage, ConversationKey, utcnow
from bot.knowledge.wiring import RecallParts, knowledge_lists
from bot.llm.scripted import ScriptedProvider
from bot.memory.knowledge import base_id, load_index
from bot.router.scoping import Scoping
from bot.state import keys
from bot.state.cost import CostLedger, cost_day
from bot.state.knowledge import KnowledgeStore
from tests.loopback.openai_server import OpenAIServer
from tests.test_chat_e2e import base_env, run_chorus
from tests.test_knowledge import KB_PARTS, kb_redis  # noqa: F401 (a fixture)
from tests.test_scopes import C2, C, G, settings_with


def message(channel: str) -> ChatMessage:
    return ChatMessage(
        platform="discord",
        id="m1",
        conversation=ConversationKey(platform="discord", channel=channel),
        author=Author(id="u1"),
        text="hi",
        server=G,
    )


def test_a_scope_has_its_own_knowledge_base() -> None:
    toml = f"""
[[scope]]
match = "discord:{G}/{C}"
knowledge = ["mods/rules.md", "https://example.org/faq"]
"""
    settings = settings_with(toml, CHORUS_KNOWLEDGE_PATHS="docs/faq.md, docs/guides/")
    scoping = Scoping(settings, provider=ScriptedProvider())
    assert scoping.profile(message(C)).knowledge == ("mods/rules.md", "https://example.org/faq")
    assert scoping.profile(message(C2)).knowledge == ("docs/faq.md", "docs/guides/")
    assert knowledge_lists(settings) == [
        ("docs/faq.md", "docs/guides/"),
        ("mods/rules.md", "https://example.org/faq"),
    ]


@pytest.mark.redis
async def test_no_knowledge_base_no_tool_and_no_indexer(redis_client: Redis) -> None:
    parts = RecallParts.build(settings_with(""), redis_client)
    assert parts.tools == [] and parts.indexer is None and not parts.active
    await parts.aclose()


async def _version(redis: Redis, base: str) -> int:
    return int(str(await redis.get(keys.knowledge(base, "version")) or 0))


async def _until(redis: Redis, base: str, version: int) -> None:
    async with asyncio.timeout(60):
        while await _version(redis, base) < version:  # noqa: ASYNC110 (a background task's write)
            await asyncio.sleep(0.02)


@pytest.mark.redis
async def test_indexed_at_start_and_at_once_on_reload(
    kb_redis: Redis,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
) -> None:
    redis_client = kb_redis
    rules = tmp_path / "rules.md"
    rules.write_text("# Rules\n\nNo spoilers in #general.\n")
    blocked = "http://127.0.0.1:9/faq"  # loopback, not allow-listed: the SSRF guard refuses it
    settings = settings_with("", CHORUS_KNOWLEDGE_PATHS=f"{rules},{blocked}")
    parts = RecallParts.build(settings, redis_client)
    assert [tool.spec.name for tool in parts.tools] == ["search_knowledge"]
    base = base_id((str(rules), blocked))
    await parts.start()
    try:
        assert await _version(redis_client, base) == 1  # the first pass ran before start returned
        rules.write_text("# Rules\n\nNo spoilers in #general.\n\n## Memes\n\nMemes go in #memes.\n")
        stat = rules.stat()
        os.utime(rules, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
        parts.reload(settings)  # the scheduled check is 300 s away
        await _until(redis_client, base, 2)
    finally:
        await parts.aclose()
    index = await load_index(KnowledgeStore(redis_client), base)
    assert index is not None
    assert [c.where for c in index.chunks] == ["rules.md # Rules", "rules.md # Rules > Memes"]


@pytest.mark.e2e
async def test_chorus_knowledge_index_and_status(
    tmp_path: Path, real_redis: Redis, real_redis_url: str
) -> None:
    rules = tmp_path / "rules.md"
    rules.write_text("# Rules\n\nNo spoilers in #general.\n\n## Memes\n\nMemes go in #memes.\n")
    env = base_env(tmp_path) | {
        "CHORUS_REDIS_URL": real_redis_url,
        "CHORUS_KNOWLEDGE_PATHS": str(rules),
    }
    base = base_id((str(rules),))
    try:
        code, before, err = await run_chorus(["knowledge", "status"], env, tmp_path)
        assert code == 0, err
        assert before.strip() == f"{base}: not indexed yet ({rules})"
        code, out, err = await run_chorus(["knowledge", "index"], env, tmp_path)
        assert code == 0, err
        assert out.splitlines() == [
            f"{base}: re-indexed, 0 chunks embedded",
            f"{base}: version 1, 2 chunks from 1 documents, 0 vectors (model none: keyword "
            f"search); sources: {rules}",
        ]
        code, bad, err = await run_chorus(
            ["knowledge", "index"], env | {"CHORUS_EMBEDDING_MODEL": "anthropic:x"}, tmp_path
        )
        assert code != 0 and "anthropic has no embedding API" in err
    finally:
        await real_redis.delete(*(keys.knowledge(base, p) for p in KB_PARTS))


@pytest.mark.e2e
async def test_chorus_knowledge_index_counts_against_the_daily_cost_cap(
    tmp_path: Path, real_redis: Redis, real_redis_url: str, key_tag: str
) -> None:
    """Embedding a knowledge base is a model call like any other: ``chorus knowledge index``
    spends from the daily cost cap's ledger, and once the cap is reached it embeds nothing and
    says why."""
    rules = tmp_path / "rules.md"
    rules.write_text("# Rules\n\nNo spoilers in #general.\n\n## Memes\n\nMemes go in #memes.\n")
    namespace = f"ns_{key_tag}"
    base = base_id((str(rules),))
    ledger = CostLedger(real_redis, namespace)
    async with OpenAIServer() as embeddings:
        env = base_env(tmp_path) | {
            "CHORUS_REDIS_URL": real_redis_url,
            "CHORUS_KNOWLEDGE_PATHS": str(rules),
            "CHORUS_EMBEDDING_MODEL": "openai:text-embedding-3-small",
            "OPENAI_API_KEY": "k",
            "OPENAI_BASE_URL": embeddings.base_url,
            "CHORUS_QUOTA_COST_USD_DAY": "1",
            "CHORUS_BUS_NAMESPACE": namespace,
        }
        try:
            code, out, err = await run_chorus(["knowledge", "index"], env, tmp_path)
            assert code == 0, err
            assert f"{base}: re-indexed, 2 chunks embedded" in out
            spent = await ledger.today(utcnow())
            assert spent.spent > 0 and spent.held == 0  # settled, not left held
            calls = len(embeddings.embedded)

            spent_key, _ = ledger.keys(cost_day(utcnow())[0])
            await real_redis.incrby(spent_key, 1_000_000)  # the day's dollar is gone
            rules.write_text("# Rules\n\nSpoilers only in #spoilers.\n")  # to embed again
            code, out, err = await run_chorus(["knowledge", "index"], env, tmp_path)
            assert code == 1
            assert f"{base} not indexed: the daily cost cap is reached" in err
            assert len(embeddings.embedded) == calls  # no call was made
        finally:
            await real_redis.delete(*(keys.knowledge(base, p) for p in KB_PARTS))
            await real_redis.delete(*ledger.keys(cost_day(utcnow())[0]))
