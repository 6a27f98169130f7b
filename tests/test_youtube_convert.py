"""Table tests of the pure YouTube conversions on the documented payloads (tests/fixtures/youtube)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from adapters.youtube import convert
from adapters.youtube.convert import ChatContext, insert_body, mentions, reply_texts, to_event
from bot.events import ChatMessage, ConversationKey, MessageDeleted, Reply, Role

FIXTURES = Path(__file__).parent / "fixtures" / "youtube"
CHAT_ID = "oQZoCxfO7oUMBf703MdPwXb4c3EwgfI2Po4sL1oBaKbMelkCBiOS5UPOzE62l7hbC249v8wSTXcyEcVFHklmClse41wwiyO97uUyrt"
CONV = ConversationKey(platform="youtube", channel=CHAT_ID)
CTX = ChatContext(live_chat_id=CHAT_ID, bot_channel_id="UCbot", bot_names=("bot", "@chorusbot"))


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    return data


def _items(name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = _load(name)["items"]
    return items


MIXED = _items("youtube_livechatmessages_list_response.json")


def test_viewer_text_message_is_ambient_with_its_channel_id_and_time() -> None:
    event = to_event(MIXED[0], CTX)
    assert isinstance(event, ChatMessage)
    assert event.id == MIXED[0]["id"]
    assert event.conversation == CONV
    assert event.author.id == "UCZneZy3197k3ErGxVjKFZSg"
    assert event.author.display_name == "A"
    assert event.author.roles == frozenset()
    assert event.text == "888"
    assert (event.mentions_bot, event.ambient, event.is_direct) == (False, True, False)
    assert event.sent_at == datetime(2018, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("index", "text", "roles", "mentioned"),
    [
        (1, "@bot hello from the owner", {Role.OWNER}, True),
        (2, "!ask what is 2+2", {Role.MODERATOR}, False),
        (3, "888", set(), False),  # the Super Chat's comment
    ],
)
def test_roles_mentions_and_super_chat_comment(
    index: int, text: str, roles: set[Role], mentioned: bool
) -> None:
    event = to_event(MIXED[index], CTX)
    assert isinstance(event, ChatMessage)
    assert event.text == text
    assert event.author.roles == frozenset(roles)
    assert event.mentions_bot is mentioned
    assert event.ambient is not mentioned


def test_member_is_a_subscriber() -> None:
    item = json.loads(json.dumps(MIXED[0]))
    item["authorDetails"]["isChatSponsor"] = True
    event = to_event(item, CTX)
    assert isinstance(event, ChatMessage)
    assert event.author.roles == frozenset({Role.SUBSCRIBER})


def test_deletion_and_ban_become_message_deleted() -> None:
    assert to_event(MIXED[4], CTX) == MessageDeleted(conversation=CONV, message_id=MIXED[0]["id"])
    assert to_event(MIXED[5], CTX) == MessageDeleted(
        conversation=CONV, author_id="UCZneZy3197k3ErGxVjKFZSg"
    )


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("youtube_livechatmessages_list_newsponsor.json", ""),  # a stream event, no text
        ("youtube_livechatmessages_list_text.json", "888"),
        ("youtube_livechatmessages_list_superchat.json", "888"),
    ],
)
def test_single_item_fixtures(fixture: str, expected: str) -> None:
    event = to_event(_items(fixture)[0], CTX)
    assert isinstance(event, ChatMessage) and event.text == expected


def test_the_bots_own_messages_are_skipped() -> None:
    ctx = ChatContext(live_chat_id=CHAT_ID, bot_channel_id="UCZneZy3197k3ErGxVjKFZSg", bot_names=())
    assert to_event(MIXED[0], ctx) is None


@pytest.mark.parametrize(
    ("mode", "ambient_event", "mention_event"),
    [("ambient", True, False), ("answer", False, False), ("ignore", None, False)],
)
def test_unaddressed_setting(mode: str, ambient_event: bool | None, mention_event: bool) -> None:
    ctx = ChatContext(CHAT_ID, "UCbot", ("bot",), unaddressed=mode)  # type: ignore[arg-type]
    plain, mention = to_event(MIXED[0], ctx), to_event(MIXED[1], ctx)
    assert isinstance(mention, ChatMessage) and mention.ambient is mention_event
    if ambient_event is None:
        assert plain is None
    else:
        assert isinstance(plain, ChatMessage) and plain.ambient is ambient_event


def test_super_chat_without_comment_is_an_event_and_chat_end_is_ignored() -> None:
    item = json.loads(json.dumps(MIXED[3]))
    del item["snippet"]["superChatDetails"]["userComment"]
    event = to_event(item, CTX)
    assert isinstance(event, ChatMessage) and event.text == ""
    assert event.stream_event is not None and event.stream_event.amount == "¥200"
    ended = {
        "id": "x",
        "snippet": {"type": "chatEndedEvent", "publishedAt": "2018-01-01T00:00:00Z"},
    }
    assert to_event(ended, CTX) is None
    assert convert.is_chat_end(ended) and not convert.is_chat_end(MIXED[0])


def test_malformed_items_raise_for_the_adapter_to_log() -> None:
    with pytest.raises(convert.Malformed, match="snippet"):
        to_event({"id": "x"}, CTX)
    item = json.loads(json.dumps(MIXED[0]))
    item["snippet"]["publishedAt"] = "2018-01-01T00:00:00"  # no timezone
    with pytest.raises(convert.Malformed, match="publishedAt"):
        to_event(item, CTX)
    for field in ("id", "authorDetails"):  # ids of another type than string count as missing
        retyped = json.loads(json.dumps(MIXED[0]))
        retyped[field] = 42 if field == "id" else []
        retyped["snippet"]["authorChannelId"] = ["not", "an", "id"]
        with pytest.raises(convert.Malformed, match="id"):
            to_event(retyped, CTX)


def test_retyped_fields_never_raise_anything_but_malformed_nor_grant_a_role() -> None:
    item = json.loads(json.dumps(MIXED[0]))
    item["authorDetails"]["isChatOwner"] = "yes"  # truthy, but not the documented boolean
    item["snippet"]["textMessageDetails"] = ["text"]  # falls back to displayMessage
    event = to_event(item, CTX)
    assert isinstance(event, ChatMessage) and event.author.roles == frozenset()
    item["snippet"]["displayMessage"] = {"text": "x"}
    assert to_event(item, CTX) is None  # no text left: nothing to answer


def test_a_malformed_page_keeps_what_is_readable() -> None:
    page = convert.read_page(
        {"items": [MIXED[0], "junk", None], "nextPageToken": 7, "pollingIntervalMillis": "5000"}
    )
    assert page.items == (MIXED[0],)
    assert page.next_page_token is None and page.polling_interval is None
    assert page.problems == (
        "2 items are not objects",
        "nextPageToken is not a string",
        "pollingIntervalMillis is not a positive number",
    )
    assert convert.read_page({"items": {"a": 1}}).problems == ("items is not a list",)
    fine = convert.read_page({"items": [], "nextPageToken": "p", "pollingIntervalMillis": 2500})
    assert (fine.next_page_token, fine.polling_interval, fine.problems) == ("p", 2.5, ())


@pytest.mark.parametrize(
    ("text", "names", "expected"),
    [
        ("@Chorus hi", ["Chorus"], True),
        ("hey @chorus, what's up", ["Chorus"], True),
        ("@Chorus Bot are you there", ["Chorus Bot"], True),
        ("@chorusbot", ["@chorusbot"], True),
        ("@Chorusbot hi", ["Chorus"], False),  # a different name that starts the same
        ("mail me@chorus.com", ["chorus"], False),
        ("Chorus is neat", ["Chorus"], False),
        ("@Chorus", [], False),
    ],
)
def test_mentions(text: str, names: list[str], expected: bool) -> None:
    assert mentions(text, names) is expected


def _reply(text: str, addressed: tuple[str, ...] = ()) -> Reply:
    return Reply(conversation=CONV, text=text, addressed_user_ids=addressed)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "**Bold** and `code` and [docs](https://example.com)",
            ["Bold and code and docs (https://example.com)"],
        ),
        ("# Title\n\nline one\nline two", ["Title line one line two"]),
        ("```python\nprint(1)\n```", ["print(1)"]),
        ("   ", []),
    ],
)
def test_reply_is_flattened_to_one_plain_line(text: str, expected: list[str]) -> None:
    assert reply_texts(_reply(text), names={}) == expected


def test_reply_mentions_only_the_addressed_user() -> None:
    names = {"UCa": "Alice", "UCb": "@bobhandle"}
    out = reply_texts(_reply("thanks! cc @Mallory and @everyone", ("UCa",)), names=names)
    assert out == ["@Alice thanks! cc @\u2060Mallory and @\u2060everyone"]
    # a handle-style display name is not doubled, and an existing mention is not repeated
    assert reply_texts(_reply("hi", ("UCb",)), names=names) == ["@bobhandle hi"]
    assert reply_texts(_reply("sure @Alice", ("UCa",)), names=names) == ["sure @Alice"]
    # an unknown addressed user: no mention at all
    assert reply_texts(_reply("hi", ("UCzzz",)), names=names) == ["hi"]


def test_reply_is_split_at_200_characters_into_at_most_two_pieces() -> None:
    sentence = "This sentence is exactly fifty characters long ok. "
    short = reply_texts(_reply(sentence * 3), names={})
    assert len(short) == 1 and len(short[0]) <= 200
    two = reply_texts(_reply(sentence * 6), names={})
    assert len(two) == 2 and all(len(p) <= 200 for p in two)
    assert "".join(two).replace(" ", "") == (sentence * 6).replace(" ", "")
    cut = reply_texts(_reply(sentence * 20), names={})
    assert len(cut) == 2 and all(len(p) <= 200 for p in cut)
    assert cut[-1].endswith("…")
    one = reply_texts(_reply(sentence * 20), names={}, max_pieces=1)
    assert len(one) == 1 and one[0].endswith("…") and len(one[0]) <= 200


def test_insert_body_matches_the_documented_request() -> None:
    expected = _load("youtube_livechatmessages_insert_request.json")
    assert insert_body(CHAT_ID, "Hello from the bot!") == expected
