"""One person across platforms: one-time link codes, ``/link`` and ``/unlink``.

An identity is a platform plus that platform's user id -- never a display name, which anyone
can take. Linking is proven by possession: ``/link`` on platform A hands out a one-time code,
and only someone who can read that reply (privately where the platform allows) can type it on
platform B. The two identities then become one *person*: each gets an alias to a fresh person
id (bot/memory/aliases.py), their buffers are merged once with the usual duplicate rule and caps
(``merge_buffers``), and from then on every read and write of either identity -- the reply
path, ``/remember``, the insights agent -- goes to the person's one buffer. Linking an identity
of a person to another identity (or person) joins them all into one person.

Codes: 8 characters from a 31-character alphabet without look-alikes (0/O, 1/I/L), about 8.5e11
values; single use (``GETDEL``); alive 10 minutes; handed out only where the reply is private
(``bot/router/link_commands.py`` refuses in public chat, where whoever types a code first would
join the asker's person and read their memory); a new code voids the identity's previous one. An identity that types 5
unknown codes within 10 minutes is refused until the window passes, so guessing a code someone
else just made is hopeless (5 tries against 8.5e11 values).

``/unlink`` takes the identity out of its person; each side keeps a copy of what was known when
they separated (nothing is lost, and nothing learnt afterwards on one side reaches the other). A
person left with one identity is dissolved back into a plain identity. ``/forget`` on a linked
identity forgets the person: every linked identity's memory and lines, and the links themselves
(bot/router/memory_commands.py, with ``identities`` and ``queue_dissolve``).

Every change is one ``WATCH``/``MULTI`` transaction over the aliases, member sets and buffers it
reads, retried on a race, so a concurrent ``/link``, ``/unlink`` or insights write is never lost
or half applied.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import cast

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import WatchError

from bot.memory import aliases
from bot.memory.buffers import MemoryStore, UserBuffer, decode, encode, fit
from bot.memory.edit import merge_buffers
from bot.state import keys

CODE_ALPHABET = "23456789ABCDEFGHJKMNPQRSTUVWXYZ"
CODE_LENGTH = 8
CODE_SECONDS = 600
MAX_FAILED_CODES = 5
FAILED_WINDOW_SECONDS = 600
_RETRIES = 8

Identity = tuple[str, str]


class LinkOutcome(StrEnum):
    LINKED = "linked"
    ALREADY = "already"
    OWN_CODE = "own_code"
    SAME_PLATFORM = "same_platform"
    UNKNOWN = "unknown"
    MALFORMED = "malformed"
    TOO_MANY = "too_many"


@dataclass(frozen=True)
class LinkResult:
    outcome: LinkOutcome
    other: Identity | None = None
    pins: int = 0
    recommendations: int = 0


def new_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def normal_code(text: str) -> str | None:
    """A typed code in canonical form (case, spaces and dashes forgiven), None if it cannot
    be one."""
    code = "".join(text.split()).replace("-", "").upper()
    if len(code) != CODE_LENGTH or not set(code) <= set(CODE_ALPHABET):
        return None
    return code


class People:
    """Link codes and the person each identity belongs to, over any Redis client."""

    def __init__(
        self,
        memory: MemoryStore,
        *,
        codes: Callable[[], str] = new_code,
        person_ids: Callable[[], str] = lambda: secrets.token_hex(12),
    ) -> None:
        self.memory = memory
        self.redis: Redis = memory.redis
        self._codes = codes
        self._person_ids = person_ids

    @property
    def ttl(self) -> int:
        return self.memory.settings.ttl_seconds

    # -- codes --------------------------------------------------------------------------------
    async def issue(self, platform: str, user_id: str) -> tuple[str, int]:
        """A fresh one-time code for this identity (voiding its previous one), and its life in
        seconds. The caller shows it only in a private reply."""
        seconds = CODE_SECONDS
        code = self._codes()
        mine = keys.user(platform, user_id, "linkcode")
        previous = cast("str | None", await self.redis.get(mine))
        async with self.redis.pipeline(transaction=True) as pipe:
            if previous:
                pipe.delete(keys.link_code(previous))
            pipe.set(keys.link_code(code), keys.identity_member(platform, user_id), ex=seconds)
            pipe.set(mine, code, ex=seconds)
            await pipe.execute()
        return code, seconds

    async def void_code(self, platform: str, user_id: str) -> None:
        """Void the identity's outstanding code, if any (``/forget``)."""
        mine = keys.user(platform, user_id, "linkcode")
        code = cast("str | None", await self.redis.getdel(mine))
        if code:
            await self.redis.delete(keys.link_code(code))

    async def redeem(self, platform: str, user_id: str, typed: str) -> LinkResult:
        """Link this identity with the one that issued ``typed``."""
        tries = keys.user(platform, user_id, "linktries")
        failed = cast("str | None", await self.redis.get(tries))
        if failed is not None and int(failed) >= MAX_FAILED_CODES:
            return LinkResult(LinkOutcome.TOO_MANY)
        code = normal_code(typed)
        if code is None:
            return LinkResult(LinkOutcome.MALFORMED)
        issuer_text = cast("str | None", await self.redis.getdel(keys.link_code(code)))
        if issuer_text is None:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.incr(tries)
                pipe.expire(tries, FAILED_WINDOW_SECONDS, nx=True)
                await pipe.execute()
            return LinkResult(LinkOutcome.UNKNOWN)
        issuer = keys.parse_identity_member(issuer_text)
        await self.redis.delete(keys.user(*issuer, "linkcode"))
        if issuer == (platform, user_id):
            return LinkResult(LinkOutcome.OWN_CODE)
        if issuer[0] == platform:
            return LinkResult(LinkOutcome.SAME_PLATFORM, other=issuer)
        return await self.link(issuer, (platform, user_id))

    # -- linking ------------------------------------------------------------------------------
    async def person(self, platform: str, user_id: str) -> str | None:
        return cast("str | None", await self.redis.get(keys.person_of(platform, user_id)))

    async def identities(self, platform: str, user_id: str) -> list[Identity]:
        """Every identity of this identity's person (itself first); just itself if unlinked.
        A member whose alias lapsed or points elsewhere is no longer one."""
        me = (platform, user_id)
        person = await self.person(platform, user_id)
        if person is None:
            return [me]
        members = await self._members(self.redis, person)
        return [me, *(m for m in members if m != me)]

    async def link(self, first: Identity, second: Identity) -> LinkResult:
        """Make ``first`` and ``second`` (and whoever each is linked with) one person."""
        async with self.redis.pipeline(transaction=True) as pipe:
            for _ in range(_RETRIES):
                try:
                    result = await self._link(pipe, first, second)
                    return result
                except WatchError:
                    continue
        raise RuntimeError(f"linking kept racing; gave up after {_RETRIES} tries")

    async def _link(self, pipe: Pipeline, first: Identity, second: Identity) -> LinkResult:
        await pipe.watch(keys.person_of(*first), keys.person_of(*second))
        found = await pipe.mget(keys.person_of(*first), keys.person_of(*second))
        p1, p2 = cast("list[str | None]", found)
        if p1 is not None and p1 == p2:
            await pipe.unwatch()  # type: ignore[no-untyped-call]
            return LinkResult(LinkOutcome.ALREADY, other=first)
        target = p1 or p2 or self._person_ids()
        members: set[Identity] = {first, second}
        for person in {p for p in (p1, p2) if p}:
            await pipe.watch(keys.person_members(person))
            members |= set(await self._members(pipe, person))
        mine = aliases.memory_key(*first, p1)
        theirs = aliases.memory_key(*second, p2)
        await pipe.watch(mine, theirs)
        raw_first, raw_second = cast("list[str | None]", await pipe.mget(mine, theirs))
        settings = self.memory.settings
        merged = fit(
            merge_buffers(
                decode(raw_first, platform=first[0], user_id=first[1]),
                decode(raw_second, platform=second[0], user_id=second[1]),
                max_pins=settings.pins_max,
                max_recs=settings.recs_max,
            ),
            settings,
        )
        pipe.multi()  # type: ignore[no-untyped-call]
        for key in {mine, theirs} - {keys.person_memory(target)}:
            pipe.delete(key)
        for person in {p for p in (p1, p2) if p and p != target}:
            pipe.delete(keys.person_members(person))
        self._queue_person(pipe, target, merged, members)
        await pipe.execute()
        return LinkResult(
            LinkOutcome.LINKED,
            other=first,
            pins=len(merged.pins),
            recommendations=len(merged.recommendations),
        )

    async def unlink(self, platform: str, user_id: str) -> list[Identity] | None:
        """Take this identity out of its person, each side keeping a copy of the memory;
        returns the identities it was linked with (None: it was not linked)."""
        me = (platform, user_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            for _ in range(_RETRIES):
                try:
                    await pipe.watch(keys.person_of(*me))
                    person = cast("str | None", await pipe.get(keys.person_of(*me)))
                    if person is None:
                        await pipe.unwatch()  # type: ignore[no-untyped-call]
                        return None
                    members_key, memory_key = (
                        keys.person_members(person),
                        keys.person_memory(person),
                    )
                    await pipe.watch(members_key, memory_key)
                    others = [m for m in await self._members(pipe, person) if m != me]
                    raw = cast("str | None", await pipe.get(memory_key))
                    pipe.multi()  # type: ignore[no-untyped-call]
                    leaving = [me, *others] if len(others) <= 1 else [me]
                    for identity in leaving:  # a person of one is no person: dissolve it
                        pipe.delete(keys.person_of(*identity))
                        pipe.srem(members_key, keys.identity_member(*identity))
                        if raw:
                            pipe.set(keys.memory(*identity), raw, ex=self.ttl)
                    if len(others) <= 1:
                        pipe.delete(members_key, memory_key)
                    await pipe.execute()
                    return others
                except WatchError:
                    continue
        raise RuntimeError(f"unlinking kept racing; gave up after {_RETRIES} tries")

    def queue_dissolve(self, pipe: Pipeline, person: str, identities: list[Identity]) -> None:
        """Queue the end of a person (``/forget``): its buffer, members and every alias."""
        pipe.delete(keys.person_memory(person), keys.person_members(person))
        for identity in identities:
            pipe.delete(keys.person_of(*identity))

    # -- helpers ------------------------------------------------------------------------------
    def _queue_person(
        self, pipe: Pipeline, person: str, buffer: UserBuffer, members: set[Identity]
    ) -> None:
        ttl = self.ttl
        if buffer.is_empty:
            pipe.delete(keys.person_memory(person))
        else:
            pipe.set(keys.person_memory(person), encode(buffer), ex=ttl)
        members_key = keys.person_members(person)
        pipe.sadd(members_key, *sorted(keys.identity_member(*m) for m in members))
        pipe.expire(members_key, ttl)
        for identity in sorted(members):
            pipe.set(keys.person_of(*identity), person, ex=ttl)

    async def _members(self, client: Redis | Pipeline, person: str) -> list[Identity]:
        """The identities whose alias still names ``person`` (sorted, for stable order)."""
        raw = await client.smembers(keys.person_members(person))
        listed = sorted(keys.parse_identity_member(str(m)) for m in raw)
        if not listed:
            return []
        names = await client.mget([keys.person_of(*m) for m in listed])
        return [m for m, named in zip(listed, names, strict=True) if named == person]
