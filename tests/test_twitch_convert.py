"""Twitch conversion, table-tested on the recorded EventSub payloads (tests/fixtures/twitch).

The twitchio models are built the way twitchio's websocket builds them from a notification
(``create_event_instance``), so a change in twitchio's parsing shows up here too.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest
from twitchio.models.eventsub_ import create_event_instance

from adapters.twitch import convert
from adapters.twitch.convert import BotIdentity, SendArgs
from bot.events import ConversationKey, MessageDeleted, Reply, Role
from tests.loopback.twitch_server import fixture

BOT = BotIdentity(id="2914196", login="mybot")
CHANNEL = "1971641"


def _notification(name: str = "twitch_channel_chat_message", **event: Any) -> dict[str, Any]:
    data = copy.deepcopy(fixture(name))
    data["payload"]["event"].update(event)
    return data


def _chat(name: str = "twitch_channel_chat_message", **event: Any) -> Any:
    return create_event_instance("channel.chat.message", _notification(name, **event), http=None)


def _reply(parent_id: str, parent_login: str) -> dict[str, str]:
    return {
        "parent_message_id": "parent-1",
        "parent_message_body": "earlier words",
        "parent_user_id": parent_id,
        "parent_user_name": parent_login,
        "parent_user_login": parent_login,
        "thread_message_id": "parent-1",
        "thread_user_id": parent_id,
        "thread_user_name": parent_login,
        "thread_user_login": parent_login,
    }


def _text(text: str) -> dict[str, Any]:
    fragment = {"type": "text", "text": text, "cheermote": None, "emote": None, "mention": None}
    return {"text": text, "fragments": [fragment]}


# -- inbound ------------------------------------------------------------------------------------
def test_mention_fixture_becomes_an_addressed_message() -> None:
    message = convert.chat_message(_chat(), bot=BOT)
    assert message is not None
    assert message.id == "d4b0c0e2-6c2e-4a57-9a8e-5f1b3c9a7e10"
    assert message.conversation == ConversationKey(platform="twitch", channel=CHANNEL)
    assert message.author.id == "4145994"
    assert message.author.display_name == "viewer32"
    assert message.author.roles == {Role.MODERATOR, Role.SUBSCRIBER}
    assert message.text == "@mybot what is Kappa ?"
    assert message.mentions_bot and not message.reply_to_bot and not message.ambient
    assert message.reply_to_id == "cc106a89-1814-919d-454c-f4f2f970aae7"
    assert message.sent_at == datetime(2023, 11, 6, 18, 12, 3, 123456, tzinfo=UTC)


def test_docs_example_needs_the_animation_id_twitchio_requires() -> None:
    with pytest.raises(KeyError, match="channel_points_animation_id"):
        _chat("twitch_channel_chat_message_docs_example")
    event = _chat("twitch_channel_chat_message_docs_example", channel_points_animation_id=None)
    message = convert.chat_message(event, bot=BOT)
    assert message is not None
    assert message.text == "Hi chat"
    assert message.ambient and not message.addressed
    assert message.reply_to_id is None


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        pytest.param(  # Twitch puts "@parent" in front of a reply; it is not the user's words
            {"reply": _reply(BOT.id, "mybot"), "message": _text("@mybot thanks!")},
            {"reply_to_bot": True, "text": "thanks!", "ambient": False, "reply_to_id": "parent-1"},
            id="reply-to-bot",
        ),
        pytest.param(
            {"reply": _reply("555", "someone"), "message": _text("@someone agreed")},
            {"reply_to_bot": False, "mentions_bot": False, "ambient": True, "text": "agreed"},
            id="reply-to-someone-else",
        ),
        pytest.param(  # no mention fragment (e.g. a typed name): the login still counts
            {"reply": None, "message": _text("hey @MyBot, you there?")},
            {"mentions_bot": True, "ambient": False},
            id="typed-mention",
        ),
        pytest.param(
            {"reply": None, "message": _text("mail me at x@mybot.example")},
            {"mentions_bot": False, "ambient": True},
            id="not-a-mention",
        ),
    ],
)
def test_addressing(event: dict[str, Any], expected: dict[str, Any]) -> None:
    message = convert.chat_message(_chat(**event), bot=BOT)
    assert message is not None
    for field, value in expected.items():
        assert getattr(message, field) == value, field


@pytest.mark.parametrize(
    ("badges", "chatter_id", "roles"),
    [
        ([{"set_id": "broadcaster", "id": "1", "info": ""}], CHANNEL, {Role.OWNER}),
        ([], CHANNEL, {Role.OWNER}),  # the broadcaster is the owner even without the badge
        ([{"set_id": "moderator", "id": "1", "info": ""}], "42", {Role.MODERATOR}),
        ([{"set_id": "lead_moderator", "id": "1", "info": ""}], "42", {Role.MODERATOR}),
        ([{"set_id": "vip", "id": "1", "info": ""}], "42", {Role.SUBSCRIBER}),
        ([{"set_id": "subscriber", "id": "3", "info": "3"}], "42", {Role.SUBSCRIBER}),
        ([{"set_id": "premium", "id": "1", "info": ""}], "42", set()),
    ],
)
def test_roles(badges: list[dict[str, str]], chatter_id: str, roles: set[Role]) -> None:
    message = convert.chat_message(_chat(badges=badges, chatter_user_id=chatter_id), bot=BOT)
    assert message is not None
    assert message.author.roles == roles


def test_ignored_messages() -> None:
    own = _chat(chatter_user_id=BOT.id, chatter_user_login="mybot")
    assert convert.chat_message(own, bot=BOT) is None
    shared = _chat(
        source_broadcaster_user_id="777",
        source_broadcaster_user_login="other",
        source_broadcaster_user_name="Other",
        source_message_id="m-777",
    )
    assert convert.chat_message(shared, bot=BOT) is None
    quiet = _chat(reply=None, message=_text("just chatting"))
    assert convert.chat_message(quiet, bot=BOT, ambient=False) is None
    assert convert.chat_message(_chat(), bot=BOT, ambient=False) is not None  # addressed


def test_own_badges_tell_whether_the_bot_moderates() -> None:
    mod = _chat(chatter_user_id=BOT.id)
    assert convert.is_moderator_badge(mod)  # the fixture's badges include moderator
    assert not convert.is_moderator_badge(_chat(chatter_user_id=BOT.id, badges=[]))


def _webhook(name: str, sub_type: str) -> Any:
    return create_event_instance(sub_type, fixture(name), http=None)


def test_deletions() -> None:
    deleted = convert.message_deleted(
        _webhook("twitch_channel_chat_message_delete", "channel.chat.message_delete")
    )
    assert deleted == MessageDeleted(
        conversation=ConversationKey(platform="twitch", channel="1337"),
        message_id="ab24e0b0-2260-4bac-94e4-05eedd4ecd0e",
        author_id="7734",
    )
    cleared = convert.user_cleared(
        _webhook("twitch_channel_chat_clear_user_messages", "channel.chat.clear_user_messages")
    )
    assert cleared == MessageDeleted(
        conversation=ConversationKey(platform="twitch", channel="1337"), author_id="7734"
    )


# -- outbound -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("markdown", "plain"),
    [
        ("**bold** and *it* and ~~gone~~", "bold and it and gone"),
        ("## Heading\nbody text", "Heading body text"),
        ("use `pip install x` now", "use pip install x now"),
        ("```python\nprint(1)\n```", "print(1)"),
        (
            "see [the docs](https://ex.com/d) or <https://ex.com>",
            "see the docs (https://ex.com/d) or https://ex.com",
        ),
        ("- one\n- two", "• one • two"),
        ("> quoted\n\nnext para", "quoted next para"),
        ("snake_case_name stays", "snake_case_name stays"),
    ],
)
def test_markdown_becomes_one_plain_line(markdown: str, plain: str) -> None:
    assert convert.to_plain(markdown) == plain


def _sends(text: str, **kw: Any) -> list[SendArgs]:
    reply = Reply(conversation=ConversationKey(platform="twitch", channel=CHANNEL), text=text, **kw)
    return convert.reply_to_sends(reply, logins={"42": "alice"})


def test_short_reply_is_one_reply_message() -> None:
    assert _sends("**Hi** there", reply_to_id="m-1") == [
        SendArgs(broadcaster_id=CHANNEL, message="Hi there", reply_parent_message_id="m-1")
    ]
    assert _sends("   ") == []


def test_long_reply_is_two_pieces_then_an_ellipsis() -> None:
    text = " ".join(f"Sentence number {i} is here." for i in range(200))
    sends = _sends(text, reply_to_id="m-1")
    assert len(sends) == 2
    assert all(len(s.message) <= convert.MESSAGE_LIMIT for s in sends)
    assert sends[0].reply_parent_message_id == "m-1"
    assert sends[1].reply_parent_message_id is None
    assert sends[1].message.endswith(convert.ELLIPSIS)
    assert sends[0].message.startswith("Sentence number 0 is here.")


@pytest.mark.parametrize(
    ("text", "first"),
    [
        ("/ban someone", "\u2215ban someone"),
        ("  .timeout someone 10", "\u2024timeout someone 10"),
        ("/me waves", "\u2215me waves"),
        ("**/mod x**", "\u2215mod x"),  # a command revealed by stripping markdown
        ("1/2 is a half", "1/2 is a half"),
    ],
)
def test_never_starts_with_a_command_prefix(text: str, first: str) -> None:
    assert _sends(text)[0].message == first


def test_only_addressed_users_may_be_mentioned() -> None:
    (send,) = _sends("@alice and @bob, ask @everyone", addressed_user_ids=("42",))
    assert send.message == "@alice and bob, ask everyone"
    (send,) = _sends("@alice hi")  # not addressed: no ping even for a known login
    assert send.message == "alice hi"
