"""What the engagement policy's table tests share (tests/test_engagement.py and
test_engagement_limits.py): a channel key, message and state builders, and the ledger's
counter check. The policy is pure, so the builders take explicit times.
"""

from __future__ import annotations

import itertools
from typing import Any

from bot.engagement.policy import (
    ChannelState,
    PolicyConfig,
    observe,
)
from bot.events import Author, ChatMessage, ConversationKey, Role

KEY = ConversationKey(platform="twitch", channel="streamer")


_ids = itertools.count()


def msg(
    text: str = "hello chat",
    user: str = "u1",
    *,
    roles: tuple[Role, ...] = (),
    mention: bool = False,
    reply: bool = False,
    direct: bool = False,
    bot: bool = False,
    msg_id: str | None = None,
) -> ChatMessage:
    return ChatMessage(
        platform="twitch",
        id=msg_id or f"m{next(_ids)}",
        conversation=KEY,
        author=Author(id=user, display_name=user.upper(), roles=frozenset(roles), is_bot=bot),
        text=text,
        mentions_bot=mention,
        reply_to_bot=reply,
        is_direct=direct,
        ambient=not (mention or reply or direct),
    )


def new_state(**overrides: Any) -> ChannelState:
    return ChannelState(PolicyConfig(**overrides))


def check_counters(state: ChannelState) -> None:
    """The O(1) counters always agree with the ledger they summarise."""
    items = [p for c in state.pending.values() for p in c.messages]
    assert state.pending_messages == len(items)
    assert state.addressed_pending == sum(p.addressed for p in items)
    for chatter in state.pending.values():
        assert chatter.addressed == sum(p.addressed for p in chatter.messages)
        assert chatter.questions == sum(p.question for p in chatter.messages)


def chatter_lines(state: ChannelState, users: list[str], now: float, text: str = "nice") -> None:
    for i, user in enumerate(users):
        observe(state, msg(f"{text} {i}", user), now)
