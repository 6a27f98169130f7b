"""Stream events from every recorded payload: Twitch chat notices and cheers (tests/fixtures/twitch),
YouTube paid and membership items read over REST and over gRPC (tests/fixtures/youtube).

Twitch payloads are parsed as the websocket parses them: ``notices.complete`` (which
``HandoverWebsocket`` applies) and then twitchio's ``create_event_instance``. YouTube items go
through the loopback's field-by-field ``to_proto``, the wire bytes and the adapter's ``to_json``,
so a streamed item must convert exactly like the polled one.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from twitchio.models.eventsub_ import create_event_instance

from adapters.twitch import convert, notices
from adapters.twitch.convert import BotIdentity
from adapters.youtube._proto import stream_list_pb2 as pb
from adapters.youtube.convert import ChatContext, to_event
from adapters.youtube.stream_list import to_json
from bot.events import ChatMessage, ConversationKey, Reply, StreamEvent, StreamEventKind
from tests.loopback.twitch_server import fixture
from tests.loopback.youtube_grpc import to_proto

K = StreamEventKind
BOT = BotIdentity(id="2914196", login="mybot")
YT = Path(__file__).parent / "fixtures" / "youtube"
YT_CTX = ChatContext(live_chat_id="chat", bot_channel_id="UCbot", bot_names=("Chorus",))


def notice(name: str, **event: Any) -> Any:
    data = copy.deepcopy(fixture(f"twitch_channel_chat_notification_{name}"))
    data["payload"]["event"].update(event)
    notices.complete(data["payload"]["event"])
    return create_event_instance(notices.SUBSCRIPTION, data, http=None)


def twitch(name: str, *, ambient: bool = True, **event: Any) -> ChatMessage | None:
    return notices.chat_message(notice(name, **event), bot=BOT, ambient=ambient)


@pytest.mark.parametrize(
    ("name", "message_id", "text", "expected"),
    [
        (
            "sub",
            "b1c2d3e4-0001-4a5b-9c8d-000000000001",
            "",
            StreamEvent(kind=K.SUB, user_id="4145994", user_name="viewer32", tier="1000"),
        ),
        (
            "resub",
            "d6deea58-ce6e-4217-905d-67670369b628",
            "what do you think about the mclaren?",
            StreamEvent(
                kind=K.RESUB,
                user_id="54492353",
                user_name="keepcalmcallsoul",
                tier="1000",
                months=9,
            ),
        ),
        (
            "community_sub_gift",
            "a5f1c0de-77aa-4e2b-8f10-000000000005",
            "",
            StreamEvent(
                kind=K.GIFT_SUB,
                user_id="54096715",
                user_name="Deleterr",
                tier="1000",
                count=5,
                gift_id="12111455614691086753",
            ),
        ),
        (
            "sub_gift",
            "0001ee46-e128-4435-848c-ad24401abe86",
            "",
            StreamEvent(
                kind=K.GIFT_SUB,
                user_id="54096715",
                user_name="Deleterr",
                tier="1000",
                count=1,
                recipient_id="108600558",
                recipient_name="JmsTV",
            ),
        ),
        (
            "raid",
            "c0ffee00-1234-4bcd-9e0f-000000000042",
            "",
            StreamEvent(kind=K.RAID, user_id="141981764", user_name="TwitchDev", count=42),
        ),
        (
            "announcement",
            "b7a1e5d2-9c3f-4e0a-8d21-0000000000a1",
            "Stream schedule changed: we go live at 18:00 UTC tomorrow",
            StreamEvent(kind=K.ANNOUNCEMENT, user_id="444", user_name="Cool_Chatter"),
        ),
    ],
)
def test_twitch_notices(name: str, message_id: str, text: str, expected: StreamEvent) -> None:
    message = twitch(name)
    assert message is not None
    assert (message.id, message.text, message.stream_event) == (message_id, text, expected)
    assert message.conversation.channel == "1971641" and message.author.id == expected.user_id
    assert not message.mentions_bot and message.ambient
    assert twitch(name, ambient=False) is not None  # an event, whatever the ambient setting


def test_twitchio_alone_cannot_parse_a_notice_without_the_newer_objects() -> None:
    data = fixture("twitch_channel_chat_notification_sub")
    with pytest.raises(KeyError, match="watch_streak"):
        create_event_instance(notices.SUBSCRIPTION, data, http=None)
    notices.complete(data["payload"]["event"])
    assert data["payload"]["event"]["watch_streak"] is None
    assert data["payload"]["event"]["sub"] is not None  # what was there stays


def test_a_burst_part_names_its_community_gift_and_an_anonymous_gifter_has_no_id() -> None:
    part = twitch("sub_gift", message_id="part-2", sub_gift=_gift(community_gift_id="123"))
    assert part is not None and part.stream_event is not None
    assert (part.id, part.stream_event.gift_id) == ("part-2", "123")
    anonymous = twitch(
        "community_sub_gift",
        chatter_user_id=None,
        chatter_user_login=None,
        chatter_user_name=None,
        chatter_is_anonymous=True,
        color="",
    )
    assert anonymous is not None and anonymous.stream_event is not None
    assert anonymous.stream_event.user_id is None and anonymous.stream_event.user_name == ""
    assert anonymous.author.id == notices.ANONYMOUS


def test_a_notice_that_mentions_the_bot_is_a_mention() -> None:
    text = "@mybot 9 months, what do you think about the mclaren?"
    fragment = {"type": "text", "text": text, "cheermote": None, "emote": None, "mention": None}
    message = twitch("resub", message={"text": text, "fragments": [fragment]}, ambient=False)
    assert message is not None and message.mentions_bot and not message.ambient
    assert message.stream_event is not None and message.stream_event.kind is K.RESUB


@pytest.mark.parametrize(
    ("changes", "published"),
    [
        (
            {
                "notice_type": "shared_chat_sub",
                "shared_chat_sub": {"sub_tier": "1000", "is_prime": False, "duration_months": 1},
            },
            False,
        ),
        ({"chatter_user_id": BOT.id}, False),  # the bot's own
        ({"notice_type": "bits_badge_tier", "sub": None, "bits_badge_tier": {"tier": 100}}, False),
        (
            {
                "notice_type": "watch_streak",
                "sub": None,
                "watch_streak": {"streak_count": 5, "channel_points_awarded": 350},
                "message": {"text": "five in a row", "fragments": []},
            },
            True,  # no stream event, but the viewer's words: plain chat
        ),
    ],
)
def test_other_notices(changes: dict[str, Any], published: bool) -> None:
    message = twitch("sub", **changes)
    assert (message is not None) is published
    if message is not None:
        assert message.stream_event is None and message.text == "five in a row"


def test_a_cheer_is_an_event_on_its_chat_message() -> None:
    event = create_event_instance(
        "channel.chat.message", fixture("twitch_channel_chat_message_cheer"), http=None
    )
    for ambient in (True, False):  # a cheer is published even when ambient chat is off
        message = convert.chat_message(event, bot=BOT, ambient=ambient)
        assert message is not None and message.text == "Cheer100 great stream!"
        assert message.stream_event == StreamEvent(
            kind=K.CHEER, user_id="4145994", user_name="viewer32", bits=100
        )
        assert message.ambient is ambient


def _gift(**changes: Any) -> dict[str, Any]:
    gift: dict[str, Any] = fixture("twitch_channel_chat_notification_sub_gift")["payload"]["event"][
        "sub_gift"
    ]
    return {**gift, **changes}


# -- YouTube ------------------------------------------------------------------------------------
def _items(name: str) -> list[dict[str, Any]]:
    path = YT / f"youtube_livechatmessages_list_{name}.json"
    items: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))["items"]
    return items


def _streamed(item: dict[str, Any]) -> dict[str, Any]:
    wire = to_proto(item).SerializeToString()
    return to_json(pb.LiveChatMessage.FromString(wire))


A, B, C = "UCZneZy3197k3ErGxVjKFZSg", "UCrjdRCm0gGcdrYtl8z66t6g", "UCPsfM4vuu_FmjQXfWCHdh4g"
GIFT = "LCC.fixture-membership-gifting-0001"
YOUTUBE = [
    (
        "superchat",
        "888",
        StreamEvent(
            kind=K.SUPER_CHAT,
            user_id=A,
            user_name="A",
            amount="¥200",
            amount_micros=200_000_000,
            currency="JPY",
        ),
    ),
    (
        "supersticker",
        "",
        StreamEvent(
            kind=K.SUPER_STICKER,
            user_id=A,
            user_name="A",
            amount="$2.00",
            amount_micros=2_000_000,
            currency="USD",
        ),
    ),
    ("newsponsor", "", StreamEvent(kind=K.SUB, user_id=A, user_name="A")),
    (
        "membermilestone",
        "still here!",
        StreamEvent(kind=K.RESUB, user_id=B, user_name="B", tier="Gold Club", months=12),
    ),
    (
        "membershipgifting",
        "",
        StreamEvent(
            kind=K.GIFT_SUB, user_id=A, user_name="A", tier="Gold Club", count=5, gift_id=GIFT
        ),
    ),
    (
        "giftmembershipreceived",
        "",
        StreamEvent(
            kind=K.GIFT_SUB,
            user_id=A,
            tier="Gold Club",
            count=1,
            gift_id=GIFT,
            recipient_id=C,
            recipient_name="C",
        ),
    ),
]


@pytest.mark.parametrize(("name", "text", "expected"), YOUTUBE, ids=[y[0] for y in YOUTUBE])
@pytest.mark.parametrize("read", ["rest", "grpc"])
def test_youtube_items(name: str, text: str, expected: StreamEvent, read: str) -> None:
    (item,) = _items(name)
    message = to_event(_streamed(item) if read == "grpc" else item, YT_CTX)
    assert isinstance(message, ChatMessage)
    assert (message.id, message.text, message.stream_event) == (item["id"], text, expected)
    assert message.author.id == item["snippet"]["authorChannelId"]  # the recipient, for a gift


@pytest.mark.parametrize("read", ["rest", "grpc"])
def test_the_mixed_page_converts_in_order_with_the_new_sponsor_level(read: str) -> None:
    items = _items("stream_events")
    messages = [to_event(_streamed(i) if read == "grpc" else i, YT_CTX) for i in items]
    events = [m.stream_event for m in messages if isinstance(m, ChatMessage)]
    assert [e.kind for e in events if e is not None] == [
        K.SUPER_CHAT,
        K.SUPER_STICKER,
        K.SUB,
        K.RESUB,
        K.GIFT_SUB,
        K.GIFT_SUB,
    ]
    assert events[2] is not None and events[2].tier == "Gold Club"
    assert len({m.id for m in messages if isinstance(m, ChatMessage)}) == 6  # none de-duplicated


def test_youtube_events_survive_ignore_mode_and_a_comment_can_mention_the_bot() -> None:
    ignore = ChatContext("chat", "UCbot", ("Chorus",), unaddressed="ignore")
    (sticker,) = _items("supersticker")
    message = to_event(sticker, ignore)
    assert isinstance(message, ChatMessage) and not message.ambient
    (paid,) = copy.deepcopy(_items("superchat"))
    paid["snippet"]["superChatDetails"]["userComment"] = "@Chorus what's next?"
    message = to_event(paid, ignore)
    assert isinstance(message, ChatMessage) and message.mentions_bot and not message.ambient
    own = ChatContext("chat", A, ("Chorus",))
    assert to_event(sticker, own) is None  # the bot's own channel


def test_an_answer_to_a_notice_goes_out_unthreaded_with_a_mention() -> None:
    unrepliable = notices.Unrepliable(capacity=2)
    conv = ConversationKey(platform="twitch", channel="1971641")
    reply = Reply(conversation=conv, text="9 months!", reply_to_id="n1", addressed_user_ids=("7",))
    assert unrepliable.unthread(reply, {"7": "fan"}) is reply  # an ordinary message: threaded
    for message_id in ("n1", "n2"):
        unrepliable.add(message_id)
    answer = unrepliable.unthread(reply, {"7": "fan"})
    assert (answer.reply_to_id, answer.text) == (None, "@fan 9 months!")
    assert unrepliable.unthread(reply, {}).text == "9 months!"  # no login known: no mention
    unrepliable.add("n3")  # the oldest id is forgotten
    assert unrepliable.unthread(reply, {"7": "fan"}) is reply


def test_a_message_without_an_event_reads_as_before_on_the_wire() -> None:
    """Rolling deploys: a message with no event has no ``stream_event`` key, so a process of the
    previous release (which forbids unknown keys) still takes it; one with an event round-trips."""
    cheer = create_event_instance(
        "channel.chat.message", fixture("twitch_channel_chat_message_cheer"), http=None
    )
    with_event = convert.chat_message(cheer, bot=BOT)
    assert with_event is not None and with_event.stream_event is not None
    plain = with_event.model_copy(update={"stream_event": None})
    assert set(json.loads(plain.model_dump_json())) == set(ChatMessage.model_fields) - {
        "stream_event"
    }
    for message in (plain, with_event):
        assert ChatMessage.model_validate_json(message.model_dump_json()) == message
