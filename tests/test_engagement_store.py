"""The live-state store contract: the in-memory twin and Redis (embedded and a real server) keep
a channel's pause, cooldowns and answered messages the same way, each with a TTL.

Why a contract: ``LiveChat`` without Redis (tests, tools) runs on the twin and a deployment on
``RedisLiveStore``; a difference between the two would only show after a restart in production.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest
import redis
from redis.asyncio import Redis

from bot.events import ConversationKey
from bot.state import connect, keys
from bot.state.engagement import Changes, LiveStore, MemoryLiveStore, RedisLiveStore, Snapshot
from bot.state.memory_turn import MemoryTurnStore
from bot.state.redis_turn import RedisTurnStore
from bot.state.turn import ChannelSave, TurnChanges
from tests.redis_cluster import WITH_CLUSTER, store_url
from tests.roundtrips import counting_round_trips


@pytest.fixture(params=WITH_CLUSTER)
def redis_url(request: pytest.FixtureRequest, key_tag: str) -> Iterator[str]:
    """The stores, and a Redis Cluster of three primaries (``tests/redis_cluster.py``)."""
    yield from store_url(request, key_tag)


NOW = 1_750_000_000.0
LEDGER = 1800

pytestmark = pytest.mark.redis


@pytest.fixture(params=["twin", "memory", "real"])
async def make_store(
    request: pytest.FixtureRequest, key_tag: str
) -> AsyncIterator[Callable[..., LiveStore]]:
    """A factory of stores of one kind (options: ``pause_seconds``, ``answered_limit``)."""
    if request.param == "twin":
        yield lambda **options: MemoryLiveStore(ledger_seconds=LEDGER, **options)
        return
    url = f"memory://test-{key_tag}"
    if request.param == "real":
        url = request.getfixturevalue("real_redis_url")
    client = await connect.open_redis(url)
    try:
        yield lambda **options: RedisLiveStore(client, ledger_seconds=LEDGER, **options)
    finally:
        await client.aclose()
        if request.param == "real":
            sync = redis.Redis.from_url(url)
            doomed = list(sync.scan_iter(match=f"*{key_tag}*", count=1000))
            if doomed:
                sync.delete(*doomed)
            sync.close()


@pytest.fixture
def store(make_store: Callable[..., LiveStore]) -> LiveStore:
    return make_store()


@pytest.fixture
def conv(key_tag: str) -> ConversationKey:
    return ConversationKey(platform="twitch", channel=f"chan-{key_tag}")


async def commit(store: LiveStore, conv: ConversationKey, changes: Changes, now: float) -> None:
    """``changes`` as a turn's commit writes them (a ``ChannelSave`` of ``TurnChanges``)."""
    save = TurnChanges(channel=ChannelSave(conv, changes, now))
    if isinstance(store, RedisLiveStore):
        await RedisTurnStore(store.redis, channels=store).write(save)
    else:
        assert isinstance(store, MemoryLiveStore)
        await MemoryTurnStore(channels=store).write(save)


async def load(store: LiveStore, conv: ConversationKey, now: float = NOW) -> Snapshot:
    return await store.load(conv, now=now, users_since=now - 10)


async def test_an_unknown_channel_has_no_state(store: LiveStore, conv: ConversationKey) -> None:
    assert await load(store, conv) == Snapshot()
    assert await store.refresh_pause([conv]) == [False]


async def test_pause_and_resume_are_kept(store: LiveStore, conv: ConversationKey) -> None:
    await commit(store, conv, Changes(paused=True), NOW)
    assert (await load(store, conv)).paused
    assert await store.refresh_pause([conv]) == [True]
    await commit(store, conv, Changes(paused=False), NOW + 5)
    assert not (await load(store, conv)).paused
    assert await store.refresh_pause([conv]) == [False]  # resumed: nothing to refresh


async def test_a_pause_lapses_after_its_ttl_and_a_refresh_restarts_it(
    make_store: Callable[..., LiveStore], conv: ConversationKey
) -> None:
    store = make_store(pause_seconds=2)
    other = ConversationKey(platform=conv.platform, channel=conv.channel, thread="t")
    await store.save({conv: Changes(paused=True), other: Changes(paused=True)}, NOW)

    async def refreshed_until_other_lapses() -> None:
        while (await load(store, other)).paused:
            assert await store.refresh_pause([conv]) == [True]
            await asyncio.sleep(0.2)

    await asyncio.wait_for(refreshed_until_other_lapses(), 30)  # lapses after about 2 s
    assert (await load(store, conv)).paused  # kept alive by the refreshes
    assert await store.refresh_pause([conv, other]) == [True, False]


async def test_cooldowns_and_answered_messages_within_the_window(
    store: LiveStore, conv: ConversationKey
) -> None:
    await commit(
        store,
        conv,
        Changes(spoke=NOW - 3, users={"ann": NOW - 30, "bob": NOW - 4}, answered={"m1": NOW - 30}),
        NOW - 3,
    )
    await commit(store, conv, Changes(users={"cat": NOW - 1}, answered={"m2": NOW - 1}), NOW - 1)
    snap = await store.load(conv, now=NOW, users_since=NOW - 10)
    assert snap.spoke == NOW - 3
    assert dict(snap.users) == {"bob": NOW - 4, "cat": NOW - 1}  # ann's cooldown is long over
    assert snap.answered == ("m2", "m1")  # newest first
    later = NOW + LEDGER - 2  # m1 and the last spoke are past the ledger window by now
    snap = await store.load(conv, now=later, users_since=later - 10)
    assert snap == Snapshot(answered=("m2",))


async def test_writes_prune_what_the_window_and_the_cap_leave_behind(
    make_store: Callable[..., LiveStore], conv: ConversationKey
) -> None:
    store = make_store(answered_limit=3)
    await commit(store, conv, Changes(answered={"old": NOW - LEDGER - 1}), NOW - LEDGER - 1)
    answered = {f"m{i}": NOW + i for i in range(5)}
    await commit(store, conv, Changes(answered=answered, users={"ann": NOW}), NOW + 4)
    snap = await store.load(conv, now=NOW + 4, users_since=NOW - LEDGER)
    assert snap.answered == ("m4", "m3", "m2")
    if isinstance(store, RedisLiveStore):  # pruned in Redis, not only filtered on read
        members = await store.redis.zrange(keys.live("answered", conv), 0, -1)
        assert members == ["m2", "m3", "m4"]


async def test_the_same_changes_saved_twice_change_nothing(
    store: LiveStore, conv: ConversationKey
) -> None:
    changes = Changes(paused=True, spoke=NOW, users={"ann": NOW}, answered={"m1": NOW})
    await commit(store, conv, changes, NOW)
    once = await load(store, conv)
    await commit(store, conv, changes, NOW)  # a retried commit queues the same writes again
    assert await load(store, conv) == once


async def test_channels_and_threads_are_kept_apart(store: LiveStore, conv: ConversationKey) -> None:
    thread = ConversationKey(platform=conv.platform, channel=conv.channel, thread="t")
    await store.save({thread: Changes(paused=True, users={"ann": NOW})}, NOW)
    assert await load(store, conv) == Snapshot()
    assert (await load(store, thread)).paused


async def test_save_and_load_are_one_round_trip_each(
    store: LiveStore, conv: ConversationKey
) -> None:
    other = ConversationKey(platform="youtube", channel=conv.channel)
    trips: list[int] = []
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: store.save({conv: Changes(paused=True), other: Changes(spoke=NOW)}, NOW),
        lambda: store.save({conv: Changes()}, NOW),  # nothing to write
        lambda: load(store, conv),
        lambda: store.refresh_pause([conv, other]),
    ]
    for call in calls:
        with counting_round_trips() as counter:
            await call()
        trips.append(counter.count)
    expected = [1, 0, 1, 1] if isinstance(store, RedisLiveStore) else [0, 0, 0, 0]
    assert trips == expected


async def test_every_pause_and_resume_is_in_the_feed_once_for_each_reader(
    store: LiveStore, conv: ConversationKey
) -> None:
    """The feed other workers follow: only pause decisions, in order, each reader its own
    cursor; a reader that starts now sees nothing older (it loads the channels it takes up)."""
    other = ConversationKey(platform="discord", channel=conv.channel)
    await store.save({conv: Changes(paused=True, pause_at=NOW)}, NOW)
    first, nothing = await store.pause_changes(None)
    assert nothing == []
    await store.save({conv: Changes(spoke=NOW + 1)}, NOW + 1)  # not a pause: not in the feed
    await store.save({other: Changes(paused=True, pause_at=NOW + 2)}, NOW + 2)
    await commit(store, conv, Changes(paused=False, pause_at=NOW + 3), NOW + 3)
    cursor, changed = await store.pause_changes(first)
    mine = [c for c in changed if c.channel == conv.channel]  # a real server is shared
    assert mine == [other, conv]
    again, changed = await store.pause_changes(cursor)
    assert [c for c in changed if c.channel == conv.channel] == []
    _, changed = await store.pause_changes(first)  # another reader, at its own place
    assert [c for c in changed if c.channel == conv.channel] == [other, conv]
    with counting_round_trips() as counter:
        await store.pause_changes(again)
    assert counter.count == (1 if isinstance(store, RedisLiveStore) else 0)


async def test_every_key_has_a_ttl(redis_client: Redis, conv: ConversationKey) -> None:
    store = RedisLiveStore(redis_client, pause_seconds=3600, ledger_seconds=LEDGER)
    changes = Changes(paused=True, spoke=NOW, users={"ann": NOW}, answered={"m1": NOW})
    await store.save({conv: changes}, NOW)
    ttls = [await redis_client.ttl(keys.live(kind, conv)) for kind in keys.LIVE_KINDS]
    assert await redis_client.ttl(keys.live_pauses()) > 0  # the pause feed: capped, and a TTL
    assert ttls[0] in range(3590, 3601)  # paused: CHORUS_ENGAGE_PAUSE_HOURS
    assert all(ttl in range(LEDGER - 10, LEDGER + 1) for ttl in ttls[1:]), ttls


async def test_an_older_decision_written_later_never_undoes_a_newer_one(
    store: LiveStore, conv: ConversationKey
) -> None:
    """A retried commit, or a process that was cut off, may write after a newer decision."""
    await commit(store, conv, Changes(paused=False, pause_at=NOW + 5, spoke=NOW + 5), NOW + 5)
    await commit(store, conv, Changes(paused=True, pause_at=NOW, spoke=NOW), NOW)
    snap = await load(store, conv, NOW + 6)
    assert (snap.paused, snap.pause_at, snap.spoke) == (False, NOW + 5, NOW + 5)
    assert await store.refresh_pause([conv]) == [False]
    await commit(store, conv, Changes(paused=True, pause_at=NOW + 7), NOW + 7)
    assert (await load(store, conv, NOW + 8)).paused
