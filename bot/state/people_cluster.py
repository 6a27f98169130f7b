"""The people store's changes that span an identity and a person, on a Redis Cluster: a memory
read and write through a ``/link`` alias, a link and an unlink, in steps of one slot each.

Why steps: on a cluster a transaction or script stays within one hash slot. An identity's keys
share one (``{platform:id}``: its alias, its own buffer, its ``/forget`` mark) and a person's
another (``{person:ID}``: its buffer, its member set, its ``/forget all`` vote), so a change
that moves a buffer between identities and a person spans slots; on one Redis it is one
``WATCH``/``MULTI`` transaction (``bot.state.people``) or one script (``alias_scripts``). Here
each step is a transaction of one slot, and the person's slot goes first:

* a link writes the person's buffer (merged under ``WATCH`` of the person's keys) and member
  set, then, in one pipeline, every member's alias, the unlinked sides' own buffers deleted and
  a merged-away person's keys;
* an unlink takes the identity out of the member set and writes what the person keeps (under
  ``WATCH``), then deletes the aliases and writes each leaving identity's own buffer;
* a write of a linked identity's memory (``update``, ``save``) watches the person's member set
  and buffer and writes only while the set still holds the identity.

An identity is linked into a person while its alias names the person AND the person's member
set holds it. An alias left naming a person whose set no longer holds the identity (an unlink
cut short) is stale: the next write of the identity deletes it and writes its own buffer, and
``/unlink`` deletes it.

Not atomic here, unlike on one Redis (docs/scaling.md, "Redis Cluster"): a memory write of one
of the identities (the insights agent's, ``/remember``) that lands in the milliseconds between a
link's or an unlink's two steps may be overwritten by the second step; a ``/forget`` of a linked
identity made while a write of its person's buffer is past its first step is not seen by that
write (the ``/forget`` deletes the buffer after its marks, so that write is what is left). A
process killed between two steps leaves, after a link's first, a person no alias names (it
lapses with its TTL; the identities keep their own memory and ``/link`` works again), after an
unlink's first, a stale alias (see above).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from bot.state import keys
from bot.state.alias_scripts import SAVE_OWN
from bot.state.client import Pipeline, WatchError, delete_if_holds, unraced
from bot.state.connect import Client

Identity = tuple[str, str]
Edit = Callable[[str | None, str | None], str | None]
Stored = tuple[str | None, Identity, bool]  # a side of a link: its buffer, who, whether linked
Merge = Callable[[Stored, Stored], str]


@dataclass(frozen=True)
class Parting:
    """What a split writes: each leaving identity's own buffer (``""`` or absent: none) and
    what the person keeps (``""``: nothing). (Here, where both backends' splits take it.)"""

    own: dict[Identity, str]
    rest: str


async def gets(redis: Client, names: list[str]) -> list[str | None]:
    """``GET`` of each key, in one pipeline (the keys hash to several slots: no ``MGET``)."""
    if not names:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.get(name)
        return cast("list[str | None]", await pipe.execute())


async def live_members(redis: Client, person: str) -> list[Identity]:
    """The identities in ``person``'s member set whose alias still names it (sorted)."""
    raw = await redis.smembers(keys.person_members(person))
    listed = sorted(keys.parse_identity_member(str(m)) for m in raw)
    names = await gets(redis, [keys.person_of(*m) for m in listed])
    return [m for m, named in zip(listed, names, strict=True) if named == person]


async def load(redis: Client, platform: str, user_id: str) -> tuple[str | None, str | None]:
    """``(person id or None, the stored buffer or None)``: the alias and the own buffer (one
    slot, one round trip), and for a linked identity the person's buffer (a second)."""
    person, own = await gets(
        redis, [keys.person_of(platform, user_id), keys.memory(platform, user_id)]
    )
    if person is None:
        return None, own
    return person, cast("str | None", await redis.get(keys.person_memory(person)))


async def save(redis: Client, platform: str, user_id: str, value: str, ttl_seconds: int) -> None:
    """``PeopleStore.save`` on a cluster: one round trip for an identity not linked (``SAVE_OWN``
    in its slot); a linked one's goes on as ``update``'s write, in the person's slot."""
    alias, own = keys.person_of(platform, user_id), keys.memory(platform, user_id)
    if await redis.eval(SAVE_OWN, 2, alias, own, value, ttl_seconds):
        await update(redis, platform, user_id, lambda _raw, _person: value, ttl_seconds=ttl_seconds)


async def update(
    redis: Client,
    platform: str,
    user_id: str,
    edit: Edit,
    *,
    ttl_seconds: int,
    unless_forgotten_since_ms: int | None = None,
) -> bool:
    """``PeopleStore.update`` on a cluster (its contract): the identity's slot (alias,
    ``/forget`` mark, own buffer) in one watched transaction; a linked identity's write in the
    person's slot, while its member set holds the identity."""
    alias, tomb = keys.person_of(platform, user_id), keys.forgotten(platform, user_id)
    own, me = keys.memory(platform, user_id), keys.identity_member(platform, user_id)

    async def attempt() -> bool:
        async with redis.pipeline(transaction=True) as pipe:
            await pipe.watch(alias, tomb, own)
            person = cast("str | None", await pipe.get(alias))
            forgot = cast("str | None", await pipe.get(tomb))
            since = unless_forgotten_since_ms
            if since is not None and forgot is not None and int(forgot) >= since:
                await pipe.unwatch()  # type: ignore[no-untyped-call]
                return False
            if person is None:
                return await write_buffer(pipe, own, edit, None, ttl_seconds)
            await pipe.unwatch()  # type: ignore[no-untyped-call]
        async with redis.pipeline(transaction=True) as pipe:
            members, buffer = keys.person_members(person), keys.person_memory(person)
            await pipe.watch(members, buffer)
            if await pipe.sismember(members, me):
                return await write_buffer(pipe, buffer, edit, person, ttl_seconds)
            await pipe.unwatch()  # type: ignore[no-untyped-call]
        await drop_stale_alias(redis, alias, person)
        raise WatchError("the alias named a person who no longer holds the identity")

    return await unraced(attempt, f"memory of {me}")


async def write_buffer(pipe: Pipeline, key: str, edit: Edit, person: str | None, ttl: int) -> bool:
    """The watched buffer at ``key`` edited and written (``edit`` returns None: left as it
    is), on either backend."""
    value = edit(cast("str | None", await pipe.get(key)), person)
    if value is None:
        await pipe.unwatch()  # type: ignore[no-untyped-call]
        return True
    pipe.multi()  # type: ignore[no-untyped-call]
    put(pipe, key, value, ttl)
    await pipe.execute()
    return True


async def drop_stale_alias(redis: Client, alias: str, person: str) -> None:
    """Delete ``alias`` if it still names ``person`` (whose member set no longer holds it)."""
    await delete_if_holds(redis, alias, person)


async def link(
    redis: Client,
    first: Identity,
    second: Identity,
    merge: Merge,
    new_person: Callable[[], str],
    *,
    ttl_seconds: int,
) -> bool:
    """``PeopleStore.link`` on a cluster (its contract), in the steps of the module docstring."""
    return await unraced(
        lambda: _link(redis, first, second, merge, new_person, ttl_seconds),
        f"the persons of {first} and {second}",
    )


async def _link(
    redis: Client,
    first: Identity,
    second: Identity,
    merge: Merge,
    new_person: Callable[[], str],
    ttl: int,
) -> bool:
    p1, p2 = await gets(redis, [keys.person_of(*first), keys.person_of(*second)])
    if p1 is not None and p1 == p2:
        return False
    target = p1 or p2 or new_person()
    members: set[Identity] = {first, second}
    for person in {p for p in (p1, p2) if p}:
        members |= set(await live_members(redis, person))
    mine, theirs = _memory_key(first, p1), _memory_key(second, p2)
    target_members, target_buffer = keys.person_members(target), keys.person_memory(target)
    async with redis.pipeline(transaction=True) as pipe:  # step 1: the person's slot
        await pipe.watch(target_members, target_buffer)
        held = cast("str | None", await pipe.get(target_buffer))
        elsewhere = await gets(redis, [key for key in (mine, theirs) if key != target_buffer])
        raw_first = held if mine == target_buffer else elsewhere.pop(0)
        raw_second = held if theirs == target_buffer else elsewhere.pop(0)
        merged = merge((raw_first, first, p1 is not None), (raw_second, second, p2 is not None))
        pipe.multi()  # type: ignore[no-untyped-call]
        put(pipe, target_buffer, merged, ttl)
        pipe.sadd(target_members, *sorted(keys.identity_member(*m) for m in members))
        pipe.expire(target_members, ttl)
        await pipe.execute()
    async with redis.pipeline(transaction=False) as pipe:  # step 2: the aliases, what merged
        for identity in sorted(members):
            pipe.set(keys.person_of(*identity), target, ex=ttl)
        for key in {mine, theirs} - {target_buffer}:
            pipe.delete(key)
        for person in {p for p in (p1, p2) if p and p != target}:
            pipe.delete(keys.person_members(person))
        await pipe.execute()
    return True


async def split(
    redis: Client,
    me: Identity,
    cut: Callable[[str | None, list[Identity], bool], Parting],
    *,
    ttl_seconds: int,
) -> list[Identity] | None:
    """``PeopleStore.split`` on a cluster (its contract), in the steps of the module docstring."""
    return await unraced(lambda: _split(redis, me, cut, ttl_seconds), f"the person of {me}")


async def _split(
    redis: Client,
    me: Identity,
    cut: Callable[[str | None, list[Identity], bool], Parting],
    ttl: int,
) -> list[Identity] | None:
    alias = keys.person_of(*me)
    person = cast("str | None", await redis.get(alias))
    if person is None:
        return None
    listed = await live_members(redis, person)
    members_key, buffer_key = keys.person_members(person), keys.person_memory(person)
    others = [m for m in listed if m != me]
    dissolve = len(others) <= 1  # a person of one is no person
    async with redis.pipeline(transaction=True) as pipe:  # step 1: the person's slot
        await pipe.watch(members_key, buffer_key)
        if not await pipe.sismember(members_key, keys.identity_member(*me)):
            await pipe.unwatch()  # type: ignore[no-untyped-call]
            await drop_stale_alias(redis, alias, person)  # an unlink cut short: finish it
            return None
        parting = cut(cast("str | None", await pipe.get(buffer_key)), others, dissolve)
        pipe.multi()  # type: ignore[no-untyped-call]
        if dissolve:
            pipe.delete(members_key)
            pipe.delete(buffer_key)
            pipe.delete(keys.person_forget(person))
        else:
            pipe.srem(members_key, keys.identity_member(*me))
            put(pipe, buffer_key, parting.rest, ttl)
        await pipe.execute()
    async with redis.pipeline(transaction=False) as pipe:  # step 2: the identities' slots
        for identity in [me, *others] if dissolve else [me]:
            pipe.delete(keys.person_of(*identity))
            put(pipe, keys.memory(*identity), parting.own.get(identity, ""), ttl)
        for identity in [me, *others]:  # they held vectors of entries now elsewhere
            pipe.delete(keys.user_vectors(*identity))
        await pipe.execute()
    return others


def _memory_key(identity: Identity, person: str | None) -> str:
    return keys.person_memory(person) if person else keys.memory(*identity)


def put(pipe: Pipeline, key: str, value: str, ttl: int) -> None:
    """``value`` at ``key`` with ``ttl`` (``""``: the key deleted)."""
    if value:
        pipe.set(key, value, ex=ttl)
    else:
        pipe.delete(key)
