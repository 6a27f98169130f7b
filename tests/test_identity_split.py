"""How a linked person splits, on both backends: ``/unlink`` gives each side back what came
from it, ``/forget`` on a linked identity forgets its own part only, ``/forget all`` everything
once every account confirmed; entries stored before origins were recorded go with neither side.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from bot.events import ConversationKey
from bot.memory.buffers import UserBuffer
from bot.memory.edit import add_pin
from bot.safety.audit import AuditEntry, read_audit
from bot.state import keys
from bot.state.history import HistoryEntry
from tests.test_identity import NOW, Rig, _audit, redis_url, rig

__all__ = ["redis_url", "rig"]  # the fixtures (with the Redis Cluster among the stores)


def _learn(text: str) -> Callable[[UserBuffer], UserBuffer]:
    """A change as the insights agent makes one: a pin from the identity's own line."""

    def change(buffer: UserBuffer) -> UserBuffer:
        changed, _ = add_pin(
            buffer, text, source_message_id="t9", confidence=0.9, now=NOW, max_pins=20
        )
        return changed

    return change


async def _line(rig: Rig, platform: str, name: str, text: str) -> ConversationKey:
    """``text`` said by ``name`` on ``platform``: in the history, and in their conversations."""
    conv = ConversationKey(platform=platform, channel=f"general-{rig.tag}")
    await rig.history.append(conv, HistoryEntry.from_message(rig.message(text, platform, name)))
    await rig.memory.touch(platform, rig.user(name), conv, now=NOW)
    return conv


# -- /unlink -----------------------------------------------------------------------------------
async def test_unlink_gives_each_side_back_only_what_came_from_it(rig: Rig) -> None:
    await rig.remember("twitch", "ada", "Eats no meat")
    await rig.remember("discord", "ada", "Plays the cello")
    code = await rig.code("twitch")
    await rig.run(f"/link {code}", "discord")
    await rig.run("/link confirm", "discord")
    # while linked: a /remember on Discord, a timezone and an insights pin on Twitch
    await rig.remember("discord", "ada", "Lives in Oslo")
    await rig.run("/timezone Europe/Oslo", "twitch")
    await rig.memory.update("twitch", rig.user("ada"), _learn("Has a cat"))
    person = await rig.people.person("twitch", rig.user("ada"))
    assert person is not None
    stored = json.loads(str(await rig.redis.get(keys.person_memory(person))))
    assert sorted(stored["o"]) == sorted(
        keys.identity_member(p, rig.user("ada")) for p in ("twitch", "discord")
    ), "each entry says whose it is"
    assert sorted(await rig.pins("discord")) == sorted(
        ["Eats no meat", "Plays the cello", "Lives in Oslo", "Has a cat"]
    )
    reply = await rig.run("/unlink", "discord")
    assert reply.startswith("Unlinked from your Twitch account")
    assert await rig.pins("discord") == ["Plays the cello", "Lives in Oslo"]
    assert await rig.pins("twitch") == ["Eats no meat", "Has a cat"]
    twitch = await rig.memory.load("twitch", rig.user("ada"))
    discord = await rig.memory.load("discord", rig.user("ada"))
    assert (twitch.timezone, discord.timezone) == ("Europe/Oslo", None)
    raw = await rig.redis.get(keys.memory("twitch", rig.user("ada")))
    assert '"o"' not in str(raw), "an identity's own buffer stores no origin"
    await rig.remember("discord", "ada", "Works nights")
    assert "Works nights" not in await rig.pins("twitch"), "separate again"
    assert await rig.people.person("twitch", rig.user("ada")) is None, "a person of one dissolves"
    actions = [(e.platform, e.action) for e in await _audit(rig)]
    assert ("discord", "asked") in actions and ("discord", "linked") in actions
    assert ("twitch", "linked_from_discord") in actions and ("discord", "unlinked") in actions
    assert not [e for e in await _audit(rig) if code in e.model_dump_json()], "never the code"


async def test_unlink_of_one_of_three_keeps_the_other_two_linked(rig: Rig) -> None:
    await rig.link("twitch", "discord")
    await rig.link("slack", "discord")
    await rig.remember("slack", "ada", "Works nights")
    await rig.run("/unlink", "slack")
    await rig.remember("twitch", "ada", "Eats no meat")
    assert await rig.pins("discord") == ["Eats no meat"], "slack's pin left with slack"
    assert await rig.pins("slack") == ["Works nights"]


async def test_entries_stored_before_origins_are_kept_by_neither_side(rig: Rig) -> None:
    """A person linked before origins were recorded holds entries nobody can attribute: giving
    one to the wrong side is the leak, so a split gives it to neither."""
    await rig.link("twitch", "discord")
    person = await rig.people.person("twitch", rig.user("ada"))
    assert person is not None
    old = '{"v":1,"z":"Europe/Oslo","p":[["Old shared note","m1",90,1735800000,1735800000]],"r":[]}'
    await rig.redis.set(keys.person_memory(person), old, ex=3600)  # as an older version wrote
    await rig.remember("twitch", "ada", "Eats no meat")
    assert sorted(await rig.pins("discord")) == ["Eats no meat", "Old shared note"]
    await rig.run("/unlink", "discord")
    assert await rig.pins("twitch") == ["Eats no meat"] and await rig.pins("discord") == []
    for platform in ("twitch", "discord"):
        assert (await rig.memory.load(platform, rig.user("ada"))).timezone is None


async def test_a_member_whose_alias_lapsed_drops_out_and_the_others_keep_the_memory(
    rig: Rig,
) -> None:
    await rig.remember("twitch", "ada", "Eats no meat")
    await rig.link("twitch", "discord")
    await rig.redis.delete(keys.person_of("twitch", rig.user("ada")))  # as if its TTL ran out
    assert await rig.pins("discord") == ["Eats no meat"]
    assert await rig.pins("twitch") == []
    assert await rig.people.identities("discord", rig.user("ada")) == [("discord", rig.user("ada"))]
    await rig.remember("twitch", "ada", "Lives in Oslo")
    await rig.run("/forget", "discord")
    assert await rig.pins("twitch") == ["Lives in Oslo"], "no longer the same person"


# -- /forget, /forget all ---------------------------------------------------------------------
async def test_forget_on_a_linked_identity_forgets_only_its_own_part(rig: Rig) -> None:
    """Mallory's ``/forget`` while linked must not erase the other account's lines or notes."""
    await rig.remember("twitch", "ada", "Eats no meat")
    await rig.remember("discord", "ada", "Lives in Oslo")
    await rig.remember("discord", "bob", "Plays chess")
    twitch = await _line(rig, "twitch", "ada", "hello from twitch")
    discord = await _line(rig, "discord", "ada", "hello from discord")
    await rig.link("twitch", "discord")
    person = await rig.people.person("twitch", rig.user("ada"))
    assert person is not None
    reply = await rig.run("/forget", "discord")
    assert "1 note" in reply and "1 message" in reply, reply
    assert "no longer linked with your Twitch account" in reply, reply
    assert [e.text for e in await rig.history.load(twitch)] == ["hello from twitch"]
    assert await rig.history.load(discord) == [], "the asker's own lines go"
    assert await rig.pins("twitch") == ["Eats no meat"] and await rig.pins("discord") == []
    assert await rig.people.person("twitch", rig.user("ada")) is None, "unlinked"
    assert await rig.redis.exists(keys.person_memory(person), keys.person_members(person)) == 0
    assert await rig.redis.exists(keys.forgotten("discord", rig.user("ada"))) == 1
    assert await rig.redis.exists(keys.forgotten("twitch", rig.user("ada"))) == 0
    assert await rig.pins("discord", "bob") == ["Plays chess"], "nobody else"


async def test_forget_all_forgets_every_account_once_each_confirmed(rig: Rig) -> None:
    await rig.remember("twitch", "ada", "Eats no meat")
    twitch = await _line(rig, "twitch", "ada", "hello from twitch")
    await rig.link("twitch", "discord")
    person = await rig.people.person("twitch", rig.user("ada"))
    assert person is not None
    asked = await rig.run("/forget all", "discord")
    assert asked.startswith("Nothing is deleted yet") and "Twitch" in asked, asked
    assert 0 < await rig.redis.ttl(keys.person_forget(person)) <= 120
    assert await rig.pins("twitch") == ["Eats no meat"], "nothing before the confirmation"
    assert "No /forget all is waiting" in await rig.run("/forget confirm", "twitch", "bob")
    waiting = await rig.run("/forget confirm", "discord")
    assert waiting.startswith("Noted. I delete everything once your Twitch account"), waiting
    done = await rig.run("/forget confirm", "twitch")
    assert "1 note" in done and "1 message" in done, done
    assert await rig.history.load(twitch) == []
    assert await rig.pins("twitch") == [] and await rig.pins("discord") == []
    assert await rig.people.person("twitch", rig.user("ada")) is None
    assert await rig.redis.exists(keys.person_memory(person), keys.person_forget(person)) == 0
    for platform in ("twitch", "discord"):
        assert await rig.redis.exists(keys.forgotten(platform, rig.user("ada"))) == 1
    assert "No /forget all is waiting" in await rig.run("/forget confirm", "twitch"), "used up"


async def test_forget_all_is_void_when_the_accounts_changed(rig: Rig) -> None:
    await rig.remember("twitch", "ada", "Eats no meat")
    await rig.link("twitch", "discord")
    await rig.run("/forget all", "discord")
    await rig.link("youtube", "discord")  # joined after the others agreed to forget
    changed = await rig.run("/forget confirm", "twitch")
    assert changed.startswith("Your linked accounts changed"), changed
    assert await rig.pins("youtube") == ["Eats no meat"], "nothing deleted"


async def test_forget_all_on_an_account_that_is_not_linked_is_forget(rig: Rig) -> None:
    await rig.remember("twitch", "ada", "Eats no meat")
    assert (await rig.run("/forget all", "twitch")).startswith("Done: I deleted everything")
    assert await rig.pins("twitch") == []


async def test_forget_deletes_the_speakers_audit_entries_and_no_one_elses(rig: Rig) -> None:
    """The decisions about your messages go with ``/forget``; a moderator's command naming you
    is the moderator's entry and stays (so does the block itself)."""
    flagged = rig.message("call me on +1 415 555 0134", "discord", "ada")
    rig.audit.record(
        AuditEntry.about(flagged, direction="in", rule="personal_data:phone", action="refused")
    )
    rig.audit.record(AuditEntry.about(flagged, direction="in", rule="slur:x", action="refused"))
    rig.audit.record(
        AuditEntry.about(
            rig.message("hi", "twitch", "ada"), direction="in", rule="slur:x", action="refused"
        )
    )
    rig.audit.record(
        AuditEntry.about(
            rig.message("hey", "discord", "bob"), direction="in", rule="slur:x", action="refused"
        )
    )
    by_mod = rig.message(f"/block id:{rig.user('ada')}", "discord", "mod")
    rig.audit.record(
        AuditEntry.about(
            by_mod, direction="command", rule=f"user_block:{rig.user('ada')}", action="set"
        )
    )
    await rig.run("/forget", "discord")
    await rig.audit.flush()
    left = [(e.platform, e.user_id) for e in await read_audit(rig.redis, namespace=rig.tag)]
    assert ("discord", rig.user("ada")) not in left
    assert sorted(left) == sorted(
        [("twitch", rig.user("ada")), ("discord", rig.user("bob")), ("discord", rig.user("mod"))]
    )


async def test_forget_voids_an_outstanding_code(rig: Rig) -> None:
    code = await rig.code("twitch")
    await rig.run("/forget", "twitch")
    assert "unknown, used or expired" in await rig.run(f"/link {code}", "discord")
