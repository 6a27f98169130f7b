"""The people store: what Chorus keeps about each user, as the store holds it.

It owns the keys of per-user memory (``keys.memory``: one JSON string per identity, or per
person once identities are linked), the recent-conversation set, the ``/link`` aliases and each
person's member set, link codes and the confirmations they wait for, the ``/forget all`` vote,
the ``/pins`` view, and the transactions that change several of them at once: an update under
``WATCH``, a link, a split, a ``/forget``.

It speaks only strings. What a buffer holds, and how two are merged or one is parted by origin,
is ``bot.memory``'s (buffers, edit, people), handed in as functions called inside the
transaction; so the rules of memory stay out of the storage and Redis stays out of the rules.
A function handed in may be called more than once (each retry after a race re-reads and calls
it again) and must not write anywhere itself.

Every multi-key change is one ``WATCH``/``MULTI`` transaction over what it read, retried on a
race as ``bot.state.client.watched`` does, so a concurrent ``/link``, ``/unlink``, ``/forget``
or insights write is never lost or half applied. Why the reply path follows an alias with a
script rather than a second read: ``bot.state.alias_scripts``. On a Redis Cluster an identity's keys and its
person's hash to different slots: the changes that span both go in per-slot steps there
(``bot.state.people_cluster``, which says what that gives up).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import cast

from bot.state import insight_jobs, keys, people_cluster, turnlog
from bot.state.alias_scripts import LOAD, SAVE
from bot.state.client import Pipeline, is_cluster, watched
from bot.state.connect import Client
from bot.state.people_cluster import Parting, put
from bot.state.redis_turn import parse_alias_read

Identity = tuple[str, str]
__all__ = ["Forgotten", "Identity", "Parting", "PeopleStore", "Side", "forgotten", "memory_key"]
FORGET_TOMBSTONE_SECONDS = 24 * 3600


def memory_key(platform: str, user_id: str, person_id: str | None) -> str:
    """Where the identity's memory lives, given its alias (None: not linked)."""
    return keys.memory(keys.PERSON, person_id) if person_id else keys.memory(platform, user_id)


@dataclass(frozen=True)
class Side:
    """One side of a link as stored: its buffer's JSON (None: empty), the identity, and
    whether that JSON is a person's (its entries already say whose) or the identity's own."""

    raw: str | None
    identity: Identity
    linked: bool


@dataclass(frozen=True)
class Forgotten:
    """One identity to forget (``/forget``): who, the names it was seen under (the dashboard's
    name index), and when (the tombstone's moment, in ms)."""

    identity: Identity
    names: list[str]
    at_ms: int


def forgotten(identity: Identity, at: datetime, names: Iterable[str] = ()) -> Forgotten:
    """``identity`` forgotten at ``at`` (the tombstone's moment), with the names it was seen
    under."""
    return Forgotten(identity, list(names), int(at.timestamp() * 1000))


class PeopleStore:
    """The people keys over one store client (a Redis server or the embedded store)."""

    def __init__(self, redis: Client) -> None:
        self.redis = redis

    # -- memory buffers -----------------------------------------------------------------------
    async def load(self, platform: str, user_id: str) -> tuple[str | None, str | None]:
        """``(person id or None, the stored buffer's JSON or None)`` for one identity, in one
        round trip (the ``LOAD`` script the turn's read also sends; two on a cluster for a
        linked identity)."""
        if is_cluster(self.redis):
            return await people_cluster.load(self.redis, platform, user_id)
        result = await self.redis.eval(
            LOAD,
            2,
            keys.person_of(platform, user_id),
            keys.memory(platform, user_id),
            keys.person_prefix(),
            0,
        )
        return parse_alias_read(result)

    async def save(self, platform: str, user_id: str, value: str, ttl_seconds: int) -> None:
        """Store ``value`` (``""``: delete) where the identity's memory lives, in one round
        trip (a linked identity's, on a cluster: two and more, ``people_cluster.save``)."""
        if is_cluster(self.redis):
            await people_cluster.save(self.redis, platform, user_id, value, ttl_seconds)
            return
        await self.redis.eval(
            SAVE,
            2,
            keys.person_of(platform, user_id),
            keys.memory(platform, user_id),
            keys.person_prefix(),
            value,
            ttl_seconds,
        )

    async def conversations(self, platform: str, user_id: str) -> list[str]:
        """The conversations the user spoke in lately, most recent first (as stored)."""
        raw = await self.redis.zrevrange(keys.user_conversations(platform, user_id), 0, -1)
        return [str(text) for text in raw]

    async def update(
        self,
        platform: str,
        user_id: str,
        edit: Callable[[str | None, str | None], str | None],
        *,
        ttl_seconds: int,
        unless_forgotten_since_ms: int | None = None,
    ) -> bool:
        """Change the identity's stored buffer atomically: ``edit(raw, person)`` gets what is
        stored (and the person id when linked) and returns the new JSON, ``""`` to delete, or
        None to leave it. False, with nothing called, when the user said ``/forget`` at or
        after ``unless_forgotten_since_ms``."""
        if is_cluster(self.redis):
            return await people_cluster.update(
                self.redis,
                platform,
                user_id,
                edit,
                ttl_seconds=ttl_seconds,
                unless_forgotten_since_ms=unless_forgotten_since_ms,
            )
        alias, tomb = keys.person_of(platform, user_id), keys.forgotten(platform, user_id)

        async def save(pipe: Pipeline) -> bool:
            # the alias is watched too: a /link or /unlink meanwhile retries
            await pipe.watch(alias, tomb)
            person, forgot = await _read_two(self.redis, pipe, alias, tomb)
            since = unless_forgotten_since_ms
            if since is not None and forgot is not None and int(forgot) >= since:
                await pipe.unwatch()  # type: ignore[no-untyped-call]
                return False
            key = memory_key(platform, user_id, person)
            await pipe.watch(key)
            return await people_cluster.write_buffer(pipe, key, edit, person, ttl_seconds)

        return await watched(self.redis, save, f"the memory of {platform}:{user_id}")

    # -- the /pins view -----------------------------------------------------------------------
    async def pins_view(self, platform: str, user_id: str) -> str | None:
        """The fingerprints ``/pins`` last showed, in order (None: it showed nothing lately)."""
        return cast("str | None", await self.redis.get(keys.user(platform, user_id, "pinsview")))

    async def keep_pins_view(self, platform: str, user_id: str, prints: str, seconds: int) -> None:
        """Remember what ``/pins`` showed (``""``: it showed an empty list)."""
        view = keys.user(platform, user_id, "pinsview")
        if prints:
            await self.redis.set(view, prints, ex=seconds)
        else:
            await self.redis.delete(view)

    # -- link codes ---------------------------------------------------------------------------
    async def issue_code(
        self, platform: str, user_id: str, code: str, issuer: str, seconds: int
    ) -> None:
        """Store ``code`` (naming ``issuer``) for ``seconds``, voiding the identity's previous
        code."""
        mine = keys.user(platform, user_id, "linkcode")
        previous = cast("str | None", await self.redis.get(mine))
        # the codes hash apart from the identity's keys on a cluster: one write per node there
        async with self.redis.pipeline(transaction=not is_cluster(self.redis)) as pipe:
            if previous:
                pipe.delete(keys.link_code(previous))
            pipe.set(keys.link_code(code), issuer, ex=seconds)
            pipe.set(mine, code, ex=seconds)
            await pipe.execute()

    async def void_code(self, platform: str, user_id: str) -> None:
        """Void the identity's outstanding code and the link it waits to confirm."""
        mine = keys.user(platform, user_id, "linkcode")
        code = cast("str | None", await self.redis.getdel(mine))
        doomed = [keys.link_confirm(platform, user_id), keys.link_asked(platform, user_id)]
        await self.redis.delete(*doomed, *([keys.link_code(code)] if code else []))

    async def failed_codes(self, platform: str, user_id: str) -> int:
        """How many unknown codes the identity typed in the current window."""
        failed = await self.redis.get(keys.user(platform, user_id, "linktries"))
        return int(failed) if failed is not None else 0

    async def count_failed_code(self, platform: str, user_id: str, window_seconds: int) -> None:
        """One more unknown code typed; the window starts with the first."""
        tries = keys.user(platform, user_id, "linktries")
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.incr(tries)
            pipe.expire(tries, window_seconds, nx=True)
            await pipe.execute()

    async def take_code(self, code: str) -> str | None:
        """The issuer a code names, consumed (single use); None: no such code."""
        return cast("str | None", await self.redis.getdel(keys.link_code(code)))

    async def drop_code_of(self, platform: str, user_id: str) -> None:
        """The issuer's pointer to its code, once the code was used."""
        await self.redis.delete(keys.user(platform, user_id, "linkcode"))

    async def ask_confirmation(
        self, platform: str, user_id: str, waiting: str, seconds: int, asked_seconds: int
    ) -> None:
        """The link this identity must confirm within ``seconds``; ``asked_seconds`` longer,
        a late confirmation is told it came too late."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(keys.link_confirm(platform, user_id), waiting, ex=seconds)
            pipe.set(keys.link_asked(platform, user_id), "1", ex=asked_seconds)
            await pipe.execute()

    async def take_confirmation(self, platform: str, user_id: str) -> tuple[str | None, bool]:
        """The link waiting for this identity's confirmation (consumed), and whether one was
        asked lately at all."""
        waiting = cast("str | None", await self.redis.getdel(keys.link_confirm(platform, user_id)))
        asked = await self.redis.delete(keys.link_asked(platform, user_id))
        return waiting, bool(asked)

    # -- persons ------------------------------------------------------------------------------
    async def person(self, platform: str, user_id: str) -> str | None:
        return cast("str | None", await self.redis.get(keys.person_of(platform, user_id)))

    async def persons(self, *identities: Identity) -> list[str | None]:
        """Each identity's person id (None: not linked), in one round trip."""
        return await people_cluster.gets(self.redis, [keys.person_of(*i) for i in identities])

    async def members(self, person: str) -> list[Identity]:
        """The identities whose alias still names ``person`` (sorted, for stable order)."""
        return await _members(self.redis, person, self.redis)

    async def link(
        self,
        first: Identity,
        second: Identity,
        merge: Callable[[Side, Side], str],
        new_person: Callable[[], str],
        *,
        ttl_seconds: int,
    ) -> bool:
        """Make ``first`` and ``second`` (and whoever each is linked with) one person whose
        buffer is ``merge`` of the two sides; False: they already were one."""
        if is_cluster(self.redis):
            return await people_cluster.link(
                self.redis,
                first,
                second,
                lambda one, other: merge(Side(*one), Side(*other)),
                new_person,
                ttl_seconds=ttl_seconds,
            )

        return await watched(
            self.redis,
            lambda pipe: _link(pipe, first, second, merge, new_person, ttl_seconds),
            f"the persons of {first} and {second}",
        )

    async def split(
        self,
        me: Identity,
        cut: Callable[[str | None, list[Identity], bool], Parting],
        *,
        ttl_seconds: int,
    ) -> list[Identity] | None:
        """Take ``me`` out of its person: ``cut(raw, others, dissolve)`` says what each side
        keeps (``dissolve``: the person is left with one identity, so it ends and both get
        their own back). Returns the others (None: ``me`` was not linked)."""
        if is_cluster(self.redis):
            return await people_cluster.split(self.redis, me, cut, ttl_seconds=ttl_seconds)

        async def unlink(pipe: Pipeline) -> list[Identity] | None:
            await pipe.watch(keys.person_of(*me))
            person = cast("str | None", await pipe.get(keys.person_of(*me)))
            if person is None:
                await pipe.unwatch()  # type: ignore[no-untyped-call]
                return None
            members_key, buffer_key = (
                keys.person_members(person),
                keys.person_memory(person),
            )
            await pipe.watch(members_key, buffer_key)
            others = [m for m in await _members(pipe, person) if m != me]
            raw = cast("str | None", await pipe.get(buffer_key))
            dissolve = len(others) <= 1  # a person of one is no person
            parting = cut(raw, others, dissolve)
            pipe.multi()  # type: ignore[no-untyped-call]
            for identity in [me, *others] if dissolve else [me]:
                pipe.delete(keys.person_of(*identity))
                put(pipe, keys.memory(*identity), parting.own.get(identity, ""), ttl_seconds)
            for identity in [me, *others]:  # they held vectors of entries now elsewhere
                pipe.delete(keys.user_vectors(*identity))
            if dissolve:
                pipe.delete(members_key, buffer_key, keys.person_forget(person))
            else:
                pipe.srem(members_key, keys.identity_member(*me))
                put(pipe, buffer_key, parting.rest, ttl_seconds)
            await pipe.execute()
            return others

        return await watched(self.redis, unlink, f"the person of {me}")

    # -- /forget ------------------------------------------------------------------------------
    async def names_of(self, platform: str, user_id: str) -> set[str]:
        """The names the identity was seen under (the dashboard's people index)."""
        return await turnlog.names_of(self.redis, platform, user_id)

    async def forget(
        self,
        identities: Iterable[Forgotten],
        *,
        person: str | None,
        queue: str = insight_jobs.DEFAULT_QUEUE,
    ) -> None:
        """One transaction: each identity's buffer, conversations, vectors, names, insights
        jobs and ``/pins`` view go, a day-long tombstone stays (so an analysis already under
        way cannot write the buffer back), and ``person`` ends with them when given."""
        everyone = list(identities)
        cluster = is_cluster(self.redis)
        if cluster:  # the keys span slots: the tombstones first, then the rest (not atomic)
            async with self.redis.pipeline(transaction=False) as pipe:
                for gone in everyone:
                    _tombstone(pipe, gone)
                await pipe.execute()
        async with self.redis.pipeline(transaction=not cluster) as pipe:
            for gone in everyone:
                platform, who = gone.identity
                pipe.delete(keys.memory(platform, who))
                pipe.delete(keys.user_conversations(platform, who))
                pipe.delete(keys.user_vectors(platform, who))
                if not cluster:
                    _tombstone(pipe, gone)
                turnlog.forget_names(pipe, platform, who, gone.names)
                insight_jobs.queue_cancel(pipe, platform, who, queue=queue)
                pipe.delete(keys.user(platform, who, "pinsview"))
            if person is not None:
                pipe.delete(keys.person_memory(person))
                pipe.delete(keys.person_members(person))
                for gone in everyone:
                    pipe.delete(keys.person_of(*gone.identity))
            await pipe.execute()

    # -- /forget all: the vote ----------------------------------------------------------------
    async def open_vote(
        self, person: str, everyone: list[Identity], me: Identity, seconds: int
    ) -> None:
        """A new ``/forget all`` request: ``me`` says yes, every other identity no (yet)."""
        key = keys.person_forget(person)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(key)
            for member in everyone:
                pipe.hset(key, keys.identity_member(*member), "yes" if member == me else "no")
            pipe.expire(key, seconds)
            await pipe.execute()

    async def cast_vote(
        self, person: str, me: Identity
    ) -> tuple[dict[str, str], list[Identity]] | None:
        """``me``'s yes to the person's request. Returns what the request held before and the
        person's members then; the request is deleted by the last yes. None: ``me`` was not
        asked (nothing changed)."""
        key, mine = keys.person_forget(person), keys.identity_member(*me)

        async def vote(pipe: Pipeline) -> tuple[dict[str, str], list[Identity]] | None:
            await pipe.watch(key, keys.person_members(person))
            answers = cast("dict[str, str]", await pipe.hgetall(key))
            members = await _members(pipe, person, self.redis)
            if mine not in answers:
                await pipe.unwatch()  # type: ignore[no-untyped-call]
                return None
            waiting = [m for m, yes in answers.items() if yes != "yes" and m != mine]
            pipe.multi()  # type: ignore[no-untyped-call]
            if waiting:
                pipe.hset(key, mine, "yes")
            else:
                pipe.delete(key)
            await pipe.execute()
            return answers, members

        return await watched(self.redis, vote, f"/forget all of {person}")


async def _link(
    pipe: Pipeline,
    first: Identity,
    second: Identity,
    merge: Callable[[Side, Side], str],
    new_person: Callable[[], str],
    ttl: int,
) -> bool:
    await pipe.watch(keys.person_of(*first), keys.person_of(*second))
    found = await pipe.mget(keys.person_of(*first), keys.person_of(*second))
    p1, p2 = cast("list[str | None]", found)
    if p1 is not None and p1 == p2:
        await pipe.unwatch()  # type: ignore[no-untyped-call]
        return False
    target = p1 or p2 or new_person()
    members: set[Identity] = {first, second}
    for person in {p for p in (p1, p2) if p}:
        await pipe.watch(keys.person_members(person))
        members |= set(await _members(pipe, person))
    mine, theirs = memory_key(*first, p1), memory_key(*second, p2)
    await pipe.watch(mine, theirs)
    raw_first, raw_second = cast("list[str | None]", await pipe.mget(mine, theirs))
    merged = merge(Side(raw_first, first, p1 is not None), Side(raw_second, second, p2 is not None))
    pipe.multi()  # type: ignore[no-untyped-call]
    for key in {mine, theirs} - {keys.person_memory(target)}:
        pipe.delete(key)
    for person in {p for p in (p1, p2) if p and p != target}:
        pipe.delete(keys.person_members(person))
    put(pipe, keys.person_memory(target), merged, ttl)
    members_key = keys.person_members(target)
    pipe.sadd(members_key, *sorted(keys.identity_member(*m) for m in members))
    pipe.expire(members_key, ttl)
    for identity in sorted(members):
        pipe.set(keys.person_of(*identity), target, ex=ttl)
    await pipe.execute()
    return True


async def _members(
    client: Client | Pipeline, person: str, store: Client | None = None
) -> list[Identity]:
    """The identities in ``person``'s set whose alias names it, read on ``client`` (a watching
    pipeline too); on a cluster (``store`` given, a cluster client) the aliases, which hash to
    other slots, are read by the store client."""
    if store is not None and is_cluster(store):
        return await people_cluster.live_members(store, person)
    raw = await client.smembers(keys.person_members(person))
    listed = sorted(keys.parse_identity_member(str(m)) for m in raw)
    if not listed:
        return []
    names = await client.mget([keys.person_of(*m) for m in listed])
    return [m for m, named in zip(listed, names, strict=True) if named == person]


async def _read_two(client: Client, pipe: Pipeline, first: str, second: str) -> list[str | None]:
    """Two watched keys of one slot, read on ``pipe``: one ``MGET``, or on a cluster (whose
    pipeline sends no ``MGET``) a ``GET`` each."""
    if is_cluster(client):
        return [
            cast("str | None", await pipe.get(first)),
            cast("str | None", await pipe.get(second)),
        ]
    return cast("list[str | None]", await pipe.mget(first, second))


def _tombstone(pipe: Pipeline, gone: Forgotten) -> None:
    """The day-long mark of a ``/forget`` that blocks an older analysis's write-back."""
    pipe.set(keys.forgotten(*gone.identity), gone.at_ms, ex=FORGET_TOMBSTONE_SECONDS)
