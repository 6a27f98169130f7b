"""Origins in a buffer (bot/memory/origins.py): how they are stored beside the rows, that a
buffer written before them reads and writes as before, and that ``update`` marks what an
identity of a linked person adds or changes as that identity's (and nothing in an unlinked
identity's own buffer)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime

from redis.asyncio import Redis

from bot.memory.buffers import MemorySettings, MemoryStore, UserBuffer, decode, encode
from bot.memory.edit import add_pin, part, stamp_own
from bot.state import keys

NOW = datetime(2025, 1, 2, 10, 4, tzinfo=UTC)


def test_a_buffer_without_origins_is_stored_and_read_as_before() -> None:
    old = '{"v":1,"z":"UTC","p":[["Eats no meat","m1",90,1735800000,1735800000]],"r":[["Be brief",null,1735800000]]}'
    buffer = decode(old, platform="twitch", user_id="u1")
    assert [p.origin for p in buffer.pins] == [None] and buffer.timezone_origin is None
    assert encode(buffer) == old, "an unlinked buffer's format is unchanged"
    marked = buffer.model_copy(
        update={"pins": (buffer.pins[0].model_copy(update={"origin": "twitch:u1"}),)}
    )
    data = json.loads(encode(marked))
    assert data["p"] == json.loads(old)["p"], "rows keep their shape (older readers read them)"
    assert (data["o"], data["po"], data["ro"], data["zo"]) == (["twitch:u1"], [0], [-1], -1)
    assert decode(encode(marked), platform="twitch", user_id="u1") == marked


async def test_update_marks_what_an_identity_of_a_person_changes_as_its_own(
    redis_client: Redis, key_tag: str
) -> None:
    memory = MemoryStore(redis_client, MemorySettings())
    ada, bo = f"ada-{key_tag}", f"bo-{key_tag}"

    def learn(text: str) -> Callable[[UserBuffer], UserBuffer]:
        def change(buffer: UserBuffer) -> UserBuffer:
            changed, _ = add_pin(
                buffer, text, source_message_id="m", confidence=0.9, now=NOW, max_pins=20
            )
            return changed

        return change

    await memory.update("discord", bo, learn("Plays chess"))
    assert '"o"' not in str(await redis_client.get(keys.memory("discord", bo))), "not linked"
    person = f"{key_tag}p"
    await redis_client.set(keys.person_of("twitch", ada), person, ex=60)
    await redis_client.set(keys.person_of("discord", ada), person, ex=60)
    await memory.update("twitch", ada, learn("Eats no meat"))
    await memory.update("discord", ada, learn("Lives in Oslo"))
    await memory.update("discord", ada, learn("Eats no meat at all"))
    stored = decode(
        str(await redis_client.get(keys.person_memory(person))), platform="twitch", user_id=ada
    )
    origins = {p.text: p.origin for p in stored.pins}
    discord = keys.identity_member("discord", ada)
    assert origins == {"Eats no meat at all": discord, "Lives in Oslo": discord}, (
        "a restated note is the restating identity's"
    )
    assert [p.text for p in part(stored, {discord}, own=True).pins] == [
        "Eats no meat at all",
        "Lives in Oslo",
    ]
    assert part(stored, {keys.identity_member("twitch", ada)}).is_empty
    raw = str(await redis_client.get(keys.memory("discord", bo)))
    own = stamp_own(decode(raw, platform="discord", user_id=bo), "discord:bo")
    assert [p.origin for p in own.pins] == ["discord:bo"]
