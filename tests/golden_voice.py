"""The golden case of what the stream overlay says and shows (``prompts/voice/*``): a cheer, a
Super Chat, a Super Sticker and Twitch channel-point redemptions (with and without the viewer's
text) read aloud through the speaker (queued as production queues them),
and the notices of a spent hour of speech. Registered by ``tests/test_prompts_golden.py``."""

from __future__ import annotations

from redis.asyncio import Redis

from bot.events import Author, ChatMessage, ConversationKey, StreamEvent, StreamEventKind
from bot.settings import settings_from
from bot.state.voice import VoiceQueue
from bot.voice.speaker import Speaker, limit_notice


def _said(message: ChatMessage, text: str) -> str:
    return text


async def voice_texts(redis: Redis) -> str:
    settings = settings_from({"CHORUS_VOICE": "true", "CHORUS_TTS_REWARDS": "Hydrate, Say hi"})
    queue = VoiceQueue(redis)
    speaker = Speaker(queue, lambda: settings, check=_said)
    events = [
        (
            "twitch",
            StreamEvent(kind=StreamEventKind.CHEER, user_name="Ada", bits=500),
            "Cheer500 gg",
        ),
        (
            "youtube",
            StreamEvent(kind=StreamEventKind.SUPER_CHAT, user_name="Bo", amount="$5.00"),
            "love the stream",
        ),
        (
            "youtube",
            StreamEvent(kind=StreamEventKind.SUPER_STICKER, user_name="Cy", amount="€2"),
            "",
        ),
        (
            "twitch",
            StreamEvent(
                kind=StreamEventKind.REDEMPTION, user_name="Di", reward="Hydrate", cost=500
            ),
            "drink some water",
        ),
        (
            "twitch",
            StreamEvent(kind=StreamEventKind.REDEMPTION, user_name="Ed", reward="Say hi", cost=50),
            "",
        ),
    ]
    lines = []
    for n, (platform, event, text) in enumerate(events):
        conv = ConversationKey(platform=platform, channel=f"golden-voice-{n}")
        await queue.watched(conv)
        message = ChatMessage(
            platform=platform,
            id=f"gv{n}",
            conversation=conv,
            author=Author(id=f"u{n}", display_name=event.user_name),
            text=text,
            stream_event=event,
        )
        await speaker.event(message)
        lines += [str(found["text"]) for found in await queue.recent(conv)]
        await redis.delete(*[key async for key in redis.scan_iter(match=f"*golden-voice-{n}*")])
    lines += [limit_notice("channel", "Ada"), limit_notice("user", "Ada")]
    return "\n".join(lines)
