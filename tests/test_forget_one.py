"""/pins numbers entries and /forget <n> deletes exactly the one shown as n, on both backends.

The numbers are the order /pins showed (pins, then recommendations); an insights write landing
between /pins and /forget shifts the stored order but never makes /forget delete another entry.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from redis.asyncio import Redis

from bot.events import Author, ChatMessage, ConversationKey
from bot.memory.buffers import MemorySettings, MemoryStore, Pin, Recommendation, UserBuffer
from bot.memory.edit import (
    add_recommendation,
    entry_print,
    merge_buffers,
    numbered,
    remove_entry,
    replace_pin,
)
from bot.router.memory_commands import register
from bot.router.text_commands import Commands
from bot.state import keys
from bot.state.history import HistoryStore

NOW = datetime(2025, 1, 2, 10, 4, tzinfo=UTC)


def _pin(text: str, confidence: float = 0.9, at: datetime = NOW) -> Pin:
    return Pin(text=text, source="m", confidence=confidence, created_at=at, updated_at=at)


# -- pure ------------------------------------------------------------------------------------
def test_numbering_is_pins_then_recommendations() -> None:
    rec = Recommendation(text="Answer briefly", created_at=NOW)
    buffer = UserBuffer(
        platform="t", user_id="u", pins=(_pin("A"), _pin("B")), recommendations=(rec,)
    )
    assert [e.text for e in numbered(buffer)] == ["A", "B", "Answer briefly"]


def test_a_fingerprint_names_one_entry_and_changes_when_it_is_refined() -> None:
    pin = _pin("Lives in Oslo")
    same = _pin("Lives in Oslo")
    assert entry_print(pin) == entry_print(same)
    assert entry_print(pin) != entry_print(_pin("Lives in Bergen"))
    assert entry_print(pin) != entry_print(Recommendation(text="Lives in Oslo", created_at=NOW))
    buffer = UserBuffer(platform="t", user_id="u", pins=(pin, _pin("Has a cat")))
    kept = remove_entry(buffer, entry_print(pin))
    assert kept is not None and [p.text for p in kept.pins] == ["Has a cat"]
    assert remove_entry(kept, entry_print(pin)) is None


def test_merge_keeps_the_stronger_duplicate_and_the_caps() -> None:
    later = NOW + timedelta(hours=1)
    first = UserBuffer(
        platform="twitch", user_id="a", pins=(_pin("Eats no meat", 0.6), _pin("Has a cat"))
    )
    second = UserBuffer(
        platform="discord",
        user_id="b",
        pins=(_pin("eats no meat!", 0.9, later), _pin("Plays chess")),
        timezone="Europe/Oslo",
    )
    merged = merge_buffers(first, second, max_pins=20, max_recs=10)
    assert (merged.platform, merged.user_id) == ("twitch", "a")
    assert [(p.text, p.confidence) for p in merged.pins] == [
        ("eats no meat!", 0.9),
        ("Has a cat", 0.9),
        ("Plays chess", 0.9),
    ]
    assert merged.timezone == "Europe/Oslo"
    capped = merge_buffers(first, second, max_pins=2, max_recs=10)
    assert len(capped.pins) == 2


def test_merge_recommendations_keeps_the_newer_duplicate() -> None:
    old = UserBuffer(platform="t", user_id="a")
    old, _ = add_recommendation(old, "Answer briefly", tool=None, now=NOW, max_recs=5)
    new = UserBuffer(platform="d", user_id="b")
    later = NOW + timedelta(minutes=5)
    new, _ = add_recommendation(new, "answer briefly", tool=None, now=later, max_recs=5)
    new, _ = add_recommendation(new, "Use the clock tool", tool="clock", now=later, max_recs=5)
    merged = merge_buffers(old, new, max_pins=20, max_recs=5)
    assert [r.text for r in merged.recommendations] == ["answer briefly", "Use the clock tool"]


# -- the commands ---------------------------------------------------------------------------
class Rig:
    def __init__(self, redis: Redis, tag: str) -> None:
        self.redis = redis
        self.tag = tag
        self.memory = MemoryStore(redis, MemorySettings())
        history = HistoryStore(redis, max_messages=50, ttl_seconds=3600)
        self.commands = Commands(history)
        register(self.commands, self.memory, history, clock=lambda: NOW, insights_queue=tag)
        self.user = f"ada-{tag}"

    async def run(self, text: str, user: str | None = None) -> str:
        message = ChatMessage(
            platform="twitch",
            id=f"m-{self.tag}",
            conversation=ConversationKey(platform="twitch", channel=f"c-{self.tag}"),
            author=Author(id=user or self.user, display_name="Ada"),
            text=text,
            sent_at=NOW,
        )
        reply = await self.commands.handle(message)
        assert reply is not None
        return reply

    async def stored(self) -> UserBuffer:
        return await self.memory.load("twitch", self.user)

    async def insights(self, change: object) -> None:
        """A write as the insights agent makes it (``update``, under WATCH)."""
        await self.memory.update("twitch", self.user, change)  # type: ignore[arg-type]


@pytest.fixture
async def rig(redis_client: Redis, key_tag: str) -> Rig:
    rig = Rig(redis_client, key_tag)
    for fact in ("Eats no meat", "Plays the cello", "Lives in Oslo"):
        await rig.run(f"/remember {fact}")

    def advise(buffer: UserBuffer) -> UserBuffer:
        changed, _ = add_recommendation(buffer, "Answer briefly", tool=None, now=NOW, max_recs=10)
        return changed

    await rig.insights(advise)
    return rig


async def test_pins_numbers_every_entry(rig: Rig) -> None:
    reply = await rig.run("/pins")
    assert "1. Eats no meat\n2. Plays the cello\n3. Lives in Oslo\n" in reply
    assert "How I try to help you:\n4. Answer briefly" in reply


async def test_forget_2_deletes_exactly_that_entry(rig: Rig) -> None:
    await rig.run("/pins")
    before = await rig.stored()
    reply = await rig.run("/forget 2")
    assert reply.startswith('Done: I deleted entry 2 ("Plays the cello")')
    after = await rig.stored()
    assert [p.text for p in after.pins] == ["Eats no meat", "Lives in Oslo"]
    assert after.pins == (before.pins[0], before.pins[2]), "the others untouched"
    assert after.recommendations == before.recommendations
    # the other numbers of that list still name the same entries
    assert "Answer briefly" in await rig.run("/forget 4")
    assert (await rig.stored()).recommendations == ()
    assert "changed or went" in await rig.run("/forget 2"), "already gone: nothing else deleted"
    assert [p.text for p in (await rig.stored()).pins] == ["Eats no meat", "Lives in Oslo"]


async def test_an_insights_write_in_between_cannot_misdirect_forget(rig: Rig) -> None:
    await rig.run("/pins")  # 1 meat, 2 cello, 3 Oslo

    def contradict(buffer: UserBuffer) -> UserBuffer:  # pin 1 replaced: the order shifts
        return replace_pin(
            buffer, 0, "Eats fish now", source_message_id="x", confidence=0.9, now=NOW, max_pins=20
        )

    await rig.insights(contradict)
    assert [p.text for p in (await rig.stored()).pins][1] == "Lives in Oslo", "position 2 moved"
    reply = await rig.run("/forget 2")
    assert '("Plays the cello")' in reply
    assert [p.text for p in (await rig.stored()).pins] == ["Lives in Oslo", "Eats fish now"]
    # the entry shown as 1 was replaced: nothing is deleted, the user sees the list as it is now
    reply = await rig.run("/forget 1")
    assert reply.startswith("Entry 1 changed or went") and "1. Lives in Oslo" in reply
    assert len((await rig.stored()).pins) == 2


async def test_forget_n_without_a_list_shows_it_first(rig: Rig) -> None:
    reply = await rig.run("/forget 2")
    assert reply.startswith("To delete one entry I need to know which list")
    assert "2. Plays the cello" in reply
    assert len((await rig.stored()).pins) == 3, "nothing deleted yet"
    assert '("Plays the cello")' in await rig.run("/forget 2"), "that reply was the list"


async def test_bad_numbers(rig: Rig) -> None:
    await rig.run("/pins")
    assert "/forget <number>" in await rig.run("/forget two")
    assert "/forget <number>" in await rig.run("/forget 0")
    assert "no entry 9" in await rig.run("/forget 9")
    assert len((await rig.stored()).pins) == 3


async def test_the_list_is_the_speakers_own(rig: Rig) -> None:
    await rig.run("/pins")
    reply = await rig.run("/forget 1", user=f"bob-{rig.tag}")
    assert "Eats no meat" not in reply
    assert len((await rig.stored()).pins) == 3


async def test_forget_alone_still_deletes_everything(rig: Rig) -> None:
    await rig.run("/pins")
    assert (await rig.run("/forget")).startswith("Done: I deleted everything")
    assert (await rig.stored()).is_empty
    assert await rig.redis.exists(keys.user("twitch", rig.user, "pinsview")) == 0
