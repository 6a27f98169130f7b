"""What issue 35 names survives a restart of the embedded store: refreshed Twitch tokens,
``/link``s, a live-chat pause, quota counters and the knowledge index.

Each is written through its own store class on ``embedded://``, the store is stopped as a
clean stop stops it (``embedded.shutdown``, what ``atexit`` runs) and opened again on the same
directory, and read back through the same class. (The restart of a real ``chorus run`` with a
pin and a conversation is tests/test_persistence_e2e.py.)
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

from redis.asyncio import Redis

from adapters.twitch.tokens import StateTokenStore, StoredTokens
from bot.events import ConversationKey
from bot.memory.buffers import MemoryStore
from bot.memory.people import People
from bot.quota.ledger import QuotaLedger
from bot.quota.plan import QuotaConfig
from bot.state import embedded
from bot.state.connect import open_redis
from bot.state.engagement import Changes, RedisLiveStore
from bot.state.knowledge import KnowledgeStore
from bot.state.platforms import PlatformTokens


async def restarted(directory: Path, redis: Redis) -> Redis:
    await redis.aclose()
    embedded.shutdown(directory)
    return await open_redis("embedded://", data_dir=directory)


async def test_tokens_links_pauses_quota_and_knowledge_survive_a_restart(tmp_path: Path) -> None:
    directory = tmp_path / "state"
    redis = await open_redis("embedded://", data_dir=directory)
    tokens = StoredTokens(access_token="acc-1", refresh_token="ref-1", seed="s")
    await StateTokenStore(PlatformTokens(redis), "client-1").save(tokens)
    outcome = await People(MemoryStore(redis)).link(("discord", "d1"), ("slack", "s1"))
    assert outcome.outcome.value == "linked", outcome
    conv = ConversationKey(platform="twitch", channel="chan-1")
    now = time.time()
    await RedisLiveStore(redis).save({conv: Changes(paused=True, pause_at=now)}, now)
    clock = lambda: datetime.now(UTC)  # noqa: E731
    ledger = QuotaLedger(redis, QuotaConfig(), project="p1", clock=clock)
    await ledger.charge(7)
    await KnowledgeStore(redis).save("faq", '[{"text": "chunk"}]', {"id1": "vec"})

    redis = await restarted(directory, redis)
    try:
        assert await StateTokenStore(PlatformTokens(redis), "client-1").load() == tokens
        people = People(MemoryStore(redis))
        person = await people.person("discord", "d1")
        assert person is not None and person == await people.person("slack", "s1")
        assert await RedisLiveStore(redis).refresh_pause([conv]) == [True]
        assert (
            await QuotaLedger(redis, QuotaConfig(), project="p1", clock=clock).load()
        ).units == 7
        index = await KnowledgeStore(redis).load("faq")
        assert index is not None and index.chunks == '[{"text": "chunk"}]'
        assert dict(index.vectors) == {"id1": "vec"}
    finally:
        await redis.aclose()
