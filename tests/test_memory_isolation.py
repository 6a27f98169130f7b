"""Property: a context block built for one user never contains another user's notes.

Many users on several platforms, with colliding ids across platforms, ids containing the key
separator, and the same display name for everyone, each get pins and recommendations carrying
unique markers. For any user, the block rendered from the store (through the pipelined load
the router uses) holds only that user's markers, although the message mentions everyone's.
"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime

import fakeredis
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from bot.events import Author, ChatMessage, ConversationKey
from bot.memory.buffers import MemorySettings, MemoryStore, UserBuffer
from bot.memory.edit import add_pin, add_recommendation
from bot.memory.enrichment import render_context
from bot.memory.people import People
from tests.turn_rig import read_memory

NOW = datetime(2025, 1, 2, 10, 0, tzinfo=UTC)
OPEN = MemorySettings(
    prompt_pins=20, prompt_recs=10, pin_threshold=0, rec_threshold=0, context_chars=20_000
)
MARKER = re.compile(r"\b[pr]\d+x\d+\b")

User = tuple[str, str]
_users = st.lists(
    st.tuples(
        st.sampled_from(["discord", "slack", "twitch", "youtube", "console"]),
        st.text(alphabet="ab1:%", min_size=1, max_size=4),
    ),
    min_size=2,
    max_size=8,
    unique=True,
)


def _pin_marker(index: int, n: int) -> str:
    return f"p{index}x{n}"


def _rec_marker(index: int, n: int) -> str:
    return f"r{index}x{n}"


async def _fill(memory: MemoryStore, users: list[User], counts: list[tuple[int, int]]) -> None:
    for index, ((platform, user_id), (pins, recs)) in enumerate(zip(users, counts, strict=True)):

        def change(
            state: UserBuffer, index: int = index, pins: int = pins, recs: int = recs
        ) -> UserBuffer:
            for n in range(pins):
                state, _ = add_pin(
                    state,
                    f"Note {_pin_marker(index, n)}",
                    source_message_id=f"m{index}-{n}",
                    confidence=0.9,
                    now=NOW,
                    max_pins=OPEN.pins_max,
                )
            for n in range(recs):
                state, _ = add_recommendation(
                    state, f"Tip {_rec_marker(index, n)}", tool=None, now=NOW, max_recs=10
                )
            return state

        await memory.update(platform, user_id, change)


async def _block_for(memory: MemoryStore, redis: Redis, user: User, text: str) -> str:
    platform, user_id = user
    state = await read_memory(redis, platform, user_id)  # the turn's read
    buffer = memory.from_read(state, platform=platform, user_id=user_id)
    message = ChatMessage(
        platform=platform,
        id="q1",
        conversation=ConversationKey(platform=platform, channel="shared"),
        author=Author(id=user_id, display_name="Sam"),  # everyone is called Sam
        text=text,
        sent_at=NOW,
    )
    return render_context(buffer, message, OPEN, NOW)


def _markers(users: list[User], counts: list[tuple[int, int]]) -> dict[int, set[str]]:
    return {
        index: {_pin_marker(index, n) for n in range(pins)}
        | {_rec_marker(index, n) for n in range(recs)}
        for index, (pins, recs) in enumerate(counts)
    }


async def _check(users: list[User], counts: list[tuple[int, int]], redis: Redis) -> None:
    memory = MemoryStore(redis, OPEN)
    await _fill(memory, users, counts)
    owned = _markers(users, counts)
    for index, user in enumerate(users):
        others = sorted(set().union(*(m for i, m in owned.items() if i != index)))
        mine = sorted(owned[index])
        # The others' markers come first, so they would win the relevance ranking if present.
        block = await _block_for(memory, redis, user, " ".join(others + mine))
        shown = set(MARKER.findall(block))
        assert shown <= owned[index], (user, shown - owned[index])
        assert shown == owned[index], "every own note is relevant and fits, so all are shown"


@given(
    users=_users,
    data=st.data(),
)
@settings(max_examples=60, deadline=None)
def test_a_block_never_contains_another_users_notes(users: list[User], data: st.DataObject) -> None:
    counts = [
        (data.draw(st.integers(0, 3), label="pins"), data.draw(st.integers(0, 2), label="recs"))
        for _ in users
    ]

    async def run() -> None:
        redis = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer(), decode_responses=True)
        try:
            await _check(users, counts, redis)
        finally:
            await redis.aclose()

    asyncio.run(run())


async def test_isolation_on_both_backends(redis_client: Redis, key_tag: str) -> None:
    users = [
        ("discord", f"1:{key_tag}"),
        ("slack", f"1:{key_tag}"),
        ("discord", f"1%3A{key_tag}"),
        ("twitch", f"1{key_tag}"),
        ("youtube", f"UC:{key_tag}"),
    ]
    await _check(users, [(3, 2), (2, 1), (1, 1), (3, 0), (0, 2)], redis_client)


# -- linked identities share, unlinked never do ------------------------------------------------
async def _check_links(users: list[User], groups: list[int], redis: Redis, tag: str = "") -> None:
    """``groups[i]`` is the person user i is linked into (a group of one: not linked). Each
    user's block holds exactly the markers of their group, never another group's."""
    memory = MemoryStore(redis, OPEN)
    counts = [(2, 1)] * len(users)
    await _fill(memory, users, counts)
    serial = iter(range(len(users)))
    people = People(memory, person_ids=lambda: f"{tag}p{next(serial)}")  # tagged: cleaned up
    first_of: dict[int, User] = {}
    for user, group in zip(users, groups, strict=True):
        if group in first_of:
            await people.link(first_of[group], user)
        else:
            first_of[group] = user
    owned = _markers(users, counts)
    for index, user in enumerate(users):
        shared = set().union(*(owned[i] for i, g in enumerate(groups) if g == groups[index]))
        everyone = sorted(set().union(*owned.values()))
        shown = set(MARKER.findall(await _block_for(memory, redis, user, " ".join(everyone))))
        assert shown == shared, (user, shown ^ shared)


@given(users=_users, data=st.data())
@settings(max_examples=40, deadline=None)
def test_linked_identities_share_and_unlinked_never_do(
    users: list[User], data: st.DataObject
) -> None:
    groups = [data.draw(st.integers(0, 2), label="person") for _ in users]

    async def run() -> None:
        redis = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer(), decode_responses=True)
        try:
            await _check_links(users, groups, redis)
        finally:
            await redis.aclose()

    asyncio.run(run())


async def test_link_isolation_on_both_backends(redis_client: Redis, key_tag: str) -> None:
    users = [
        ("discord", f"1:{key_tag}"),
        ("twitch", f"1:{key_tag}"),
        ("slack", f"1:{key_tag}"),
        ("youtube", f"1%3A{key_tag}"),
    ]
    await _check_links(users, [0, 0, 1, 2], redis_client, key_tag)
