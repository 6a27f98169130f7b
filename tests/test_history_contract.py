"""One contract for conversation history, run against the embedded store and a real Redis.

Every test using ``redis_url`` (through ``redis_client``) is marked ``redis`` by the fixture.
Round trips are counted where they happen: every write of a command (or of a whole pipeline) to
the connection goes through ``send_packed_command``, for redis-py and fakeredis alike.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Literal

import pytest
from pydantic import ValidationError
from redis.asyncio import Redis

from bot.events import Author, ChatMessage, ConversationKey
from bot.state import keys
from bot.state.history import HistoryEntry, HistoryStore
from tests.redis_cluster import WITH_CLUSTER, store_url
from tests.roundtrips import RoundTrips, counting_round_trips


@pytest.fixture(params=WITH_CLUSTER)
def redis_url(request: pytest.FixtureRequest, key_tag: str) -> Iterator[str]:
    """The stores, and a Redis Cluster of three primaries (``tests/redis_cluster.py``)."""
    yield from store_url(request, key_tag)


T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def entry(
    n: int,
    *,
    role: Literal["user", "assistant"] = "user",
    message_id: str | None = None,
    author_id: str | None = "u1",
) -> HistoryEntry:
    return HistoryEntry(
        role=role,
        text=f"message {n}",
        message_id=message_id or f"m{n}",
        author_id=author_id,
        author_name="Ada",
        at=T0 + timedelta(seconds=n),
    )


@pytest.fixture
def conv(key_tag: str) -> ConversationKey:
    return ConversationKey(platform="discord", channel=f"chan-{key_tag}")


@pytest.fixture
def history(redis_client: Redis) -> HistoryStore:
    return HistoryStore(redis_client, max_messages=5, ttl_seconds=3600)


@pytest.fixture
def round_trips() -> Iterator[RoundTrips]:
    with counting_round_trips() as counter:
        yield counter


async def test_append_then_load_keeps_order(history: HistoryStore, conv: ConversationKey) -> None:
    await history.append(conv, entry(1), entry(2, role="assistant", author_id=None))
    await history.append(conv, entry(3))
    assert await history.load(conv) == [
        entry(1),
        entry(2, role="assistant", author_id=None),
        entry(3),
    ]


async def test_cap_keeps_the_newest(
    history: HistoryStore, conv: ConversationKey, redis_client: Redis
) -> None:
    await history.append(conv, *(entry(n) for n in range(1, 5)))
    await history.append(conv, entry(5), entry(6), entry(7))
    assert [e.text for e in await history.load(conv)] == [f"message {n}" for n in range(3, 8)]
    assert await redis_client.llen(keys.history(conv)) == 5


async def test_load_limit_returns_the_most_recent(
    history: HistoryStore, conv: ConversationKey
) -> None:
    await history.append(conv, entry(1), entry(2), entry(3))
    assert await history.load(conv, limit=2) == [entry(2), entry(3)]
    assert await history.load(conv, limit=0) == []
    assert await history.load(conv, limit=50) == [entry(1), entry(2), entry(3)]


async def test_ttl_is_set_and_refreshed_by_append(
    history: HistoryStore, conv: ConversationKey, redis_client: Redis
) -> None:
    key = keys.history(conv)
    await history.append(conv, entry(1))
    assert 3000 < await redis_client.ttl(key) <= 3600
    await redis_client.expire(key, 10)  # as if most of the TTL had passed
    await history.load(conv)
    assert await redis_client.ttl(key) <= 10, "reading is not activity"
    await history.append(conv, entry(2))
    assert await redis_client.ttl(key) > 3000


async def test_clear(history: HistoryStore, conv: ConversationKey, redis_client: Redis) -> None:
    await history.append(conv, entry(1))
    await history.clear(conv)
    assert await history.load(conv) == []
    assert not await redis_client.exists(keys.history(conv))


async def test_delete_message_removes_only_that_message(
    history: HistoryStore, conv: ConversationKey, redis_client: Redis
) -> None:
    await history.append(
        conv, entry(1), entry(2, message_id="gone"), entry(3), entry(4, message_id="gone")
    )
    assert await history.delete_message(conv, "gone") == 2
    assert await history.load(conv) == [entry(1), entry(3)]
    assert await history.delete_message(conv, "gone") == 0
    assert await history.delete_message(conv, "never-there") == 0
    assert await redis_client.ttl(keys.history(conv)) > 0, "deleting keeps the TTL"


async def test_forget_author(history: HistoryStore, conv: ConversationKey) -> None:
    reply = entry(2, role="assistant", author_id=None)
    await history.append(
        conv, entry(1, author_id="u1"), reply, entry(3, author_id="u2"), entry(4, author_id="u1")
    )
    assert await history.forget_author(conv, "u1") == 2
    assert await history.load(conv) == [reply, entry(3, author_id="u2")]
    assert await history.forget_author(conv, "u1") == 0


async def test_deleting_from_an_empty_conversation(
    history: HistoryStore, conv: ConversationKey
) -> None:
    assert await history.delete_message(conv, "m1") == 0
    assert await history.forget_author(conv, "u1") == 0


async def test_conversations_and_threads_are_isolated(history: HistoryStore, key_tag: str) -> None:
    convs = [
        ConversationKey(platform="discord", channel=f"{key_tag}"),
        ConversationKey(platform="discord", channel=f"{key_tag}", thread="t"),
        ConversationKey(platform="discord", channel=f"{key_tag}:t"),
        ConversationKey(platform="slack", channel=f"{key_tag}"),
    ]
    for n, conv in enumerate(convs):
        await history.append(conv, entry(n))
    for n, conv in enumerate(convs):
        assert await history.load(conv) == [entry(n)]
    await history.clear(convs[0])
    await history.delete_message(convs[2], "m1")  # m1 lives in convs[1] only
    assert [len(await history.load(c)) for c in convs] == [0, 1, 1, 1]


async def test_corrupt_entries_are_skipped_and_logged(
    history: HistoryStore,
    conv: ConversationKey,
    redis_client: Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    key = keys.history(conv)
    await history.append(conv, entry(1))
    await redis_client.rpush(key, "not json", '{"role": "robot", "text": "x"}')
    await history.append(conv, entry(2))
    with caplog.at_level(logging.WARNING, logger="chorus.history"):
        assert await history.load(conv) == [entry(1), entry(2)]
    skipped = [r for r in caplog.records if r.getMessage() == "skipping unreadable history entry"]
    assert [(r.key, r.index) for r in skipped] == [(key, 1), (key, 2)]  # type: ignore[attr-defined]
    assert all(r.exc_info for r in skipped)
    assert await history.delete_message(conv, "m1") == 1  # corrupt entries do not break deletes
    assert await history.load(conv) == [entry(2)]


async def test_append_and_load_are_one_round_trip_each(
    history: HistoryStore, conv: ConversationKey, redis_client: Redis, round_trips: RoundTrips
) -> None:
    await redis_client.ping()  # connection set-up (HELLO, CLIENT SETINFO...) is not counted
    round_trips.writes.clear()
    await history.append(conv, entry(1), entry(2), entry(3))
    assert round_trips.count == 1, round_trips.writes
    assert all(
        cmd in round_trips.writes[0] for cmd in (b"MULTI", b"RPUSH", b"LTRIM", b"EXPIRE", b"EXEC")
    )
    await history.load(conv)
    assert round_trips.count == 2, round_trips.writes
    await history.append(conv)  # nothing to write: no round trip
    assert round_trips.count == 2


def test_entry_round_trips_through_json() -> None:
    original = entry(1)
    assert HistoryEntry.model_validate_json(original.model_dump_json()) == original
    with pytest.raises(ValidationError, match="timezone-aware"):
        HistoryEntry(role="user", text="x", at=datetime(2025, 1, 1))
    newer = original.model_dump() | {"added_in_a_later_version": 1}
    assert HistoryEntry.model_validate(newer) == original


def test_entry_from_message() -> None:
    message = ChatMessage(
        platform="discord",
        id="m9",
        conversation=ConversationKey(platform="discord", channel="c"),
        author=Author(id="u9"),
        text="hi",
        sent_at=T0,
    )
    assert HistoryEntry.from_message(message) == HistoryEntry(
        role="user", text="hi", message_id="m9", author_id="u9", author_name="u9", at=T0
    )


def test_store_refuses_nonsense_limits() -> None:
    with pytest.raises(ValueError, match="max_messages"):
        HistoryStore(None, max_messages=0, ttl_seconds=60)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ttl_seconds"):
        HistoryStore(None, max_messages=5, ttl_seconds=0)  # type: ignore[arg-type]


async def test_reading_the_same_values_again_reuses_their_parsed_entries(
    history: HistoryStore, conv: ConversationKey
) -> None:
    """The per-turn re-read parses each stored value once; a changed list still reads right."""
    await history.append(conv, entry(1), entry(2), entry(3))
    first = await history.load(conv)
    second = await history.load(conv)
    assert second == [entry(1), entry(2), entry(3)]
    assert all(a is b for a, b in zip(first, second, strict=True))
    await history.append(conv, entry(4, role="assistant", author_id=None))
    third = await history.load(conv)
    assert third == [entry(1), entry(2), entry(3), entry(4, role="assistant", author_id=None)]
    assert third[0] is first[0]
