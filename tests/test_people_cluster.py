"""``/link`` on a real Redis Cluster of three primaries (bot/state/people_cluster.py): what its
per-slot steps promise beyond the people contract suites (tests/test_identity*.py, which run
there too).

A linked person's buffer lives in the person's slot, apart from its identities': writes through
both identities at once are all kept (each watched in that slot); an unlink cut short between
its steps (the identity out of the member set, its alias not yet deleted) leaves a stale alias
that the identity's next write repairs, and that ``/unlink`` finishes, rather than writing into
a person the identity no longer belongs to.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest
from redis.asyncio import Redis

from bot.state import keys
from bot.state.people import Parting, PeopleStore, Side

pytestmark = [pytest.mark.redis, pytest.mark.e2e]

TTL = 3600


def merge(one: Side, other: Side) -> str:
    return json.dumps(sorted(json.loads(one.raw or "[]") + json.loads(other.raw or "[]")))


def adding(item: str) -> Callable[[str | None, str | None], str]:
    def edit(raw: str | None, person: str | None) -> str:
        return json.dumps([*json.loads(raw or "[]"), item])

    return edit


async def linked(store: PeopleStore, tag: str) -> tuple[str, str]:
    """``twitch:a-TAG`` and ``discord:a-TAG`` linked, each with one entry of its own first."""
    ada_t, ada_d = ("twitch", f"a-{tag}"), ("discord", f"a-{tag}")
    await store.save(*ada_t, json.dumps(["t0"]), TTL)
    await store.save(*ada_d, json.dumps(["d0"]), TTL)
    assert await store.link(ada_t, ada_d, merge, lambda: f"p-{tag}", ttl_seconds=TTL)
    return f"a-{tag}", f"p-{tag}"


async def test_writes_through_both_identities_at_once_are_all_kept(
    cluster_client: Redis, key_tag: str
) -> None:
    store = PeopleStore(cluster_client)
    user, person = await linked(store, key_tag)
    assert await store.load("twitch", user) == (person, json.dumps(["d0", "t0"]))
    assert not await cluster_client.exists(keys.memory("twitch", user)), "merged away"

    writes = [
        store.update(platform, user, adding(f"{platform}{n}"), ttl_seconds=TTL)
        for n in range(4)
        for platform in ("twitch", "discord")
    ]
    assert all(await asyncio.gather(*writes))
    _, raw = await store.load("discord", user)
    assert raw is not None
    assert sorted(json.loads(raw)) == sorted(
        ["d0", "t0", *(f"{p}{n}" for n in range(4) for p in ("twitch", "discord"))]
    )
    assert keys.slot_tag(keys.person_memory(person)) == f"person:{person}"


async def test_an_unlink_cut_short_leaves_an_alias_the_next_write_repairs(
    cluster_client: Redis, key_tag: str
) -> None:
    store = PeopleStore(cluster_client)
    user, person = await linked(store, key_tag)
    # an unlink's first step only (the process killed before its second): out of the set
    await cluster_client.srem(keys.person_members(person), keys.identity_member("twitch", user))

    assert await store.update("twitch", user, adding("mine"), ttl_seconds=TTL)
    assert await store.person("twitch", user) is None, "the stale alias went"
    assert await store.load("twitch", user) == (None, json.dumps(["mine"]))
    _, kept = await store.load("discord", user)
    assert kept == json.dumps(["d0", "t0"]), "the person was not written through a stale alias"


async def test_unlink_finishes_an_unlink_cut_short(cluster_client: Redis, key_tag: str) -> None:
    store = PeopleStore(cluster_client)
    user, person = await linked(store, key_tag)
    await cluster_client.srem(keys.person_members(person), keys.identity_member("twitch", user))

    def cut(raw: str | None, others: list[tuple[str, str]], dissolve: bool) -> Parting:
        raise AssertionError("nothing to part: the identity already left")

    assert await store.split(("twitch", user), cut, ttl_seconds=TTL) is None
    assert await store.person("twitch", user) is None
    assert await store.person("discord", user) == person
