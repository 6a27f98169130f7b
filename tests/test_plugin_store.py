"""What plugins keep (``ctx.store``) under one contract: the in-memory twin, and
``RedisPluginStore`` on the embedded store and on a real Redis server.

Values are JSON and stay in their plugin and place; ``incr`` is atomic under concurrent
writers; lists append and keep the newest ``max_len``; TTLs expire; ``/forget`` (``forget``)
takes exactly what the user owns: their own place, and the values and list entries written with
them as owner elsewhere, never another user's entries in the same list.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.events import Author, ChatMessage, ConversationKey
from bot.plugins.store import Item, PluginStore
from bot.state import connect, keys
from bot.state.plugin_store import MemoryPluginStore, Owner, PluginKV, RedisPluginStore

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(
    params=[
        pytest.param("twin", id="twin"),
        pytest.param("memory", id="memory", marks=pytest.mark.redis),
        pytest.param("real", id="real", marks=pytest.mark.redis),
        pytest.param("cluster", id="cluster", marks=[pytest.mark.redis, pytest.mark.e2e]),
    ]
)
async def kv(request: pytest.FixtureRequest, key_tag: str) -> AsyncIterator[PluginKV]:
    if request.param == "twin":
        yield MemoryPluginStore()
        return
    url = f"memory://test-{key_tag}"
    if request.param == "real":
        url = request.getfixturevalue("redis_url_real_only")
    if request.param == "cluster":  # three primaries (tests/redis_cluster.py), cluster layout
        url = request.getfixturevalue("redis_cluster_url")
    client = await connect.open_redis(url)
    try:
        yield RedisPluginStore(client)
    finally:
        await client.aclose()
        keys.use_cluster_layout(False)


def message(tag: str, user: str, channel: str = "chan", server: str = "guild") -> ChatMessage:
    return ChatMessage(
        platform="discord",
        id=f"m-{tag}-{user}",
        conversation=ConversationKey(platform="discord", channel=f"{channel}-{tag}"),
        author=Author(id=f"{user}-{tag}", display_name=user),
        text="hi",
        server=f"{server}-{tag}",
    )


async def test_values_are_json_and_stay_in_their_plugin_and_place(
    kv: PluginKV, key_tag: str
) -> None:
    ada = PluginStore(kv, f"quotes-{key_tag}", message(key_tag, "ada"))
    other = PluginStore(kv, f"other-{key_tag}", message(key_tag, "ada"))
    elsewhere = PluginStore(kv, f"quotes-{key_tag}", message(key_tag, "ada", channel="two"))
    value = {"text": "ça va?", "n": [1, 2.5, None, True]}
    await ada.channel.set("k", value)
    await ada.shared.set("k", "shared")
    await ada.user.set("k", 7)
    await ada.server.set("k", ["s"])
    assert await ada.channel.get("k") == value
    assert await ada.shared.get("k") == "shared"
    assert await ada.user.get("k") == 7
    assert await ada.server.get("k") == ["s"]
    assert await other.channel.get("k") is None
    assert await elsewhere.channel.get("k", "none") == "none"
    assert await elsewhere.server.get("k") == ["s"]  # the same server
    assert await ada.channel.delete("k") is True
    assert await ada.channel.delete("k") is False
    assert await ada.channel.get("k") is None


async def test_incr_is_atomic_across_concurrent_writers(kv: PluginKV, key_tag: str) -> None:
    store = PluginStore(kv, f"count-{key_tag}")
    results = await asyncio.gather(*(store.shared.incr("hits") for _ in range(50)))
    assert sorted(results) == list(range(1, 51))
    assert await store.shared.incr("hits", by=-10) == 40
    assert await store.shared.get("hits") == 40


async def test_claim_sets_once_across_concurrent_callers_until_it_expires(
    kv: PluginKV, key_tag: str
) -> None:
    store = PluginStore(kv, f"claim-{key_tag}")
    won = await asyncio.gather(*(store.shared.claim("cooldown", 0.3, i) for i in range(20)))
    assert won.count(True) == 1
    assert await store.shared.get("cooldown") == won.index(True)
    for _ in range(600):  # up to 60 s under load; usually a few rounds
        if await store.shared.claim("cooldown", 30):
            break
        await asyncio.sleep(0.1)
    assert await store.shared.get("cooldown") is True  # claimed again once expired
    assert not await store.shared.claim("cooldown", 30)
    with pytest.raises(ValueError, match="ttl"):
        await store.shared.claim("bad", 0)


async def test_lists_append_and_keep_the_newest(kv: PluginKV, key_tag: str) -> None:
    store = PluginStore(kv, f"list-{key_tag}", message(key_tag, "ada"))
    for n in range(5):
        length = await store.channel.push("log", {"n": n}, max_len=3)
    assert length == 3
    assert await store.channel.values("log") == [{"n": 2}, {"n": 3}, {"n": 4}]
    assert await store.channel.values("log", -1) == [{"n": 4}]
    assert await store.channel.values("log", 0, 1) == [{"n": 2}, {"n": 3}]
    assert await store.channel.length("log") == 3
    assert await store.channel.length("nothing") == 0
    assert await store.channel.values("nothing") == []


async def test_ttls_expire(kv: PluginKV, key_tag: str) -> None:
    store = PluginStore(kv, f"ttl-{key_tag}")
    await store.shared.set("short", 1, ttl=0.2)
    await store.shared.push("shortlist", 1, ttl=0.2)
    await store.shared.set("long", 1)
    assert await store.shared.get("short") == 1
    for _ in range(600):  # up to 60 s under load; usually one round
        if await store.shared.get("short") is None and not await store.shared.length("shortlist"):
            break
        await asyncio.sleep(0.1)
    assert await store.shared.get("short") is None
    assert await store.shared.length("shortlist") == 0
    assert await store.shared.get("long") == 1
    with pytest.raises(ValueError, match="ttl"):
        await store.shared.set("bad", 1, ttl=0)
    with pytest.raises(ValueError, match="ttl"):
        await store.shared.set("bad", 1, ttl=400 * 24 * 3600)


async def test_forget_takes_what_the_user_owns_and_nothing_else(kv: PluginKV, key_tag: str) -> None:
    ada_msg, bob_msg = message(key_tag, "ada"), message(key_tag, "bob")
    ada = PluginStore(kv, f"quotes-{key_tag}", ada_msg)
    bob = PluginStore(kv, f"quotes-{key_tag}", bob_msg)
    me = Owner("discord", ada_msg.author.id)
    await ada.channel.push("quotes", "ada's first", owner=me)
    await bob.channel.push("quotes", "bob's", owner=Owner("discord", bob_msg.author.id))
    await ada.channel.push("quotes", "ada's second", owner=me)
    await ada.channel.push("quotes", "nobody's")
    await ada.channel.set(f"fav:{me.user_id}", "x", owner=me)
    await ada.user.set("seen", 3)
    await ada.user.incr("count")
    await bob.user.set("seen", 4)
    items = await ada.channel.items("quotes")
    assert items[0] == Item("ada's first", me)
    assert items[3] == Item("nobody's", None)
    removed = await kv.forget("discord", ada_msg.author.id)
    assert removed == 5
    assert await bob.channel.values("quotes") == ["bob's", "nobody's"]
    assert await ada.channel.get(f"fav:{me.user_id}") is None
    assert await ada.user.get("seen") is None and await ada.user.get("count") is None
    assert await bob.user.get("seen") == 4
    assert await kv.forget("discord", ada_msg.author.id) == 0


async def test_a_timer_has_no_message_places(kv: PluginKV, key_tag: str) -> None:
    store = PluginStore(kv, f"t-{key_tag}")
    with pytest.raises(RuntimeError, match="no message"):
        _ = store.channel
    await store.for_channel("twitch", f"#c-{key_tag}").set("k", 1)
    assert await store.for_channel("twitch", f"#c-{key_tag}").get("k") == 1


_parts = st.text(min_size=1, max_size=8)


@given(a=st.tuples(_parts, _parts, _parts), b=st.tuples(_parts, _parts, _parts))
def test_distinct_places_have_distinct_keys(
    a: tuple[str, str, str], b: tuple[str, str, str]
) -> None:
    if a != b:
        key_a = keys.plugin_data(a[0], "chan", ("discord", a[1]), a[2])
        key_b = keys.plugin_data(b[0], "chan", ("discord", b[1]), b[2])
        assert key_a != key_b


def test_the_catalogue_lists_the_plugin_keys() -> None:
    catalogue = (ROOT / "docs" / "redis-keys.md").read_text()
    assert keys.plugin_data("p", "all", (), "k") == "chorus:v1:plugin:p:all:k"
    assert "`chorus:v1:plugin:{plugin}:{scope}[:{platform}:{id}]:{key}`" in catalogue
    assert keys.plugin_owned("discord", "1") == "chorus:v1:user:discord:1:plugins"
    assert "`chorus:v1:user:{platform}:{user_id}:plugins`" in catalogue
    assert keys.plugin_timer("p", "t", 5, "ns") == "chorus:v1:plugintimer:ns:p:t:5"
    assert "`chorus:v1:plugintimer:{ns}:{plugin}:{timer}:{slot}`" in catalogue
