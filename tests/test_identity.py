"""/link and /unlink on both backends: one person across platforms, and nobody else.

Codes are one-time, expire, and are rate-limited per identity; typing one links nothing until
that same account answers ``/link confirm`` in time; a linked person's memory is one buffer
every identity reads (through the router's one pipelined read) and writes (``update``, as
``/remember`` and the insights agent do), each entry marked with the identity it came from;
``/unlink`` gives each side back what came from it; ``/forget`` on a linked identity forgets
its own part, and ``/forget all`` everything once every account confirmed. Every step is in
the audit trail.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from redis.asyncio import Redis

from bot.events import Author, ChatMessage, ConversationKey
from bot.memory.buffers import MemorySettings, MemoryStore, UserBuffer
from bot.memory.edit import add_pin, add_recommendation
from bot.memory.people import (
    CODE_ALPHABET,
    CODE_LENGTH,
    MAX_FAILED_CODES,
    LinkOutcome,
    People,
    normal_code,
)
from bot.router import link_commands, memory_commands
from bot.router.text_commands import Commands, command_text
from bot.safety.audit import Audit, AuditEntry, read_audit
from bot.state import connect, keys
from bot.state.history import HistoryStore
from tests.redis_cluster import WITH_CLUSTER, store_url
from tests.roundtrips import counting_round_trips
from tests.turn_rig import read_memory

NOW = datetime(2025, 1, 2, 10, 4, tzinfo=UTC)


class Rig:
    def __init__(self, redis: Redis, tag: str) -> None:
        self.redis = redis
        self.tag = tag
        self.history = HistoryStore(redis, max_messages=50, ttl_seconds=3600)
        self.memory = MemoryStore(redis, MemorySettings())
        serial = itertools.count()
        self.people = People(self.memory, person_ids=lambda: f"{tag}p{next(serial)}")
        self.audit = Audit(redis, namespace=tag)
        self.commands = Commands(self.history)
        memory_commands.register(
            self.commands,
            self.memory,
            self.history,
            clock=lambda: NOW,
            insights_queue=tag,
            audit=self.audit,
        )
        link_commands.register(self.commands, self.memory, audit=self.audit, people=self.people)
        self.n = 0

    def user(self, name: str) -> str:
        return f"{name}-{self.tag}"

    def message(
        self, text: str, platform: str, name: str, *, private: bool = False, display: str = "Ada"
    ) -> ChatMessage:
        self.n += 1
        return ChatMessage(
            platform=platform,
            id=f"m{self.n}-{self.tag}",
            conversation=ConversationKey(platform=platform, channel=f"general-{self.tag}"),
            author=Author(id=self.user(name), display_name=display),
            text=text,
            private_reply=private,
            sent_at=NOW,
        )

    async def run(
        self, text: str, platform: str, name: str = "ada", *, private: bool = False
    ) -> str:
        reply = await self.commands.handle(self.message(text, platform, name, private=private))
        assert reply is not None
        return reply

    async def code(self, platform: str, name: str = "ada") -> str:
        reply = await self.run("/link", platform, name, private=True)
        [code] = {w for w in reply.replace(".", " ").split() if normal_code(w) == w}
        return code

    async def link(self, issuer: str, typer: str, name: str = "ada") -> str:
        """``name`` links ``issuer`` and ``typer``: a code there, typed here, confirmed here."""
        asked = await self.run(f"/link {await self.code(issuer, name)}", typer, name)
        assert asked.startswith("This links you with"), asked
        return await self.run("/link confirm", typer, name)

    async def remember(self, platform: str, name: str, *facts: str) -> None:
        for fact in facts:
            await self.run(f"/remember {fact}", platform, name)

    async def pins(self, platform: str, name: str = "ada") -> list[str]:
        return [p.text for p in (await self.memory.load(platform, self.user(name))).pins]


@pytest.fixture(params=WITH_CLUSTER)
def redis_url(request: pytest.FixtureRequest, key_tag: str) -> Iterator[str]:
    """The stores, and a Redis Cluster of three primaries (``tests/redis_cluster.py``): there
    an identity's keys and its person's hash to different slots (bot/state/people_cluster.py)."""
    yield from store_url(request, key_tag)


@pytest.fixture
def rig(redis_client: Redis, key_tag: str) -> Rig:
    return Rig(redis_client, key_tag)


# -- pure ------------------------------------------------------------------------------------
def test_codes_are_typed_forgivingly_and_never_ambiguous() -> None:
    assert not set("01OIL") & set(CODE_ALPHABET)
    assert normal_code(" abcd-efgh ") == "ABCDEFGH"
    assert normal_code("abcd efgh") == "ABCDEFGH"
    assert normal_code("ABCDEFG") is None, "too short"
    assert normal_code("ABCDEFG0") is None, "0 is not in the alphabet"


# -- codes -----------------------------------------------------------------------------------
async def test_link_merges_two_identities_and_they_stay_merged(rig: Rig) -> None:
    await rig.remember("twitch", "ada", "Eats no meat", "Plays the cello")
    await rig.remember("discord", "ada", "Plays the cello", "Lives in Oslo")
    code = await rig.code("twitch")
    asked = await rig.run(f"/link {code.lower()}", "discord")
    assert asked.startswith("This links you with Twitch account Ada. Reply /link confirm within 2")
    assert await rig.pins("twitch") == ["Eats no meat", "Plays the cello"], "nothing merged yet"
    reply = await rig.run("/link confirm", "discord")
    assert reply.startswith("Linked with your Twitch account") and "3 notes" in reply
    both = await rig.pins("twitch")
    assert sorted(both) == ["Eats no meat", "Lives in Oslo", "Plays the cello"], "deduplicated"
    assert await rig.pins("discord") == both
    # Stays merged: a write through either identity is the other's too (as the insights agent).
    now = NOW

    def learn(buffer: UserBuffer) -> UserBuffer:
        changed, _ = add_pin(
            buffer, "Has a cat", source_message_id="t9", confidence=0.9, now=now, max_pins=20
        )
        return changed

    await rig.memory.update("twitch", rig.user("ada"), learn)
    assert "Has a cat" in await rig.pins("discord")
    # the identities' own keys hold nothing any more; the person's does
    assert await rig.redis.exists(keys.memory("twitch", rig.user("ada"))) == 0
    assert await rig.redis.exists(keys.memory("discord", rig.user("ada"))) == 0
    person = await rig.people.person("discord", rig.user("ada"))
    assert person is not None and await rig.redis.exists(keys.person_memory(person)) == 1
    assert await rig.redis.ttl(keys.person_of("discord", rig.user("ada"))) > 0, "a TTL always"


async def test_the_router_read_follows_the_link_in_one_round_trip(rig: Rig) -> None:
    await rig.remember("twitch", "ada", "Eats no meat")
    await rig.link("twitch", "discord")
    await rig.memory.load("discord", rig.user("ada"))  # warm the connection
    await rig.audit.flush()  # the link's audit entries are written in the background
    with counting_round_trips() as trips:
        state = await read_memory(rig.redis, "discord", rig.user("ada"))
    # on a cluster: the read's one pipeline (once to each node it reaches: the identity's slot's
    # and the conversation's, one or two), then the person's buffer (its own slot)
    assert trips.count in ((2, 3) if keys.cluster_layout() else (1,))
    buffer = rig.memory.from_read(state, platform="discord", user_id=rig.user("ada"))
    assert [p.text for p in buffer.pins] == ["Eats no meat"]
    assert (buffer.platform, buffer.user_id) == ("discord", rig.user("ada")), "as the asker"


async def test_activity_on_either_identity_keeps_the_person_alive(rig: Rig) -> None:
    await rig.remember("twitch", "ada", "Eats no meat")
    await rig.link("twitch", "discord")
    person = await rig.people.person("twitch", rig.user("ada"))
    assert person is not None
    kept = (
        keys.person_memory(person),
        keys.person_members(person),
        keys.person_of("discord", rig.user("ada")),
    )
    for key in kept:
        await rig.redis.expire(key, 50)
    await rig.memory.load("discord", rig.user("ada"))  # a command's read refreshes nothing
    assert all([await rig.redis.ttl(key) <= 50 for key in kept])
    # the reply path's read does
    await read_memory(rig.redis, "discord", rig.user("ada"), rig.memory.refresh_seconds)
    for key in kept:
        assert await rig.redis.ttl(key) > 1000, key


async def test_a_code_works_once(rig: Rig) -> None:
    code = await rig.code("twitch")
    assert (await rig.run(f"/link {code}", "discord")).startswith("This links you")
    assert (await rig.run("/link confirm", "discord")).startswith("Linked")
    assert "unknown, used or expired" in await rig.run(f"/link {code}", "slack")
    assert await rig.people.identities("slack", rig.user("ada")) == [("slack", rig.user("ada"))]


async def test_a_new_code_voids_the_previous_one(rig: Rig) -> None:
    first = await rig.code("twitch")
    second = await rig.code("twitch")
    assert "unknown, used or expired" in await rig.run(f"/link {first}", "discord")
    assert (await rig.run(f"/link {second}", "discord")).startswith("This links you")
    assert (await rig.run("/link confirm", "discord")).startswith("Linked")


async def test_a_code_is_never_shown_in_public_chat(rig: Rig) -> None:
    """Whoever typed a public code first would join the asker's person and read their memory."""
    public = await rig.run("/link", "twitch")
    assert "don't post link codes here" in public
    assert not any(normal_code(w) == w for w in public.replace(".", " ").split()), public
    assert await rig.redis.get(keys.user("twitch", rig.user("ada"), "linkcode")) is None
    private = await rig.code("discord", "bob")
    assert 120 < await rig.redis.ttl(keys.link_code(private)) <= 600
    typed = await rig.run(f"/link {private}", "twitch")  # typed in public: fine
    assert typed.startswith("This links you with Discord account Ada"), typed
    assert (await rig.run("/link confirm", "twitch")).startswith("Linked")


async def test_guessing_is_refused_after_a_few_wrong_codes(rig: Rig) -> None:
    good = await rig.code("twitch")
    wrong = "".join(reversed(good))
    for _ in range(MAX_FAILED_CODES):
        assert "unknown" in await rig.run(
            f"/link {wrong if wrong != good else 'ZZZZZZZZ'}", "slack", "eve"
        )
    assert "Too many wrong codes" in await rig.run(f"/link {good}", "slack", "eve")
    tries = keys.user("slack", rig.user("eve"), "linktries")
    assert 0 < await rig.redis.ttl(tries) <= 600, "refused for the 10-minute window, no longer"
    assert (await rig.run(f"/link {good}", "discord")).startswith("This links"), "code not spent"
    entries = await _audit(rig)
    assert sum(e.action == "refused_unknown" for e in entries) == MAX_FAILED_CODES
    assert any(e.action == "refused_too_many" for e in entries)


async def test_refusals(rig: Rig) -> None:
    assert "not linked" in await rig.run("/unlink", "discord")
    assert f"{CODE_LENGTH} letters and digits" in await rig.run("/link abc", "discord")
    own = await rig.code("twitch")
    assert "the code you made on this account" in await rig.run(f"/link {own}", "twitch")
    other = await rig.code("twitch", "bob")
    assert "different platforms" in await rig.run(f"/link {other}", "twitch")
    await rig.link("twitch", "discord")
    again = await rig.code("discord")
    assert "already linked" in await rig.run(f"/link {again}", "twitch")


async def test_never_linked_by_display_name(rig: Rig) -> None:
    await rig.remember("twitch", "ada", "Eats no meat")
    code = await rig.code("twitch")  # everyone is displayed as "Ada"
    wrong = "ZZZZZZZZ" if code != "ZZZZZZZZ" else "YYYYYYYY"
    assert "unknown" in await rig.run(f"/link {wrong}", "discord", "bob")
    assert "not linked" in await rig.run("/unlink", "discord", "bob")
    assert await rig.pins("discord", "bob") == []
    assert await rig.people.person("discord", rig.user("bob")) is None


# -- consent: typing a code links nothing until that account confirms ---------------------------
async def test_a_code_posted_for_a_giveaway_links_nobody_who_does_not_confirm(rig: Rig) -> None:
    """Mallory posts "type /link CODE for the giveaway": whoever types it is asked, with Mallory's
    account named, and nothing is merged; another account's ``/link confirm`` does nothing."""
    await rig.remember("slack", "vic", "Lives at 12 Elm Street")
    await rig.remember("discord", "mallory", "Runs giveaways")
    code = await rig.code("discord", "mallory")
    asked = await rig.run(f"/link {code}", "slack", "vic")
    assert asked.startswith("This links you with Discord account Ada. Reply /link confirm"), asked
    assert await rig.pins("discord", "mallory") == ["Runs giveaways"], "nothing merged"
    assert await rig.people.person("slack", rig.user("vic")) is None
    for platform, name in (("slack", "eve"), ("twitch", "mallory"), ("discord", "mallory")):
        other = await rig.run("/link confirm", platform, name)
        assert other.startswith("Nothing here waits for /link confirm"), (platform, name, other)
    assert await rig.people.person("discord", rig.user("mallory")) is None
    assert await rig.pins("discord", "mallory") == ["Runs giveaways"]
    waiting = keys.link_confirm("slack", rig.user("vic"))
    assert 0 < await rig.redis.ttl(waiting) <= 120, "a confirmation waits 2 minutes"
    assert "asked" in [e.action for e in await _audit(rig) if e.platform == "slack"]


async def test_a_late_confirmation_says_it_expired(rig: Rig) -> None:
    code = await rig.code("twitch")
    await rig.run(f"/link {code}", "discord")
    await rig.redis.delete(keys.link_confirm("discord", rig.user("ada")))  # its TTL ran out
    late = await rig.run("/link confirm", "discord")
    assert late.startswith("That link waited more than 2 minutes for /link confirm"), late
    assert "Nothing here waits" in await rig.run("/link confirm", "discord"), "said once"
    assert await rig.people.person("discord", rig.user("ada")) is None
    assert "unknown, used or expired" in await rig.run(f"/link {code}", "discord"), "used up"


async def test_a_second_code_typed_replaces_the_waiting_one(rig: Rig) -> None:
    await rig.remember("twitch", "bob", "Collects stamps")
    first = await rig.code("twitch", "bob")
    second = await rig.code("slack", "ada")
    await rig.run(f"/link {first}", "discord")
    await rig.run(f"/link {second}", "discord")
    assert (await rig.run("/link confirm", "discord")).startswith("Linked with your Slack")
    assert await rig.pins("discord") == [], "never linked with the first code's account"
    assert await rig.people.person("twitch", rig.user("bob")) is None


# -- three identities, unlink, forget ---------------------------------------------------------
async def test_a_third_identity_joins_the_person(rig: Rig) -> None:
    await rig.remember("twitch", "ada", "Eats no meat")
    await rig.link("twitch", "discord")
    await rig.remember("slack", "ada", "Works nights")
    await rig.link("slack", "discord")
    everyone = await rig.people.identities("discord", rig.user("ada"))
    assert sorted(everyone) == sorted((p, rig.user("ada")) for p in ("twitch", "discord", "slack"))
    assert sorted(await rig.pins("twitch")) == ["Eats no meat", "Works nights"]


async def test_two_people_linked_become_one(rig: Rig) -> None:
    await rig.remember("twitch", "ada", "Eats no meat")
    await rig.link("twitch", "discord")
    await rig.remember("slack", "ada", "Works nights")
    await rig.link("slack", "youtube")
    await rig.link("youtube", "twitch")
    for platform in ("twitch", "discord", "slack", "youtube"):
        assert sorted(await rig.pins(platform)) == ["Eats no meat", "Works nights"], platform
    persons = {await rig.people.person(p, rig.user("ada")) for p in ("twitch", "slack")}
    assert len(persons) == 1


async def test_merging_respects_the_caps(redis_client: Redis, key_tag: str) -> None:
    rig = Rig(redis_client, key_tag)
    rig.memory.settings = MemorySettings(pins_max=3, recs_max=1)
    for platform, facts in (("twitch", ("A one", "B two")), ("discord", ("C three", "D four"))):

        def fill(
            buffer: UserBuffer, facts: tuple[str, ...] = facts, platform: str = platform
        ) -> UserBuffer:
            for n, fact in enumerate(facts):
                buffer, _ = add_pin(
                    buffer,
                    fact,
                    source_message_id="s",
                    confidence=0.5 + n / 10,
                    now=NOW,
                    max_pins=3,
                )
            buffer, _ = add_recommendation(
                buffer, f"Tip {platform}", tool=None, now=NOW, max_recs=1
            )
            return buffer

        await rig.memory.update(platform, rig.user("ada"), fill)
    result = await rig.people.link(("twitch", rig.user("ada")), ("discord", rig.user("ada")))
    assert result.outcome is LinkOutcome.LINKED and (result.pins, result.recommendations) == (3, 1)
    merged = await rig.memory.load("discord", rig.user("ada"))
    assert len(merged.pins) == 3 and "A one" not in [p.text for p in merged.pins], "weakest out"


async def _audit(rig: Rig) -> list[AuditEntry]:
    await rig.audit.flush()
    return [e for e in await read_audit(rig.redis, namespace=rig.tag) if e.direction == "link"]


async def test_the_alias_benchmark_measures_every_variant_and_cleans_up(
    real_redis_url: str,
) -> None:
    from bench.identity import measure

    redis = await connect.open_redis(real_redis_url)
    try:
        before = {k async for k in redis.scan_iter(match="*bench*")}
        result = await measure(real_redis_url, rounds=30)
        assert {k async for k in redis.scan_iter(match="*bench*")} == before
    finally:
        await redis.aclose()
    assert result["alias script, linked user"]["p50"] > 0
    assert result["plain GET (before /link)"]["ratio"] == 1.0
    assert result["bytes"]["alias"] > 0 and result["bytes"]["members"] > 0


async def test_chats_that_keep_the_slash_for_themselves_address_the_bot(rig: Rig) -> None:
    """Twitch's and YouTube's web chat take ``/...`` for their own commands: ``@bot /link``."""
    code = await rig.code("discord")
    message = rig.message(f"@mybot /link {code}", "twitch", "ada").model_copy(
        update={"mentions_bot": True}
    )
    reply = await rig.commands.handle(message)
    assert reply is not None and reply.startswith("This links you"), reply
    unaddressed = rig.message("@someone /link", "twitch", "ada")
    assert await rig.commands.handle(unaddressed) is None, "only a mention of the bot is skipped"
    assert command_text(message) == f"/link {code}"
    talk = rig.message("@mybot what is /link?", "twitch", "ada").model_copy(
        update={"mentions_bot": True}
    )
    assert await rig.commands.handle(talk) is None, "a question about a command is not one"


def test_elsewhere_a_leading_mention_is_someone_else() -> None:
    """Discord and Slack remove the bot's own mention; a leading ``@name`` left is not the bot."""
    message = ChatMessage(
        platform="discord",
        id="m1",
        conversation=ConversationKey(platform="discord", channel="c"),
        author=Author(id="u1"),
        text="@alice /reset",
        mentions_bot=True,
    )
    assert command_text(message) == "@alice /reset"
