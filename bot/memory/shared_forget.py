"""``/forget all``: forgetting a whole linked person, once every identity of it agreed.

``/forget`` on a linked identity forgets only that identity's part (bot/memory/people.py,
``People.leave``): one account must not erase what another account said, since linking is not
proof that one human holds both for ever. To forget everything, ``/forget all`` records the
asker's yes and a no for each other identity in one hash per person (``keys.person_forget``,
alive ``CONFIRM_SECONDS``, 2 minutes); each other identity answers ``/forget confirm``, and the
last yes returns the identities to forget. A change of the person's identities in between (one
unlinked, another joined) voids the request: who agreed is no longer who would be forgotten.

The last yes and the deletion of the request are one ``WATCH``/``MULTI`` transaction over the
request and the member set, so two answers at once never both run the forgetting.
"""

from __future__ import annotations

from enum import StrEnum
from typing import cast

from redis.exceptions import WatchError

from bot.memory.people import CONFIRM_SECONDS, Identity, People
from bot.state import keys

_RETRIES = 8


class ForgetAll(StrEnum):
    CONFIRMED = "confirmed"  # every identity agreed: forget them all now
    WAITING = "waiting"  # noted; others still have to confirm
    NOTHING = "nothing"  # no /forget all waits for this identity
    CHANGED = "changed"  # the person's identities changed since it was asked


async def ask(people: People, platform: str, user_id: str) -> list[Identity] | None:
    """``/forget all`` on a linked identity: the person's other identities, each of which must
    now answer ``/forget confirm`` (None: not linked). A new request replaces an older one."""
    me = (platform, user_id)
    person = await people.person(*me)
    if person is None:
        return None
    everyone = await people.identities(*me)
    key = keys.person_forget(person)
    async with people.redis.pipeline(transaction=True) as pipe:
        pipe.delete(key)
        for member in everyone:
            pipe.hset(key, keys.identity_member(*member), "yes" if member == me else "no")
        pipe.expire(key, CONFIRM_SECONDS)
        await pipe.execute()
    return everyone[1:]


async def confirm(people: People, platform: str, user_id: str) -> tuple[ForgetAll, list[Identity]]:
    """``/forget confirm``: this identity's yes. With ``CONFIRMED`` (the last yes), the
    identities to forget; with ``WAITING``, those that have not answered yet."""
    me = keys.identity_member(platform, user_id)
    person = await people.person(platform, user_id)
    if person is None:
        return ForgetAll.NOTHING, []
    key = keys.person_forget(person)
    async with people.redis.pipeline(transaction=True) as pipe:
        for _ in range(_RETRIES):
            try:
                await pipe.watch(key, keys.person_members(person))
                answers = cast("dict[str, str]", await pipe.hgetall(key))
                waiting = [m for m, yes in answers.items() if yes != "yes" and m != me]
                members = await people.members(pipe, person)
                pipe.multi()  # type: ignore[no-untyped-call]
                outcome: tuple[ForgetAll, list[Identity]]
                if me not in answers:
                    outcome = ForgetAll.NOTHING, []
                elif waiting:
                    pipe.hset(key, me, "yes")
                    outcome = ForgetAll.WAITING, sorted(map(keys.parse_identity_member, waiting))
                else:
                    pipe.delete(key)
                    same = {keys.identity_member(*m) for m in members} == set(answers)
                    outcome = (ForgetAll.CONFIRMED, members) if same else (ForgetAll.CHANGED, [])
                await pipe.execute()
                return outcome
            except WatchError:
                continue
    raise RuntimeError(f"/forget confirm kept racing; gave up after {_RETRIES} tries")
