"""The conduit store (``bot.state.conduits``) under one contract: the in-memory twin, and
``RedisConduitStore`` on the embedded store and on a real Redis server.

One conduit id wins when processes race to record theirs; a shard has one holder at a time, only
the holder renews or releases it, and a lapsed lease frees it for another process; the members
are the processes whose heartbeat has not lapsed; the size a resize records is what every
process reads; channels joined and left at run time combine
with ``TWITCH_CHANNELS`` as documented.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from bot.state import connect, keys
from bot.state.conduits import (
    ConduitStore,
    MemoryConduitStore,
    RedisConduitStore,
    channels_now,
    normal_channel,
)
from tests.waiting import until

LEASE = 0.3  # seconds: long enough for a step, short enough that a lapse is quick to wait for


@pytest.fixture(
    params=[
        pytest.param("twin", id="twin"),
        pytest.param("memory", id="memory", marks=pytest.mark.redis),
        pytest.param("real", id="real", marks=pytest.mark.redis),
        pytest.param("cluster", id="cluster", marks=[pytest.mark.redis, pytest.mark.e2e]),
    ]
)
async def store(request: pytest.FixtureRequest, key_tag: str) -> AsyncIterator[ConduitStore]:
    if request.param == "twin":
        yield MemoryConduitStore()
        return
    url = f"memory://test-{key_tag}"
    if request.param == "real":
        url = request.getfixturevalue("redis_url_real_only")
    if request.param == "cluster":  # three primaries (tests/redis_cluster.py), cluster layout
        url = request.getfixturevalue("redis_cluster_url")
    client = await connect.open_redis(url)
    try:
        yield RedisConduitStore(client)
    finally:
        await client.aclose()
        keys.use_cluster_layout(False)


async def test_the_first_conduit_recorded_wins(store: ConduitStore, key_tag: str) -> None:
    app = f"app-{key_tag}"
    assert await store.conduit(app) is None
    winners = await asyncio.gather(*(store.adopt_conduit(app, f"c{n}") for n in range(5)))
    assert len(set(winners)) == 1
    assert await store.conduit(app) == winners[0]
    # a conduit Twitch no longer has is replaced once, only if it is still the recorded one
    assert await store.replace_conduit(app, "someone-else", "new") == winners[0]
    assert await store.replace_conduit(app, winners[0], "new") == "new"
    assert await store.conduit(app) == "new"


async def test_a_shard_has_one_holder_and_only_it_renews_or_releases(
    store: ConduitStore, key_tag: str
) -> None:
    conduit = f"conduit-{key_tag}"
    assert await store.claim(conduit, 0, "p1", 30)
    assert not await store.claim(conduit, 0, "p2", 30)
    assert await store.claim(conduit, 1, "p2", 30)
    assert await store.owners(conduit, 3) == {0: "p1", 1: "p2"}
    assert not await store.renew(conduit, 0, "p2", 30)
    assert not await store.release(conduit, 0, "p2")
    assert await store.renew(conduit, 0, "p1", 30)
    assert await store.release(conduit, 0, "p1")
    assert await store.owners(conduit, 3) == {1: "p2"}
    assert await store.claim(conduit, 0, "p2", 30)
    assert await store.owners(conduit, 3) == {0: "p2", 1: "p2"}


async def test_concurrent_claims_of_one_shard_grant_it_once(
    store: ConduitStore, key_tag: str
) -> None:
    conduit = f"race-{key_tag}"
    granted = await asyncio.gather(*(store.claim(conduit, 2, f"p{n}", 30) for n in range(8)))
    assert sum(granted) == 1


async def test_a_lapsed_lease_frees_the_shard_and_cannot_be_renewed(
    store: ConduitStore, key_tag: str
) -> None:
    conduit = f"lapse-{key_tag}"
    if isinstance(store, MemoryConduitStore):
        now = [1000.0]
        store.clock = lambda: now[0]
        assert await store.claim(conduit, 0, "dead", LEASE)
        now[0] += LEASE + 0.01
    else:
        assert await store.claim(conduit, 0, "dead", LEASE)

    async def free() -> bool:
        return await store.owners(conduit, 1) == {}

    await until(free, limit=30)
    assert not await store.renew(conduit, 0, "dead", 30)
    assert await store.claim(conduit, 0, "alive", 30)
    assert await store.owners(conduit, 1) == {0: "alive"}


async def test_members_are_the_processes_whose_heartbeat_has_not_lapsed(
    store: ConduitStore, key_tag: str
) -> None:
    conduit = f"members-{key_tag}"
    now = [1000.0]
    if isinstance(store, (MemoryConduitStore, RedisConduitStore)):
        store.clock = lambda: now[0]
    assert await store.heartbeat(conduit, "p1", 10) == ["p1"]
    assert await store.heartbeat(conduit, "p2", 10) == ["p1", "p2"]
    now[0] += 6
    assert await store.heartbeat(conduit, "p2", 10) == ["p1", "p2"]
    now[0] += 6  # p1's last heartbeat lapsed
    assert await store.heartbeat(conduit, "p2", 10) == ["p2"]
    assert await store.heartbeat(conduit, "p3", 10) == ["p2", "p3"]
    await store.leave_members(conduit, "p3")
    assert await store.heartbeat(conduit, "p2", 10) == ["p2"]


async def test_the_size_is_recorded_per_conduit_and_replaced_by_a_resize(
    store: ConduitStore, key_tag: str
) -> None:
    conduit, other = f"c-{key_tag}", f"d-{key_tag}"
    assert await store.size(conduit) is None
    await store.set_size(conduit, 4)
    await store.set_size(other, 2)
    assert await store.size(conduit) == 4
    await store.set_size(conduit, 7)  # a gateway resized the conduit
    assert (await store.size(conduit), await store.size(other)) == (7, 2)


async def test_joined_and_left_channels_combine_with_the_configured_ones(
    store: ConduitStore, key_tag: str
) -> None:
    app = f"chan-{key_tag}"
    assert await store.channel_changes(app) == (set(), set(), 0)
    await store.join_channel(app, "newchan")
    await store.leave_channel(app, "oldchan")
    joined, left, changes = await store.channel_changes(app)
    assert (joined, left, changes) == ({"newchan"}, {"oldchan"}, 2)
    assert channels_now(("oldchan", "other"), joined, left) == ["other", "newchan"]
    await store.join_channel(app, "oldchan")  # joining again undoes the leave
    await store.leave_channel(app, "newchan")
    joined, left, changes = await store.channel_changes(app)
    assert channels_now(("oldchan", "other"), joined, left) == ["oldchan", "other"]
    await store.join_channel(app, "oldchan")  # the same sets; the count tells it was asked
    assert await store.channel_changes(app) == (joined, left, changes + 1)


@pytest.mark.parametrize("name", ["#MyChannel", " mychannel ", "12345"])
def test_channel_names_are_normalised(name: str) -> None:
    assert normal_channel(name) in ("mychannel", "12345")


@pytest.mark.parametrize("name", ["", "#", "bad name", "a" * 26, "x;y"])
def test_a_bad_channel_name_is_refused_with_what_a_channel_is(name: str) -> None:
    with pytest.raises(ValueError, match="twitch.tv/<login>"):
        normal_channel(name)
