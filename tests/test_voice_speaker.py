"""The worker side of speech (``bot.voice.speaker``) on a real Redis: what is queued for a
channel's overlay, when, and what never is.

Nothing is queued while no overlay watches the channel, or while speech is paused there; an
answer is queued sentence by sentence as it streams, its tail when the final text comes; a
sentence or a cheer the outbound check would change is never queued (so never sent to a speech
provider); cheers under the threshold are not read, Super Chats are, with the viewer's name; a
moderator's ``!tts pause`` on one worker stops another worker once its control read lapses;
characters per hour are limited per channel and per viewer with one notice; a scope turns
speech off for one channel.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from bot.events import Author, ChatMessage, ConversationKey, Role, StreamEvent, StreamEventKind
from bot.settings import Settings, settings_from
from bot.settings.scopes import FileSettings, Scope
from bot.settings.voice import ScopeVoice
from bot.state import keys
from bot.state.voice import VoiceQueue
from bot.voice.speaker import Speaker, sentences

pytestmark = pytest.mark.redis


@pytest.fixture(
    params=[
        pytest.param("single", id="single"),
        pytest.param("cluster", id="cluster", marks=pytest.mark.e2e),
    ]
)
def real_redis(request: pytest.FixtureRequest, real_redis: Redis) -> Redis:
    """One Redis server (conftest's ``real_redis``), and a Redis Cluster of three primaries
    (``cluster_client``, keys in its cluster layout): the per-hour character counts of a
    channel and a viewer are checked and counted in one script, so they must share a slot."""
    if request.param == "cluster":
        client: Redis = request.getfixturevalue("cluster_client")
        return client
    return real_redis


BLOCKED = "zorblax"


def check(message: ChatMessage, text: str) -> str:
    """A stand-in outbound rule: a blocked word replaces the text."""
    return "[withheld]" if BLOCKED in text else text


def voice_settings(**extra: str) -> Settings:
    return settings_from({"CHORUS_VOICE": "true", "CHORUS_TTS": "openai:alloy"} | extra)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def conv_of() -> ConversationKey:
    return ConversationKey(platform="twitch", channel=f"c{uuid.uuid4().hex[:10]}")


def chat(
    conv: ConversationKey, text: str, *, user: str = "ada", mod: bool = False, **extra: Any
) -> ChatMessage:
    roles = frozenset({Role.MODERATOR}) if mod else frozenset()
    return ChatMessage(
        platform=conv.platform,
        id=uuid.uuid4().hex,
        conversation=conv,
        author=Author(id=user, display_name=user.title(), roles=roles),
        text=text,
        **extra,
    )


def cheer(conv: ConversationKey, text: str, bits: int, user: str = "bob") -> ChatMessage:
    event = StreamEvent(kind=StreamEventKind.CHEER, user_id=user, user_name=user.title(), bits=bits)
    return chat(conv, text, user=user, stream_event=event)


def speaker_on(
    redis: Redis, settings: Settings | None = None, clock: Callable[[], float] | None = None
) -> Speaker:
    found = settings or voice_settings()
    if clock is None:
        return Speaker(VoiceQueue(redis), lambda: found, check=check)
    return Speaker(VoiceQueue(redis), lambda: found, check=check, clock=clock)


async def queued(redis: Redis, conv: ConversationKey) -> list[dict[str, Any]]:
    return await VoiceQueue(redis).recent(conv)


async def watch(redis: Redis, conv: ConversationKey) -> None:
    await VoiceQueue(redis).watched(conv)


def test_sentences_are_cut_where_they_end() -> None:
    assert sentences("Hi there. How are") == (["Hi there."], "How are")
    assert sentences("Wow!! Really? Yes… and") == (["Wow!!", "Really?", "Yes…"], "and")
    assert sentences("No end yet") == ([], "No end yet")
    assert sentences('He said "go." Then') == (['He said "go."'], "Then")


async def test_nothing_is_queued_while_no_overlay_watches(real_redis: Redis) -> None:
    conv = conv_of()
    speaker = speaker_on(real_redis)
    sink = speaker.open(chat(conv, "@bot hi"))
    assert sink is not None
    await sink.text("Hello there. Nice to see you. ")
    await sink.finish("Hello there. Nice to see you.")
    assert await speaker.event(cheer(conv, "Cheer500 hi", 500)) is False
    assert speaker.queued == 0
    assert not await real_redis.exists(keys.voice_queue(conv))


async def test_an_answer_is_queued_sentence_by_sentence_as_it_streams(real_redis: Redis) -> None:
    conv = conv_of()
    await watch(real_redis, conv)
    speaker = speaker_on(real_redis)
    message = chat(conv, "@bot what is Kappa?")
    sink = speaker.open(message)
    assert sink is not None
    await sink.text("Kappa is an emote")
    assert await queued(real_redis, conv) == []  # no sentence is complete yet
    await sink.text(". It means sarcasm! And")
    first = [e["text"] for e in await queued(real_redis, conv)]
    assert first == ["Kappa is an emote.", "It means sarcasm!"]
    await sink.text(" it is old")
    await sink.finish("Kappa is an emote. It means sarcasm! And it is old")
    items = await queued(real_redis, conv)
    assert [e["text"] for e in items] == [*first, "And it is old"]
    assert {(e["kind"], e["name"], e["message"], e["answer_to"]) for e in items} == {
        ("answer", "Ada", "@bot what is Kappa?", message.id)
    }


async def test_a_sentence_the_outbound_rules_change_ends_the_speech(real_redis: Redis) -> None:
    conv = conv_of()
    await watch(real_redis, conv)
    sink = speaker_on(real_redis).open(chat(conv, "@bot hi"))
    assert sink is not None
    await sink.text(f"Fine. Then {BLOCKED} here. And more. ")
    await sink.finish(f"Fine. Then {BLOCKED} here. And more.")
    assert [e["text"] for e in await queued(real_redis, conv)] == ["Fine."]


async def test_cheers_and_super_chats_are_read_with_the_viewers_name(real_redis: Redis) -> None:
    conv = conv_of()
    await watch(real_redis, conv)
    speaker = speaker_on(real_redis, voice_settings(CHORUS_TTS_CHEER_MIN_BITS="100"))
    assert await speaker.event(cheer(conv, "Cheer50 small", 50)) is False
    assert await speaker.event(cheer(conv, "Cheer500 great stream", 500)) is True
    assert await speaker.event(cheer(conv, f"Cheer500 {BLOCKED}", 500, user="eve")) is False
    super_chat = StreamEvent(
        kind=StreamEventKind.SUPER_CHAT, user_id="cy", user_name="Cy", amount="$5.00"
    )
    yt = ConversationKey(platform="youtube", channel=conv.channel)
    await watch(real_redis, yt)
    said = chat(yt, "love it", user="cy", stream_event=super_chat)
    assert await speaker.event(said) is True
    texts = [e["text"] for e in await queued(real_redis, conv)]
    assert texts == ["Bob cheered 500 bits: Cheer500 great stream"]
    assert [e["text"] for e in await queued(real_redis, yt)] == [
        "Cy sent a Super Chat of $5.00: love it"
    ]


def redemption(conv: ConversationKey, reward: str, text: str, **event: Any) -> ChatMessage:
    found = StreamEvent(
        kind=StreamEventKind.REDEMPTION, user_id="di", user_name="Di", reward=reward, **event
    )
    return chat(conv, text, user="di", stream_event=found)


async def test_redemptions_of_the_chosen_rewards_are_read_and_no_others(real_redis: Redis) -> None:
    conv, scoped = conv_of(), conv_of()
    for each in (conv, scoped):
        await watch(real_redis, each)
    settings = voice_settings(CHORUS_TTS_REWARDS="hydrate, reward-id-7")
    scope = Scope(match=f"twitch:{scoped.channel}", voice=ScopeVoice(rewards=("*",)))
    settings.file = FileSettings(scopes=(scope,))
    speaker = speaker_on(real_redis, settings)
    assert await speaker.event(redemption(conv, "Hydrate", "drink water")) is True  # any case
    assert await speaker.event(redemption(conv, "Sound alert", "boo")) is False
    assert await speaker.event(redemption(conv, "Renamed", "", reward_id="reward-id-7")) is True
    assert await speaker.event(redemption(conv, "Hydrate", f"a {BLOCKED} here")) is False
    assert await speaker.event(redemption(scoped, "Sound alert", "boo")) is True  # "*" there
    assert [(e["kind"], e["text"]) for e in await queued(real_redis, conv)] == [
        ("redemption", "Di redeemed Hydrate: drink water"),
        ("redemption", "Di redeemed Renamed."),
    ]
    assert [e["text"] for e in await queued(real_redis, scoped)] == ["Di redeemed Sound alert: boo"]
    off = speaker_on(real_redis, voice_settings())  # no rewards chosen: none is read
    assert await off.event(redemption(conv, "Hydrate", "drink water")) is False


async def test_a_pause_on_one_worker_stops_the_other(real_redis: Redis) -> None:
    conv = conv_of()
    await watch(real_redis, conv)
    clock = Clock()
    one, other = speaker_on(real_redis), speaker_on(real_redis, clock=clock)
    assert await other.event(cheer(conv, "Cheer500 before", 500))  # reads and caches controls
    pause = chat(conv, "!tts pause", user="mod", mod=True)
    assert one.is_command(pause) and not one.is_command(chat(conv, "!tts pause"))
    assert await one.command(pause) == "pause"
    assert not await one.event(cheer(conv, "Cheer500 on the pausing worker", 500))
    clock.now += 1.5  # the other worker's control read lapses
    assert not await other.event(cheer(conv, "Cheer500 on the other worker", 500))
    assert await one.command(chat(conv, "!tts resume", user="mod", mod=True)) == "resume"
    clock.now += 1.5
    assert await other.event(cheer(conv, "Cheer500 after", 500))
    kinds = [(e["kind"], e.get("text", "")) for e in await queued(real_redis, conv)]
    assert kinds == [
        ("cheer", "Bob cheered 500 bits: Cheer500 before"),
        ("pause", ""),
        ("resume", ""),
        ("cheer", "Bob cheered 500 bits: Cheer500 after"),
    ]


async def test_skip_and_volume_are_queued_for_the_overlay(real_redis: Redis) -> None:
    conv = conv_of()
    speaker = speaker_on(real_redis)
    assert await speaker.command(chat(conv, "!skip", user="mod", mod=True)) == "skip"
    assert await speaker.command(chat(conv, "!tts volume 140", user="m", mod=True)) == "volume"
    assert await speaker.command(chat(conv, "!tts loud", user="m", mod=True)) == "unknown"
    events = await queued(real_redis, conv)
    assert [(e["kind"], e.get("volume")) for e in events] == [("skip", None), ("volume", 100)]
    assert (await VoiceQueue(real_redis).control(conv)).volume == 100


async def test_characters_per_hour_are_limited_with_one_notice(real_redis: Redis) -> None:
    conv = conv_of()
    await watch(real_redis, conv)
    settings = voice_settings(CHORUS_TTS_USER_CHARS_HOUR="60", CHORUS_TTS_CHANNEL_CHARS_HOUR="90")
    speaker = speaker_on(real_redis, settings)
    line = "Cheer500 " + "x" * 10  # read as "Bob cheered 500 bits: ..." (41 characters)
    assert await speaker.event(cheer(conv, line, 500))
    assert not await speaker.event(cheer(conv, line, 500))  # Bob's 60 reached
    assert not await speaker.event(cheer(conv, line, 500))  # no second notice
    assert await speaker.event(cheer(conv, line, 500, user="cat"))
    assert not await speaker.event(cheer(conv, line, 500, user="dan"))  # the channel's 90
    events = [(e["kind"], e["text"]) for e in await queued(real_redis, conv)]
    assert events == [
        ("cheer", f"Bob cheered 500 bits: {line}"),
        ("notice", "Bob has used their speaking time for the hour; more later!"),
        ("cheer", f"Cat cheered 500 bits: {line}"),
        (
            "notice",
            "Speech is resting for a while: this channel has used its speaking time for the hour.",
        ),
    ]


async def test_a_scope_turns_speech_off_for_one_channel(real_redis: Redis) -> None:
    quiet, loud = conv_of(), conv_of()
    for conv in (quiet, loud):
        await watch(real_redis, conv)
    settings = voice_settings()
    scope = Scope(match=f"twitch:{quiet.channel}", voice=ScopeVoice(enabled=False))
    settings.file = FileSettings(scopes=(scope,))
    speaker = speaker_on(real_redis, settings)
    assert speaker.open(chat(quiet, "@bot hi")) is None
    assert not speaker.is_command(chat(quiet, "!skip", user="m", mod=True))
    assert await speaker.event(cheer(loud, "Cheer500 hi", 500))
    assert not await speaker.event(cheer(quiet, "Cheer500 hi", 500))


async def test_a_channels_events_are_queued_in_the_order_they_arrived(real_redis: Redis) -> None:
    """Each event's speech runs off the consume loop and reads the store on its way: a Super
    Chat whose character count takes longer must still be queued before the one after it."""
    conv = ConversationKey(platform="youtube", channel=f"order-{uuid.uuid4().hex[:8]}")
    await watch(real_redis, conv)
    speaker = speaker_on(real_redis)
    counted = speaker.chars.take

    async def slow_first(*args: Any, **kwargs: Any) -> Any:
        if args[2] == len("Ann sent a Super Chat of $5.00: first"):
            await asyncio.sleep(0.2)  # the first event's count is the slow one
        return await counted(*args, **kwargs)

    speaker.chars.take = slow_first  # type: ignore[method-assign]
    for user, amount, text in (("ann", "$5.00", "first"), ("bo", "$2", "second")):
        event = StreamEvent(
            kind=StreamEventKind.SUPER_CHAT, user_id=user, user_name=user.title(), amount=amount
        )
        speaker.start_event(chat(conv, text, user=user, stream_event=event))
    await speaker.aclose()
    assert [e["text"] for e in await queued(real_redis, conv)] == [
        "Ann sent a Super Chat of $5.00: first",
        "Bo sent a Super Chat of $2: second",
    ]
    assert speaker._last_event == {}  # the channel's place in line is let go once done
