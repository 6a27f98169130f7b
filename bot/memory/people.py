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
(``bot.state.people``), their buffers are merged once with the usual duplicate rule and caps
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
reads, retried on a race (``bot.state.people`` runs them; the merge and the split by origin are
this module's, handed in), so a concurrent ``/link``, ``/unlink`` or insights write is never
lost or half applied.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from bot.memory.buffers import MemoryStore, UserBuffer, clean_text, clip, decode, encode, fit
from bot.memory.edit import merge_buffers, part, stamp_own
from bot.state import keys
from bot.state.people import Identity, Parting, PeopleStore, Side

CODE_ALPHABET = "23456789ABCDEFGHJKMNPQRSTUVWXYZ"
CODE_LENGTH = 8
CODE_SECONDS = 600
CONFIRM_SECONDS = 120  # a typed code's /link confirm, a /forget all's /forget confirm
MAX_FAILED_CODES = 5
FAILED_WINDOW_SECONDS = 600
NAME_MAX = 64  # the issuer's display name, as the confirmation question shows it

__all__ = ["CONFIRM_SECONDS", "Identity", "LinkOutcome", "LinkResult", "People", "Split"]


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
    """Link codes and the person each identity belongs to, over the people store."""

    def __init__(
        self,
        memory: MemoryStore,
        *,
        codes: Callable[[], str] = new_code,
        person_ids: Callable[[], str] = lambda: secrets.token_hex(12),
    ) -> None:
        self.memory = memory
        self.store: PeopleStore = memory.store
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
        code = self._codes()
        issuer = {
            "id": keys.identity_member(platform, user_id),
            "name": clip(clean_text(name), NAME_MAX),
        }
        await self.store.issue_code(platform, user_id, code, json.dumps(issuer), CODE_SECONDS)
        return code, CODE_SECONDS

    async def void_code(self, platform: str, user_id: str) -> None:
        """Void the identity's outstanding code and the link it waits to confirm (``/forget``)."""
        await self.store.void_code(platform, user_id)

    async def redeem(self, platform: str, user_id: str, typed: str) -> LinkResult:
        """``typed`` is a code: ask this identity to confirm the link it makes (nothing is
        linked yet); ``ASKED`` names the other identity."""
        me = (platform, user_id)
        if await self.store.failed_codes(platform, user_id) >= MAX_FAILED_CODES:
            return LinkResult(LinkOutcome.TOO_MANY)
        code = normal_code(typed)
        if code is None:
            return LinkResult(LinkOutcome.MALFORMED)
        found = await self.store.take_code(code)
        if found is None:
            await self.store.count_failed_code(platform, user_id, FAILED_WINDOW_SECONDS)
            return LinkResult(LinkOutcome.UNKNOWN)
        issuer, name = _issuer(found)
        await self.store.drop_code_of(*issuer)
        if issuer == me:
            return LinkResult(LinkOutcome.OWN_CODE)
        if issuer[0] == platform:
            return LinkResult(LinkOutcome.SAME_PLATFORM, other=issuer)
        persons = await self.store.persons(issuer, me)
        if persons[0] is not None and persons[0] == persons[1]:
            return LinkResult(LinkOutcome.ALREADY, other=issuer)
        waiting = json.dumps({"id": keys.identity_member(*issuer), "name": name})
        await self.store.ask_confirmation(platform, user_id, waiting, CONFIRM_SECONDS, CODE_SECONDS)
        return LinkResult(LinkOutcome.ASKED, other=issuer, name=name)

    async def confirm(self, platform: str, user_id: str) -> LinkResult:
        """``/link confirm``: make the link this identity asked for, if it still waits."""
        waiting, asked = await self.store.take_confirmation(platform, user_id)
        if waiting is None:
            return LinkResult(LinkOutcome.EXPIRED if asked else LinkOutcome.NOTHING)
        issuer, name = _issuer(waiting)
        result = await self.link(issuer, (platform, user_id))
        return LinkResult(result.outcome, issuer, result.pins, result.recommendations, name)

    # -- linking ------------------------------------------------------------------------------
    async def person(self, platform: str, user_id: str) -> str | None:
        return await self.store.person(platform, user_id)

    async def identities(self, platform: str, user_id: str) -> list[Identity]:
        """Every identity of this identity's person (itself first); just itself if unlinked.
        A member whose alias lapsed or points elsewhere is no longer one."""
        me = (platform, user_id)
        person = await self.person(platform, user_id)
        if person is None:
            return [me]
        members = await self.store.members(person)
        return [me, *(m for m in members if m != me)]

    async def link(self, first: Identity, second: Identity) -> LinkResult:
        """Make ``first`` and ``second`` (and whoever each is linked with) one person: their
        buffers merged once with the usual duplicate rule and caps, each entry marked with the
        identity it came from."""
        merged: list[UserBuffer] = []
        settings = self.memory.settings

        def merge(one: Side, other: Side) -> str:
            sides = []
            for side in (one, other):
                buffer = decode(side.raw, platform=side.identity[0], user_id=side.identity[1])
                # an identity's own buffer is all its own; a person's entries already say whose
                if not side.linked:
                    buffer = stamp_own(buffer, keys.identity_member(*side.identity))
                sides.append(buffer)
            result = fit(
                merge_buffers(*sides, max_pins=settings.pins_max, max_recs=settings.recs_max),
                settings,
            )
            merged[:] = [result]
            return "" if result.is_empty else encode(result)

        linked = await self.store.link(first, second, merge, self._person_ids, ttl_seconds=self.ttl)
        if not linked:
            return LinkResult(LinkOutcome.ALREADY, other=first)
        return LinkResult(
            LinkOutcome.LINKED,
            other=first,
            pins=len(merged[0].pins),
            recommendations=len(merged[0].recommendations),
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
        """``me`` leaves its person: each identity leaving gets back its own entries (``me``
        only with ``keep``), the rest keep theirs."""
        mine: list[UserBuffer] = []

        def cut(raw: str | None, others: list[Identity], dissolve: bool) -> Parting:
            buffer = decode(raw, platform=me[0], user_id=me[1])
            mine[:] = [part(buffer, {keys.identity_member(*me)}, own=True)]
            own = {}
            for identity in [me, *others] if dissolve else [me]:
                if keep or identity != me:
                    back = part(buffer, {keys.identity_member(*identity)}, own=True)
                    own[identity] = "" if back.is_empty else encode(back)
            rest = part(buffer, {keys.identity_member(*o) for o in others})
            return Parting(own, "" if dissolve or rest.is_empty else encode(rest))

        others = await self.store.split(me, cut, ttl_seconds=self.ttl)
        return None if others is None else Split(others, mine[0])


def _issuer(value: str) -> tuple[Identity, str]:
    """The identity a code or a waiting link names, and its display name then (a code made
    before names were kept is the bare identity)."""
    if value.startswith("{"):
        data = json.loads(value)
        return keys.parse_identity_member(str(data["id"])), str(data.get("name") or "")
    return keys.parse_identity_member(value), ""
