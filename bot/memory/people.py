"""One person across platforms: one-time link codes, ``/link`` with consent, ``/unlink``.

An identity is a platform plus that platform's user id -- never a display name, which anyone
can take. Linking takes two steps, one by each identity. ``/link`` on platform A hands out a
one-time code, shown only where the reply is private: possessing it proves A's consent. Typing
the code on platform B links nothing yet: it answers which account it would link with and waits
for ``/link confirm`` from that same identity B, for ``CONFIRM_SECONDS`` (2 minutes). Without
that second step whoever typed a code posted as "type /link CODE for the giveaway" would have
their memory merged into the poster's, who would read it with ``/pins``. The waiting link is
per identity (``keys.link_confirm``): only the account that typed the code can confirm it, and
a second code typed replaces the first. ``keys.link_asked`` outlives it, so a confirmation that
comes too late is told so.

Once confirmed, the two identities become one *person*: each gets an alias to a fresh person id
(bot/memory/aliases.py), their buffers are merged once with the usual duplicate rule and caps
(``merge_buffers``), each entry marked with the identity it came from (bot/memory/origins.py),
and from then on every read and write of either identity goes to the person's one buffer, each
change marked with the identity that made it. Linking an identity of a person to another
identity (or person) joins them all into one person.

Codes: 8 characters from a 31-character alphabet without look-alikes (0/O, 1/I/L), about 8.5e11
values; single use (``GETDEL`` when typed); alive 10 minutes; a new code voids the identity's
previous one. An identity that types 5 unknown codes within 10 minutes is refused until the
window passes, so guessing a code someone else just made is hopeless.

A person splits by origin. ``/unlink`` takes the identity out and gives it back the entries that
came from it; the rest stay with the person (a person left with one identity is dissolved, and
that identity gets its own entries back). ``/forget`` on a linked identity does the same without
giving the asker anything back (``leave``: bot/router/forget_commands.py forgets their lines).
Entries without an origin -- stored in a person before origins were recorded -- and entries of an
identity that dropped out of the person (its alias lapsed) belong to no side of the split: they
are kept by neither. That is the safe choice: nothing can show whose they are, and handing them
to the wrong side is exactly the leak this guards against, while dropping them costs at most what
the account can tell Chorus again. A split also drops every member's embedding vectors, which
the reply path recomputes from what each side now holds.

``/forget all`` forgets the whole person only once every identity agreed
(bot/memory/shared_forget.py).

Every change is one ``WATCH``/``MULTI`` transaction over the aliases, member sets and buffers it
reads, retried on a race, so a concurrent ``/link``, ``/unlink`` or insights write is never lost
or half applied.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import cast

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import WatchError

from bot.memory import aliases
from bot.memory.buffers import MemoryStore, UserBuffer, clean_text, clip, decode, encode, fit
from bot.memory.edit import merge_buffers, part, stamp_own
from bot.state import keys

CODE_ALPHABET = "23456789ABCDEFGHJKMNPQRSTUVWXYZ"
CODE_LENGTH = 8
CODE_SECONDS = 600
CONFIRM_SECONDS = 120  # a typed code's /link confirm, a /forget all's /forget confirm
MAX_FAILED_CODES = 5
FAILED_WINDOW_SECONDS = 600
NAME_MAX = 64  # the issuer's display name, as the confirmation question shows it
_RETRIES = 8

Identity = tuple[str, str]


class LinkOutcome(StrEnum):
    LINKED = "linked"
    ASKED = "asked"  # a code was typed: the link waits for /link confirm
    EXPIRED = "expired"  # /link confirm after its time
    NOTHING = "nothing"  # /link confirm with no link waiting
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
    name: str = ""  # the other identity's display name when its code was made


@dataclass(frozen=True)
class Split:
    """What ``/unlink`` or ``/forget`` left: the identities the leaver was linked with, and
    the leaver's part of the person's buffer (given back, or forgotten)."""

    others: list[Identity]
    part: UserBuffer


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

    # -- codes ------------------------------------------------------------------------------------
    async def issue(self, platform: str, user_id: str, name: str = "") -> tuple[str, int]:
        """A fresh one-time code for this identity (voiding its previous one), and its life in
        seconds; ``name``, its display name, is what the typer is asked to confirm. The caller
        shows the code only in a private reply."""
        seconds = CODE_SECONDS
        code = self._codes()
        mine = keys.user(platform, user_id, "linkcode")
        previous = cast("str | None", await self.redis.get(mine))
        issuer = {
            "id": keys.identity_member(platform, user_id),
            "name": clip(clean_text(name), NAME_MAX),
        }
        async with self.redis.pipeline(transaction=True) as pipe:
            if previous:
                pipe.delete(keys.link_code(previous))
            pipe.set(keys.link_code(code), json.dumps(issuer), ex=seconds)
            pipe.set(mine, code, ex=seconds)
            await pipe.execute()
        return code, seconds

    async def void_code(self, platform: str, user_id: str) -> None:
        """Void the identity's outstanding code and the link it waits to confirm (``/forget``)."""
        mine = keys.user(platform, user_id, "linkcode")
        code = cast("str | None", await self.redis.getdel(mine))
        doomed = [keys.link_confirm(platform, user_id), keys.link_asked(platform, user_id)]
        await self.redis.delete(*doomed, *([keys.link_code(code)] if code else []))

    async def redeem(self, platform: str, user_id: str, typed: str) -> LinkResult:
        """``typed`` is a code: ask this identity to confirm the link it makes (nothing is
        linked yet); ``ASKED`` names the other identity."""
        me = (platform, user_id)
        tries = keys.user(platform, user_id, "linktries")
        failed = cast("str | None", await self.redis.get(tries))
        if failed is not None and int(failed) >= MAX_FAILED_CODES:
            return LinkResult(LinkOutcome.TOO_MANY)
        code = normal_code(typed)
        if code is None:
            return LinkResult(LinkOutcome.MALFORMED)
        found = cast("str | None", await self.redis.getdel(keys.link_code(code)))
        if found is None:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.incr(tries)
                pipe.expire(tries, FAILED_WINDOW_SECONDS, nx=True)
                await pipe.execute()
            return LinkResult(LinkOutcome.UNKNOWN)
        issuer, name = _issuer(found)
        await self.redis.delete(keys.user(*issuer, "linkcode"))
        if issuer == me:
            return LinkResult(LinkOutcome.OWN_CODE)
        if issuer[0] == platform:
            return LinkResult(LinkOutcome.SAME_PLATFORM, other=issuer)
        persons = await self.redis.mget(keys.person_of(*issuer), keys.person_of(*me))
        if persons[0] is not None and persons[0] == persons[1]:
            return LinkResult(LinkOutcome.ALREADY, other=issuer)
        waiting = json.dumps({"id": keys.identity_member(*issuer), "name": name})
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(keys.link_confirm(*me), waiting, ex=CONFIRM_SECONDS)
            pipe.set(keys.link_asked(*me), "1", ex=CODE_SECONDS)
            await pipe.execute()
        return LinkResult(LinkOutcome.ASKED, other=issuer, name=name)

    async def confirm(self, platform: str, user_id: str) -> LinkResult:
        """``/link confirm``: make the link this identity asked for, if it still waits."""
        me = (platform, user_id)
        waiting = cast("str | None", await self.redis.getdel(keys.link_confirm(*me)))
        asked = await self.redis.delete(keys.link_asked(*me))
        if waiting is None:
            return LinkResult(LinkOutcome.EXPIRED if asked else LinkOutcome.NOTHING)
        issuer, name = _issuer(waiting)
        result = await self.link(issuer, me)
        return LinkResult(result.outcome, issuer, result.pins, result.recommendations, name)

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
        members = await self.members(self.redis, person)
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
            members |= set(await self.members(pipe, person))
        mine = aliases.memory_key(*first, p1)
        theirs = aliases.memory_key(*second, p2)
        await pipe.watch(mine, theirs)
        raw_first, raw_second = cast("list[str | None]", await pipe.mget(mine, theirs))
        sides = []
        for raw, identity, linked in ((raw_first, first, p1), (raw_second, second, p2)):
            buffer = decode(raw, platform=identity[0], user_id=identity[1])
            # an identity's own buffer is all its own; a person's entries already say whose
            sides.append(buffer if linked else stamp_own(buffer, keys.identity_member(*identity)))
        settings = self.memory.settings
        merged = fit(
            merge_buffers(*sides, max_pins=settings.pins_max, max_recs=settings.recs_max),
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
        """Take this identity out of its person with the entries that came from it; returns
        the identities it was linked with (None: it was not linked)."""
        split = await self._split((platform, user_id), keep=True)
        return None if split is None else split.others

    async def leave(self, platform: str, user_id: str) -> Split | None:
        """``/forget`` on a linked identity: take it out of its person and drop the entries
        that came from it (``Split.part``); the others keep theirs. None: it was not linked."""
        return await self._split((platform, user_id), keep=False)

    async def _split(self, me: Identity, *, keep: bool) -> Split | None:
        async with self.redis.pipeline(transaction=True) as pipe:
            for _ in range(_RETRIES):
                try:
                    await pipe.watch(keys.person_of(*me))
                    person = cast("str | None", await pipe.get(keys.person_of(*me)))
                    if person is None:
                        await pipe.unwatch()  # type: ignore[no-untyped-call]
                        return None
                    members_key = keys.person_members(person)
                    memory_key = keys.person_memory(person)
                    await pipe.watch(members_key, memory_key)
                    others = [m for m in await self.members(pipe, person) if m != me]
                    raw = cast("str | None", await pipe.get(memory_key))
                    buffer = decode(raw, platform=me[0], user_id=me[1])
                    pipe.multi()  # type: ignore[no-untyped-call]
                    mine = self._queue_split(pipe, person, buffer, me, others, keep=keep)
                    await pipe.execute()
                    return Split(others, mine)
                except WatchError:
                    continue
        raise RuntimeError(f"unlinking kept racing; gave up after {_RETRIES} tries")

    def _queue_split(
        self,
        pipe: Pipeline,
        person: str,
        buffer: UserBuffer,
        me: Identity,
        others: list[Identity],
        *,
        keep: bool,
    ) -> UserBuffer:
        """Queue ``me`` leaving ``person``: each identity leaving gets back its own entries
        (``me`` only with ``keep``), the rest keep theirs; returns ``me``'s part."""
        dissolve = len(others) <= 1  # a person of one is no person
        leaving = [me, *others] if dissolve else [me]
        mine = part(buffer, {keys.identity_member(*me)}, own=True)
        for identity in leaving:
            pipe.delete(keys.person_of(*identity))
            own = part(buffer, {keys.identity_member(*identity)}, own=True)
            self._queue_buffer(
                pipe, keys.memory(*identity), own if keep or identity != me else None
            )
        for identity in [me, *others]:  # they held vectors of entries now elsewhere
            pipe.delete(keys.user_vectors(*identity))
        members_key, memory_key = keys.person_members(person), keys.person_memory(person)
        if dissolve:
            pipe.delete(members_key, memory_key, keys.person_forget(person))
        else:
            pipe.srem(members_key, keys.identity_member(*me))
            rest = part(buffer, {keys.identity_member(*o) for o in others})
            self._queue_buffer(pipe, memory_key, rest)
        return mine

    def _queue_buffer(self, pipe: Pipeline, key: str, buffer: UserBuffer | None) -> None:
        if buffer is None or buffer.is_empty:
            pipe.delete(key)
        else:
            pipe.set(key, encode(buffer), ex=self.ttl)

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

    async def members(self, client: Redis | Pipeline, person: str) -> list[Identity]:
        """The identities whose alias still names ``person`` (sorted, for stable order)."""
        raw = await client.smembers(keys.person_members(person))
        listed = sorted(keys.parse_identity_member(str(m)) for m in raw)
        if not listed:
            return []
        names = await client.mget([keys.person_of(*m) for m in listed])
        return [m for m, named in zip(listed, names, strict=True) if named == person]


def _issuer(value: str) -> tuple[Identity, str]:
    """The identity a code or a waiting link names, and its display name then (a code made
    before names were kept is the bare identity)."""
    if value.startswith("{"):
        data = json.loads(value)
        return keys.parse_identity_member(str(data["id"])), str(data.get("name") or "")
    return keys.parse_identity_member(value), ""
