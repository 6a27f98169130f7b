"""The small bounded maps of the router, the safety lists and the adapters (``cachetools``
caches): each still forgets on the clock it is given and, when full, drops the entry its owner
means to drop first. Clocks are injected; nothing waits."""

from __future__ import annotations

import pytest

from adapters.twitch.notices import Unrepliable
from adapters.youtube.chat_stream import SeenIds
from bot.events import Author, ChatMessage, ConversationKey, Reply
from bot.router.commit import TouchThrottle
from bot.router.observe import Throttle
from bot.safety import users as users_module
from bot.safety.users import UserLists


def conv(channel: str) -> ConversationKey:
    return ConversationKey(platform="discord", channel=channel)


def message(user: str, channel: str = "c1") -> ChatMessage:
    return ChatMessage(
        platform="discord", id="m1", conversation=conv(channel), author=Author(id=user), text="hi"
    )


def test_a_throttle_is_due_once_per_interval_and_drops_the_least_recently_done_key() -> None:
    throttle = Throttle(10.0, capacity=2)
    assert throttle.due("a", 0.0) and not throttle.due("a", 9.5) and throttle.due("a", 10.0)
    assert throttle.due("b", 11.0) and throttle.due("c", 12.0)  # full: "a" went first
    assert throttle.due("a", 12.5)  # forgotten, so due again; now "b" went
    assert not throttle.due("c", 12.5) and throttle.due("b", 12.5)


def test_a_users_activity_is_recorded_once_a_minute_per_conversation() -> None:
    touched = TouchThrottle(every=60.0, capacity=2)
    assert touched.due(message("u1"), 0.0) and not touched.due(message("u1"), 59.0)
    assert touched.due(message("u1", "c2"), 59.0)  # another conversation: its own minute
    assert touched.due(message("u1"), 60.0)
    assert touched.due(message("u2"), 61.0)  # full: (u1, c2), the least recently recorded, went
    assert touched.due(message("u1", "c2"), 61.0)  # forgotten; now (u1, c1) went
    assert not touched.due(message("u2"), 61.0) and touched.due(message("u1"), 61.0)


async def test_the_channels_lists_kept_are_bounded_the_oldest_stored_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(users_module, "CACHED_CHANNELS", 2)
    lists = UserLists(None)
    for channel in ("c1", "c2"):
        await lists.set(conv(channel), "troll", "block")
    assert lists.status(conv("c1"), "troll") == "block"  # a lookup keeps nothing longer
    await lists.set(conv("c3"), "troll", "block")
    assert [lists.status(conv(c), "troll") for c in ("c1", "c2", "c3")] == [None, "block", "block"]


def test_youtube_seen_ids_are_bounded_and_handling_one_again_keeps_it() -> None:
    seen = SeenIds(size=2)
    for message_id in ("a", "b", "a", "c"):
        seen.add(message_id)
    assert "a" in seen and "c" in seen and "b" not in seen and len(seen) == 2


def test_the_notices_remembered_are_bounded_and_a_repeat_keeps_its_place() -> None:
    unrepliable = Unrepliable(capacity=2)
    reply = Reply(conversation=conv("c1"), text="hi", reply_to_id="n1")
    for notice in ("n1", "n2", "n1", "n3"):
        unrepliable.add(notice)
    assert unrepliable.unthread(reply, {}) is reply  # n1, published first, was forgotten
    second = reply.model_copy(update={"reply_to_id": "n2"})
    assert unrepliable.unthread(second, {}).reply_to_id is None
