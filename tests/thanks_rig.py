"""What the thanks tests share: stream-event messages built the way the adapters build them,
and one sample thanks per platform (its golden text is ``tests/golden/live_thanks.txt``)."""

from __future__ import annotations

import itertools
from typing import Any

from redis.asyncio import Redis

from bot.engagement import thanks
from bot.engagement.thanks import ThanksConfig, ThanksState
from bot.engagement.turns import thanks_turn
from bot.events import Author, ChatMessage, ConversationKey, StreamEvent, StreamEventKind

TWITCH = ConversationKey(platform="twitch", channel="streamer")
YOUTUBE = ConversationKey(platform="youtube", channel="live-chat-1")
K = StreamEventKind
_ids = itertools.count()


def event(
    kind: StreamEventKind,
    user: str | None = "u1",
    *,
    text: str = "",
    conv: ConversationKey = TWITCH,
    msg_id: str | None = None,
    author: str | None = None,
    name: str | None = None,
    **fields: Any,
) -> ChatMessage:
    """A message carrying one stream event by ``user`` (None: anonymous), named ``name``
    (default: ``user`` upper-case)."""
    return ChatMessage(
        platform=conv.platform,
        id=msg_id or f"e{next(_ids)}",
        conversation=conv,
        author=Author(
            id=author or user or "anonymous", display_name=(author or user or "").upper()
        ),
        text=text,
        ambient=True,
        stream_event=StreamEvent(
            kind=kind,
            user_id=user,
            user_name=(user or "").upper() if name is None else name,
            **fields,
        ),
    )


def burst(
    gifter: str | None, gift_id: str, total: int, *, parts: int | None = None
) -> list[ChatMessage]:
    """A community gift as Twitch sends it: the announcement, then one notice per recipient."""
    head = event(K.GIFT_SUB, gifter, count=total, gift_id=gift_id, tier="1000")
    tail = [
        event(K.GIFT_SUB, gifter, count=1, gift_id=gift_id, recipient_id=f"r{gift_id}-{n}")
        for n in range(total if parts is None else parts)
    ]
    return [head, *tail]


def state(*kinds: StreamEventKind, **overrides: Any) -> ThanksState:
    return ThanksState(ThanksConfig(kinds=frozenset(kinds or thanks.ALL_KINDS), **overrides))


def sample_thanks_text() -> str:
    """Every kind on Twitch, then on YouTube, then three subs of which one is named: each
    turn's text and its instruction."""
    out: list[str] = []
    samples = (
        (
            TWITCH,
            [
                event(K.RAID, "raider", count=42),
                *burst("gifter", "g1", 5),
                event(K.RESUB, "fan", months=9, tier="1000", text="what about {{lines}} <b>"),
                event(K.ANNOUNCEMENT, "mod", text="Schedule: live at 18:00 UTC"),
                event(K.CHEER, "cheery", bits=100, text="Cheer100 gg"),
                event(K.SUB, "newbie", tier="prime"),
            ],
        ),
        (
            YOUTUBE,
            [
                event(K.SUPER_CHAT, "a", conv=YOUTUBE, amount="$5.00", text="love it"),
                event(K.SUPER_CHAT, "a", conv=YOUTUBE, amount="$2.00"),
                event(K.SUPER_STICKER, "b", conv=YOUTUBE, amount="€1.99"),
                event(K.SUB, "c", conv=YOUTUBE, tier="Gold Club"),
                event(K.RESUB, "d", conv=YOUTUBE, months=12, tier="Gold Club"),
                event(K.GIFT_SUB, "e", conv=YOUTUBE, count=5, gift_id="LCC.g", tier="Gold Club"),
                event(K.GIFT_SUB, None, conv=YOUTUBE, count=3, gift_id="LCC.anon"),
                # a recipient's part of a gifting item never seen: the gifter has no name
                event(K.GIFT_SUB, "UCx", conv=YOUTUBE, name="", gift_id="g2", recipient_id="r"),
            ],
        ),
        (TWITCH, [event(K.SUB, f"s{n}", tier="2000") for n in range(3)]),
    )
    for conv, messages in samples:
        waiting = state(max_names=1 if len(messages) == 3 else 10)
        for message in messages:
            thanks.observe(waiting, message, 0.0)
        due = thanks.due(waiting, 60.0)
        assert due is not None
        turn = thanks_turn(conv, due)
        out += [f"[{conv.platform}]", turn.message.text, turn.context]
    return "\n".join(out)


async def live_thanks(redis: Redis) -> str:
    """The golden case ``live_thanks`` (registered by ``tests/test_prompts_golden.py``)."""
    return sample_thanks_text()
