"""``/forget all``: forgetting a whole linked person, once every identity of it agreed.

``/forget`` on a linked identity forgets only that identity's part (bot/memory/people.py,
``People.leave``): one account must not erase what another account said, since linking is not
proof that one human holds both for ever. To forget everything, ``/forget all`` records the
asker's yes and a no for each other identity in one hash per person (``keys.person_forget``,
alive ``CONFIRM_SECONDS``, 2 minutes); each other identity answers ``/forget confirm``, and the
last yes returns the identities to forget. A change of the person's identities in between (one
unlinked, another joined) voids the request: who agreed is no longer who would be forgotten.

The last yes and the deletion of the request are one ``WATCH``/``MULTI`` transaction over the
request and the member set (``bot.state.people``), so two answers at once never both run the
forgetting.
"""

from __future__ import annotations

from enum import StrEnum

from bot.memory.people import CONFIRM_SECONDS, Identity, People
from bot.state import keys


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
    await people.store.open_vote(person, everyone, me, CONFIRM_SECONDS)
    return everyone[1:]


async def confirm(people: People, platform: str, user_id: str) -> tuple[ForgetAll, list[Identity]]:
    """``/forget confirm``: this identity's yes. With ``CONFIRMED`` (the last yes), the
    identities to forget; with ``WAITING``, those that have not answered yet."""
    me = keys.identity_member(platform, user_id)
    person = await people.person(platform, user_id)
    if person is None:
        return ForgetAll.NOTHING, []
    cast = await people.store.cast_vote(person, (platform, user_id))
    if cast is None:
        return ForgetAll.NOTHING, []
    answers, members = cast
    waiting = [m for m, yes in answers.items() if yes != "yes" and m != me]
    if waiting:
        return ForgetAll.WAITING, sorted(map(keys.parse_identity_member, waiting))
    same = {keys.identity_member(*m) for m in members} == set(answers)
    return (ForgetAll.CONFIRMED, members) if same else (ForgetAll.CHANGED, [])
