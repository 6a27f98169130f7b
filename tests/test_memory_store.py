"""The ``MemoryStore`` contract, each test run on the embedded store AND a real Redis
(``redis_client``): identity, round trips, pipelines, TTLs, caps as stored, atomic updates, the
/forget tombstone and the 4 KB memory budget. The pure rules behind it (dedupe, eviction,
cleaning, the byte budget) and the memory settings are in ``test_memory_rules.py``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from redis.asyncio import Redis

from bot.events import ConversationKey
from bot.memory.buffers import (
    MemorySettings,
    MemoryStore,
    Pin,
    Recommendation,
    UserBuffer,
    encode,
)
from bot.memory.edit import add_pin
from bot.state import connect, keys
from bot.state.people import forgotten
from bot.state.redis_turn import RedisTurnStore
from bot.state.turn import TurnChanges
from tests.memory_samples import full_buffer
from tests.redis_cluster import WITH_CLUSTER, store_url
from tests.roundtrips import RoundTrips, counting_round_trips
from tests.turn_rig import read_memory


@pytest.fixture(params=WITH_CLUSTER)
def redis_url(request: pytest.FixtureRequest, key_tag: str) -> Iterator[str]:
    """The stores, and a Redis Cluster of three primaries (``tests/redis_cluster.py``)."""
    yield from store_url(request, key_tag)


T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.fixture
def round_trips() -> Iterator[RoundTrips]:
    with counting_round_trips() as counter:
        yield counter


@pytest.fixture
def memory(redis_client: Redis) -> MemoryStore:
    return MemoryStore(redis_client, MemorySettings())


def pin(text: str, *, confidence: float = 0.9, at: datetime = T0, source: str = "m1") -> Pin:
    return Pin(text=text, source=source, confidence=confidence, created_at=at, updated_at=at)


def buffer(user: str, *pins: Pin, platform: str = "discord", **extra: Any) -> UserBuffer:
    return UserBuffer(platform=platform, user_id=user, pins=pins, **extra)


async def test_save_then_load(memory: MemoryStore, key_tag: str) -> None:
    saved = buffer(
        f"ada-{key_tag}",
        pin("Is vegan", confidence=0.87),
        pin("Lives in Lyon", at=T0 + timedelta(seconds=1)),
        recommendations=(Recommendation(text="Answer in French", tool=None, created_at=T0),),
        timezone="Europe/Paris",
    )
    assert await memory.save(saved) == saved
    assert await memory.load("discord", f"ada-{key_tag}") == saved


async def test_unknown_user_has_an_empty_buffer(memory: MemoryStore, key_tag: str) -> None:
    loaded = await memory.load("slack", f"nobody-{key_tag}")
    assert loaded == UserBuffer(platform="slack", user_id=f"nobody-{key_tag}")
    assert loaded.is_empty


async def test_identity_is_platform_and_user_id(memory: MemoryStore, key_tag: str) -> None:
    user = f"42:{key_tag}"  # a colon in an id must not merge two users
    await memory.save(buffer(user, pin("Is vegan")))
    assert (await memory.load("slack", user)).is_empty
    assert (await memory.load("discord", f"42%3A{key_tag}")).is_empty
    assert [p.text for p in (await memory.load("discord", user)).pins] == ["Is vegan"]


async def test_one_round_trip_to_load_and_one_to_save(
    memory: MemoryStore, key_tag: str, round_trips: RoundTrips
) -> None:
    user = f"ada-{key_tag}"
    await memory.load("discord", user)  # warm the connection (the first use sends HELLO/SELECT)
    before = round_trips.count
    await memory.save(buffer(user, pin("Is vegan")))
    assert round_trips.count - before == 1
    before = round_trips.count
    await memory.load("discord", user)
    assert round_trips.count - before == 1


async def test_load_rides_the_turns_one_read(
    memory: MemoryStore, redis_client: Redis, key_tag: str, round_trips: RoundTrips
) -> None:
    user = f"ada-{key_tag}"
    await memory.save(buffer(user, pin("Is vegan")))
    before = round_trips.count
    state = await read_memory(redis_client, "discord", user)
    # with the history window, in one pipeline (a cluster's writes once to each node it
    # reaches, at once: the identity's slot's and the conversation's, one or two nodes)
    assert round_trips.count - before in ((1, 2) if keys.cluster_layout() else (1,))
    loaded = memory.from_read(state, platform="discord", user_id=user)
    assert [p.text for p in loaded.pins] == ["Is vegan"]


async def test_activity_rides_the_turns_one_commit(
    memory: MemoryStore, redis_client: Redis, key_tag: str, round_trips: RoundTrips
) -> None:
    conv = ConversationKey(platform="discord", channel=f"c-{key_tag}")
    user = f"ada-{key_tag}"
    await redis_client.ping()
    before = round_trips.count
    store = RedisTurnStore(redis_client)
    activity = memory.activity("discord", user, conv, now=T0)
    await store.write(TurnChanges(activity=activity))
    assert round_trips.count - before == 1
    assert await memory.conversations("discord", user) == [conv]


async def test_ttl_is_set_by_writes_and_refreshed_by_activity(
    memory: MemoryStore, redis_client: Redis, key_tag: str
) -> None:
    user = f"ada-{key_tag}"
    key = keys.memory("discord", user)
    conv = ConversationKey(platform="discord", channel=f"c-{key_tag}")
    ttl = memory.settings.ttl_seconds
    await memory.save(buffer(user, pin("Is vegan")))
    assert ttl - 60 < await redis_client.ttl(key) <= ttl
    await redis_client.expire(key, 10)
    await memory.load("discord", user)
    assert await redis_client.ttl(key) <= 10, "reading is not activity"
    await memory.touch("discord", user, conv, now=T0)
    assert await redis_client.ttl(key) > ttl - 60


async def test_touch_never_creates_a_buffer(
    memory: MemoryStore, redis_client: Redis, key_tag: str
) -> None:
    user = f"ada-{key_tag}"
    conv = ConversationKey(platform="discord", channel=f"c-{key_tag}")
    await memory.touch("discord", user, conv, now=T0)
    assert not await redis_client.exists(keys.memory("discord", user))


async def test_conversations_are_recorded_with_a_ttl_and_pruned(
    redis_client: Redis, key_tag: str
) -> None:
    settings = MemorySettings(ttl_seconds=3600, history_ttl_seconds=600)
    memory = MemoryStore(redis_client, settings)
    user = f"ada-{key_tag}"
    old = ConversationKey(platform="discord", channel=f"old-{key_tag}")
    new = ConversationKey(platform="discord", channel=f"new-{key_tag}", thread="t:1")
    await memory.touch("discord", user, old, now=T0)
    await memory.touch("discord", user, new, now=T0 + timedelta(seconds=60))
    assert await memory.conversations("discord", user) == [new, old]
    convs = keys.user_conversations("discord", user)
    assert 3000 < await redis_client.ttl(convs) <= 3600  # the longer of the two TTLs
    await memory.touch("discord", user, new, now=T0 + timedelta(seconds=3601))
    assert await memory.conversations("discord", user) == [new]


async def test_caps_evict_the_weakest_pin_and_the_oldest_recommendation(
    redis_client: Redis, key_tag: str
) -> None:
    memory = MemoryStore(redis_client, MemorySettings(pins_max=3, recs_max=2))
    user = f"ada-{key_tag}"
    pins = [
        pin("Is vegan", confidence=0.9, at=T0),
        pin("Lives in Lyon", confidence=0.6, at=T0 + timedelta(seconds=1)),
        pin("Plays chess", confidence=0.6, at=T0 + timedelta(seconds=2)),
        pin("Learning Rust", confidence=0.8, at=T0 + timedelta(seconds=3)),
    ]
    recs = tuple(
        Recommendation(text=f"Tip number {word}", created_at=T0 + timedelta(seconds=n))
        for n, word in enumerate(["alpha", "beta", "gamma"])
    )
    stored = await memory.save(buffer(user, *pins, recommendations=recs))
    # the least confident, least recently updated pin goes first
    assert [p.text for p in stored.pins] == ["Is vegan", "Plays chess", "Learning Rust"]
    assert [r.text for r in stored.recommendations] == ["Tip number beta", "Tip number gamma"]
    assert await memory.load("discord", user) == stored


async def test_update_is_atomic_under_concurrent_writers(memory: MemoryStore, key_tag: str) -> None:
    user = f"ada-{key_tag}"
    words = ["chess", "rust", "lyon", "piano", "tennis", "jazz", "sushi", "hiking"]

    def adding(n: int, word: str) -> Any:
        def change(state: UserBuffer) -> UserBuffer:
            return add_pin(
                state,
                f"Likes {word}",
                source_message_id=f"m{n}",
                confidence=0.8,
                now=T0,
                max_pins=20,
            )[0]

        return change

    await asyncio.gather(
        *(memory.update("discord", user, adding(n, w)) for n, w in enumerate(words))
    )
    stored = await memory.load("discord", user)
    assert sorted(p.text for p in stored.pins) == sorted(f"Likes {w}" for w in words)


async def test_update_returning_none_or_the_same_buffer_writes_nothing(
    memory: MemoryStore, redis_client: Redis, key_tag: str
) -> None:
    user = f"ada-{key_tag}"
    assert await memory.update("discord", user, lambda b: None) == buffer(user)
    assert await memory.update("discord", user, lambda b: b) == buffer(user)
    assert not await redis_client.exists(keys.memory("discord", user))


async def test_an_emptied_buffer_is_deleted(
    memory: MemoryStore, redis_client: Redis, key_tag: str
) -> None:
    user = f"ada-{key_tag}"
    await memory.save(buffer(user, pin("Is vegan")))
    await memory.update("discord", user, lambda b: b.model_copy(update={"pins": ()}))
    assert not await redis_client.exists(keys.memory("discord", user))


async def test_an_update_cannot_move_a_buffer_to_another_user(
    memory: MemoryStore, key_tag: str
) -> None:
    with pytest.raises(ValueError, match="another user"):
        await memory.update(
            "discord", f"ada-{key_tag}", lambda b: buffer(f"bob-{key_tag}", pin("Is vegan"))
        )


async def test_the_forget_tombstone_blocks_older_writers_only(
    memory: MemoryStore, redis_client: Redis, key_tag: str
) -> None:
    user = f"ada-{key_tag}"
    await memory.save(buffer(user, pin("Is vegan")))
    at = T0 + timedelta(seconds=10)
    await memory.store.forget([forgotten(("discord", user), at)], person=None)
    assert (await memory.load("discord", user)).is_empty
    assert 0 < await redis_client.ttl(keys.forgotten("discord", user)) <= 24 * 3600

    def readd(state: UserBuffer) -> UserBuffer:
        return state.model_copy(update={"pins": (pin("Is vegan"),)})

    assert await memory.update("discord", user, readd, unless_forgotten_since=T0) is None
    assert (await memory.load("discord", user)).is_empty
    later = T0 + timedelta(seconds=11)
    assert await memory.update("discord", user, readd, unless_forgotten_since=later) is not None
    assert [p.text for p in (await memory.load("discord", user)).pins] == ["Is vegan"]


async def test_an_unreadable_buffer_is_ignored_and_logged(
    memory: MemoryStore, redis_client: Redis, key_tag: str, caplog: pytest.LogCaptureFixture
) -> None:
    user = f"ada-{key_tag}"
    await redis_client.set(keys.memory("discord", user), "{not json")
    with caplog.at_level(logging.WARNING, logger="chorus.memory"):
        assert (await memory.load("discord", user)).is_empty
    assert "unreadable memory buffer" in caplog.text
    good = encode(buffer(user, pin("Is vegan")))
    await redis_client.set(keys.memory("discord", user), good.replace('"p":[', '"p":[[1,2],'))
    with caplog.at_level(logging.WARNING, logger="chorus.memory"):
        assert [p.text for p in (await memory.load("discord", user)).pins] == ["Is vegan"]
    assert "skipping unreadable pin" in caplog.text


@pytest.fixture
async def real_redis(real_redis_url: str, key_tag: str) -> AsyncIterator[Redis]:
    client = await connect.open_redis(real_redis_url)
    try:
        yield client
    finally:
        doomed = [k async for k in client.scan_iter(match=f"*{key_tag}*")]
        if doomed:
            await client.delete(*doomed)
        await client.aclose()


@pytest.mark.parametrize("char", ["a", "é", "語", "😀"], ids=["ascii", "latin", "cjk", "emoji"])
async def test_memory_usage_at_the_default_caps_is_at_most_4kb(
    real_redis: Redis, key_tag: str, char: str
) -> None:
    """Measured on a real server: 20 max-length pins + 10 max-length recommendations."""
    memory = MemoryStore(real_redis, MemorySettings())
    user = f"1234567890123456789-{key_tag}"
    full = full_buffer(user, char)
    stored = await memory.save(full)
    if char == "a":
        assert stored == full, "at the default caps, ASCII entries of maximal length all fit"
    else:
        # multi-byte text may evict entries, from both lists in proportion to their caps
        assert len(stored.pins) >= 8 and len(stored.recommendations) >= 3
    usage = await real_redis.memory_usage(keys.memory("discord", user))
    assert usage is not None and usage <= 4096, usage
