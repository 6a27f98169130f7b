"""A process's live-chat memory stays bounded and reads the store only when a channel becomes
active: idle channels are evicted (and come back with their pause), a busy channel is read
once, and a store that does not answer never stops the one-second tick."""

from __future__ import annotations

import logging

import pytest
from redis.asyncio import Redis

from bot.engagement import durable
from bot.engagement.policy import Engagement, PolicyConfig, Reason
from bot.engagement.turns import LiveChat
from bot.events import Author, ChatMessage, ConversationKey, Role
from bot.state import connect
from bot.state.engagement import Changes, MemoryLiveStore, RedisLiveStore, Snapshot
from tests.redis_server import free_port

NOW = 1_750_000_000.0


class CountingStore(MemoryLiveStore):
    """The twin, counting its loads (what would be Redis round trips)."""

    def __init__(self) -> None:
        super().__init__()
        self.loads = 0

    async def load(self, conv: ConversationKey, *, now: float, users_since: float) -> Snapshot:
        self.loads += 1
        return await super().load(conv, now=now, users_since=users_since)


class Chat:
    def __init__(self, store: MemoryLiveStore | RedisLiveStore) -> None:
        self.now = NOW
        self.live = LiveChat(Engagement(PolicyConfig()), clock=lambda: self.now, store=store)
        self.n = 0

    async def say(
        self,
        channel: str,
        text: str,
        *,
        user: str = "ann",
        mod: bool = False,
        mention: bool = False,
    ) -> Reason:
        self.n += 1
        message = ChatMessage(
            platform="twitch",
            id=f"m{self.n}",
            conversation=ConversationKey(platform="twitch", channel=channel),
            author=Author(id=user, roles=frozenset({Role.MODERATOR}) if mod else frozenset()),
            text=text,
            mentions_bot=mention,
        )
        await self.live.prepare(message)
        return self.live.observe(message).reason


async def test_idle_channels_are_evicted_and_come_back_with_their_pause() -> None:
    chat = Chat(MemoryLiveStore())
    assert await chat.say("paused", "!chorus pause", mod=True) is Reason.PAUSE
    for channel in ("a", "b", "c"):
        await chat.say(channel, "hello chat")
    await chat.live.maintain()
    chat.now += 600
    await chat.say("a", "still here")
    chat.now += 400  # the others have been idle for over 15 minutes
    await chat.live.maintain()
    assert {c.channel for c in chat.live.engagement.states} == {"a"}
    assert await chat.say("paused", "anyone?") is Reason.PAUSED  # read back, still paused


async def test_memory_stays_bounded_but_keeps_a_waiting_mention() -> None:
    chat = Chat(MemoryLiveStore())
    chat.live.durable.max_channels = 50
    for ask in ("hi bot", "one?", "two?", "and again?"):  # the last is over the burst: queued
        await chat.say("waiting", ask, user="reg", mention=True)
    for i in range(500):
        await chat.say(f"chan{i}", "a line")
    await chat.live.maintain()
    states = chat.live.engagement.states
    assert len(states) == 50
    assert ConversationKey(platform="twitch", channel="waiting") in states


async def test_a_busy_channel_is_read_once_and_again_only_after_a_quiet_spell() -> None:
    store = CountingStore()
    chat = Chat(store)
    for _ in range(120):  # two minutes of chat, a line a second
        chat.now += 1
        await chat.say("busy", "lol")
    assert store.loads == 1
    chat.now += 6  # quiet long enough that another worker may have held the channel
    await chat.say("busy", "back")
    assert store.loads == 2


async def test_an_unreachable_store_never_stops_the_tick(caplog: pytest.LogCaptureFixture) -> None:
    dead = Redis.from_url(f"redis://127.0.0.1:{free_port()}/15", socket_connect_timeout=1)
    store = RedisLiveStore(dead)
    chat = Chat(store)
    chat.live.observe(  # no prepare: the channel was loaded before Redis went away
        ChatMessage(
            platform="twitch",
            id="p",
            conversation=ConversationKey(platform="twitch", channel="c"),
            author=Author(id="mod", roles=frozenset({Role.MODERATOR})),
            text="!chorus pause",
        )
    )
    with caplog.at_level(logging.INFO, logger="chorus.live"):
        await chat.live.maintain()
        await chat.live.maintain()
        store.redis = await connect.open_redis("memory://live-memory-recovers")
        await chat.live.maintain()
    messages = [r.getMessage() for r in caplog.records]
    assert messages.count("live chat: could not save or refresh live state") == 1
    assert messages[-1] == "live chat: live state saved again"
    conv = ConversationKey(platform="twitch", channel="c")
    assert (await store.load(conv, now=chat.now, users_since=chat.now)).paused
    assert chat.live.durable.pauses == {}
    await dead.aclose()
    await store.redis.aclose()


async def test_an_answer_now_records_what_it_answered_for_its_commit() -> None:
    chat = Chat(MemoryLiveStore())
    await chat.say("c", "first line", user="bob")
    assert await chat.say("c", "hey bot?", user="bob", mention=True) is Reason.ADDRESSED
    conv = ConversationKey(platform="twitch", channel="c")
    changes = chat.live.durable.turns[(conv, "m2")]
    assert changes.answered == {"m1": chat.now, "m2": chat.now}  # the covered line too
    assert changes.users == {"bob": chat.now} and changes.spoke == chat.now


async def test_turn_records_are_bounded_and_forgotten_when_no_commit_comes_in_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(durable, "TURN_RECORDS", 2)
    chat = Chat(MemoryLiveStore())
    records = chat.live.durable.turns
    conv = ConversationKey(platform="twitch", channel="c")
    for turn_id in ("t1", "t2", "t3"):
        chat.live.durable.turn(conv, turn_id, Changes(spoke=chat.now))
    assert list(records) == [(conv, "t2"), (conv, "t3")]  # the oldest went first
    chat.now += durable.TURN_RECORD_SECONDS - 1
    await chat.live.maintain()
    assert list(records) == [(conv, "t2"), (conv, "t3")]
    chat.now += 2
    await chat.live.maintain()
    assert list(records) == []  # never committed: forgotten


async def test_a_pause_holds_while_chat_goes_on_and_lapses_after_a_quiet_spell() -> None:
    timer = [0.0]  # the store's TTL clock, moved with the chat's
    chat = Chat(MemoryLiveStore(pause_seconds=100, timer=lambda: timer[0]))

    def wait(seconds: float) -> None:
        chat.now += seconds
        timer[0] += seconds

    assert await chat.say("c", "!chorus pause", mod=True) is Reason.PAUSE
    await chat.live.maintain()
    for _ in range(10):  # five minutes of chat, three times the TTL
        wait(30)
        assert await chat.say("c", "is it quiet?") is Reason.PAUSED
        await chat.live.maintain()
    wait(101)  # no chat for longer than the TTL: the pause lapses
    await chat.live.maintain()
    assert await chat.say("c", "hello again") is Reason.CHATTER
