"""Redis key formats: one prefix, escaped ids, and no two owners sharing a key."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.events import ConversationKey
from bot.state import keys


def conv(channel: str, thread: str | None = None, platform: str = "discord") -> ConversationKey:
    return ConversationKey(platform=platform, channel=channel, thread=thread)


def test_prefix_is_versioned() -> None:
    assert keys.PREFIX == "chorus:v1"


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (conv("123"), "chorus:v1:hist:discord:123"),
        (conv("123", "456"), "chorus:v1:hist:discord:123:456"),
        (conv("#general", platform="twitch"), "chorus:v1:hist:twitch:#general"),
        (conv("a:b"), "chorus:v1:hist:discord:a%3Ab"),
        (conv("100%", "x:y"), "chorus:v1:hist:discord:100%25:x%3Ay"),
    ],
)
def test_history_key(key: ConversationKey, expected: str) -> None:
    assert keys.history(key) == expected


def test_user_and_dedupe_keys_escape_ids() -> None:
    assert keys.user("slack", "U123", "pins") == "chorus:v1:user:slack:U123:pins"
    assert keys.user("youtube", "a:b%c", "recs") == "chorus:v1:user:youtube:a%3Ab%25c:recs"
    assert keys.dedupe("discord", "99") == "chorus:v1:dedupe:discord:99"
    assert keys.dedupe("slack", "1700.1:x") == "chorus:v1:dedupe:slack:1700.1%3Ax"


def test_channel_with_colon_never_collides_with_a_thread() -> None:
    assert keys.history(conv("a:b")) != keys.history(conv("a", "b"))
    # a user id with ':' stays one part, so the kind is always the last part
    assert keys.user("discord", "a:pins", "recs").split(":") == [
        "chorus",
        "v1",
        "user",
        "discord",
        "a%3Apins",
        "recs",
    ]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: keys.user("Discord", "1", "pins"), "platform"),
        (lambda: keys.user("discord", "1", "pi:ns"), "kind"),
        (lambda: keys.user("discord", "", "pins"), "user_id"),
        (lambda: keys.dedupe("dis:cord", "1"), "platform"),
        (lambda: keys.dedupe("discord", ""), "message_id"),
    ],
)
def test_parts_that_could_break_the_format_are_refused(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]


_ids = st.text(min_size=1, max_size=12)


@given(a=st.tuples(_ids, st.none() | _ids), b=st.tuples(_ids, st.none() | _ids))
def test_distinct_conversations_have_distinct_history_keys(
    a: tuple[str, str | None], b: tuple[str, str | None]
) -> None:
    if a != b:
        assert keys.history(conv(*a)) != keys.history(conv(*b))


_user = st.tuples(_ids, st.sampled_from(["pins", "recs", "profile"]))


@given(a=_user, b=_user)
def test_distinct_users_have_distinct_keys(a: tuple[str, str], b: tuple[str, str]) -> None:
    if a != b:
        assert keys.user("slack", *a) != keys.user("slack", *b)


def test_keys_of_different_owners_live_in_different_namespaces() -> None:
    owners = {
        keys.history(conv("1")).split(":")[2],
        keys.user("discord", "1", "pins").split(":")[2],
        keys.dedupe("discord", "1").split(":")[2],
    }
    assert owners == {"hist", "user", "dedupe"}
