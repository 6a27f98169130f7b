"""/pins, /remember, /forget and /timezone on both backends: each acts on the speaker only."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from redis.asyncio import Redis

from bot.events import Author, ChatMessage, ConversationKey
from bot.memory.buffers import PIN_TEXT_MAX, MemorySettings, MemoryStore
from bot.memory.insight_queue import InsightJob, due
from bot.router.memory_commands import register, resolve_zone
from bot.router.text_commands import Commands
from bot.state import keys
from bot.state.history import HistoryEntry, HistoryStore
from bot.state.redis_turn import RedisTurnStore
from bot.state.turn import TurnChanges

NOW = datetime(2025, 1, 2, 10, 4, tzinfo=UTC)


class Rig:
    def __init__(self, redis: Redis, tag: str) -> None:
        self.redis = redis
        self.tag = tag
        self.history = HistoryStore(redis, max_messages=50, ttl_seconds=3600)
        self.memory = MemoryStore(redis, MemorySettings())
        self.commands = Commands(self.history)
        register(self.commands, self.memory, self.history, clock=lambda: NOW, insights_queue=tag)
        self.n = 0

    def conv(self, name: str = "general", platform: str = "discord") -> ConversationKey:
        return ConversationKey(platform=platform, channel=f"{name}-{self.tag}")

    def user(self, name: str) -> str:
        return f"{name}-{self.tag}"

    def message(
        self,
        text: str,
        name: str = "ada",
        *,
        conv: ConversationKey | None = None,
        display: str | None = None,
    ) -> ChatMessage:
        self.n += 1
        conv = conv or self.conv()
        return ChatMessage(
            platform=conv.platform,
            id=f"m{self.n}",
            conversation=conv,
            author=Author(id=self.user(name), display_name=display or name.title()),
            text=text,
            sent_at=NOW,
        )

    async def run(self, text: str, name: str = "ada", **options: object) -> str:
        reply = await self.commands.handle(self.message(text, name, **options))  # type: ignore[arg-type]
        assert reply is not None
        return reply

    async def chat(self, text: str, name: str, conv: ConversationKey) -> None:
        """What the router does for an answered turn: history, activity and an insights job."""
        message = self.message(text, name, conv=conv)
        await self.history.append(
            conv,
            HistoryEntry.from_message(message),
            HistoryEntry(role="assistant", text="ok", at=NOW),
        )
        activity = self.memory.activity(conv.platform, message.author.id, conv, now=NOW)
        insight = due(
            InsightJob.for_message(message), debounce=20, max_delay=120, now=NOW, queue=self.tag
        )
        await RedisTurnStore(self.redis).write(TurnChanges(activity=activity, insight=insight))


@pytest.fixture
def rig(redis_client: Redis, key_tag: str) -> Rig:
    return Rig(redis_client, key_tag)


async def test_help_lists_the_memory_commands(rig: Rig) -> None:
    reply = await rig.run("/help")
    for name in ("pins", "remember", "forget", "timezone"):
        assert f"/{name} - " in reply


async def test_remember_then_pins(rig: Rig) -> None:
    assert await rig.run("/pins") == (
        "I don't remember anything about you yet. Tell me something with /remember <fact>."
    )
    assert await rig.run("/remember I am vegan") == "Got it, I'll remember: I am vegan"
    assert await rig.run("/remember  i am VEGAN ") == "I already remember that: i am VEGAN"
    assert await rig.run("/remember I am a vegan") == "Updated my note: I am a vegan"
    await rig.run("/remember Lives in Lyon")
    await rig.run("/timezone Europe/Paris")
    assert await rig.run("/pins") == (
        "What I remember about you:\n"
        "1. I am a vegan\n"
        "2. Lives in Lyon\n"
        "Your timezone: Europe/Paris\n"
        "/remember <fact> adds a note; /forget <number> deletes that entry; "
        "/forget deletes everything."
    )
    stored = await rig.memory.load("discord", rig.user("ada"))
    assert stored.pins[0].confidence == 1.0 and stored.pins[0].came_from(
        "m4"
    )  # the last restatement


async def test_pins_are_the_speakers_own(rig: Rig) -> None:
    await rig.run("/remember I am vegan", "ada")
    assert "vegan" not in await rig.run("/pins", "bob")
    assert "vegan" not in await rig.run("/pins", "bob", display="Ada"), "names prove nothing"
    slack = rig.conv(platform="slack")
    assert "vegan" not in await rig.run("/pins", "ada", conv=slack), "same id, other platform"
    assert "vegan" in await rig.run("/pins", "ada")


async def test_remember_refuses_empty_and_overlong_facts(rig: Rig) -> None:
    assert (await rig.run("/remember")).startswith("Usage: /remember <fact>")
    assert (await rig.run("/remember \x00\x07")).startswith("Usage")
    reply = await rig.run("/remember " + "x" * (PIN_TEXT_MAX + 1))
    assert f"at most {PIN_TEXT_MAX}" in reply
    assert (await rig.memory.load("discord", rig.user("ada"))).is_empty


async def test_timezone(rig: Rig) -> None:
    assert (await rig.run("/timezone")).startswith("I don't know your timezone.")
    assert await rig.run("/timezone europe/paris") == (
        "Your timezone is now Europe/Paris (local time 11:04)."
    )
    assert (await rig.memory.load("discord", rig.user("ada"))).timezone == "Europe/Paris"
    assert (await rig.run("/timezone")).startswith("Your timezone is Europe/Paris.")
    reply = await rig.run("/timezone Mars/Olympus")
    assert reply.startswith("I don't know the timezone 'Mars/Olympus'")
    assert (await rig.memory.load("discord", rig.user("ada"))).timezone == "Europe/Paris"
    assert await rig.run("/timezone clear") == "Done: I no longer keep your timezone."
    assert (await rig.memory.load("discord", rig.user("ada"))).is_empty


@pytest.mark.parametrize(
    ("text", "zone"),
    [
        ("UTC", "UTC"),
        ("utc", "UTC"),
        ("America/New York", "America/New_York"),
        ("asia/tokyo", "Asia/Tokyo"),
        ("../../etc/passwd", None),
        ("/etc/localtime", None),
        ("", None),
    ],
)
def test_resolve_zone(text: str, zone: str | None) -> None:
    assert resolve_zone(text) == zone


async def test_forget_erases_everything_about_the_speaker_only(rig: Rig) -> None:
    general, random_chat = rig.conv("general"), rig.conv("random")
    await rig.chat("I am vegan", "ada", general)
    await rig.chat("Ada is vegan, I'm not", "bob", general)
    await rig.chat("I live in Lyon", "ada", random_chat)
    await rig.run("/remember I am vegan", "ada")
    await rig.run("/timezone Europe/Paris", "ada")
    await rig.run("/remember I live in Oslo", "bob")
    ada = rig.user("ada")

    reply = await rig.run("/forget", "ada")
    assert reply == (
        "Done: I deleted everything I stored about you (1 note, 0 recommendations, "
        "your timezone, 2 messages you wrote in 2 conversations)."
    )
    assert (await rig.memory.load("discord", ada)).is_empty
    assert await rig.memory.conversations("discord", ada) == []
    for conv in (general, random_chat):
        assert all(entry.author_id != ada for entry in await rig.history.load(conv))
    assert [e.text for e in await rig.history.load(general) if e.role == "user"] == [
        "Ada is vegan, I'm not"
    ]
    assert not await rig.redis.exists(keys.insights_job("discord", ada, rig.tag))
    assert (
        await rig.redis.zscore(keys.insights_due(rig.tag), keys.insights_member("discord", ada))
        is None
    )
    assert await rig.redis.exists(keys.forgotten("discord", ada))
    # Bob is untouched.
    assert "Oslo" in await rig.run("/pins", "bob")
    assert await rig.redis.exists(keys.insights_job("discord", rig.user("bob"), rig.tag))


async def test_forget_also_cleans_the_current_conversation_when_untracked(rig: Rig) -> None:
    conv = rig.conv("old")
    message = rig.message("I am vegan", "ada", conv=conv)
    await rig.history.append(conv, HistoryEntry.from_message(message))  # before tracking existed
    reply = await rig.run("/forget", "ada", conv=conv)
    assert "1 message you wrote in 1 conversation)" in reply
    assert await rig.history.load(conv) == []
