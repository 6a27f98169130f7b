"""The streamList stubs: fresh from the vendored proto, numbered as Google publishes them, and
translated into exactly the REST JSON the polling path reads.

The vendored ``stream_list.proto`` cites where its numbers come from; these tests pin the ones
the adapter relies on (a wrong number reads as an unset field, silently), check that the
committed generated code is what that proto compiles to, and run every documented REST payload
through the proto and back (built field by field by the loopback server's ``to_proto``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from adapters.youtube import convert
from adapters.youtube._proto import generate
from adapters.youtube._proto import stream_list_pb2 as pb
from adapters.youtube.stream_list import camel, to_json
from tests.loopback.youtube_grpc import to_proto
from tests.test_youtube_convert import CTX, FIXTURES


def test_the_committed_stubs_are_what_the_proto_compiles_to(tmp_path: Path) -> None:
    for fresh in generate.generate(tmp_path):
        committed = generate.HERE / fresh.name
        assert committed.read_bytes() == fresh.read_bytes(), (
            f"{committed} is stale: run `make proto` and commit the result"
        )


# (message, field, number, type) as in Google's published stream_list.proto
PUBLISHED = [
    ("LiveChatMessageListRequest", "live_chat_id", 1, "string"),
    ("LiveChatMessageListRequest", "page_token", 99, "string"),
    ("LiveChatMessageListRequest", "part", 100, "string"),
    ("LiveChatMessageListRequest", "max_results", 98, "uint32"),
    ("LiveChatMessageListResponse", "offline_at", 2, "string"),
    ("LiveChatMessageListResponse", "next_page_token", 100602, "string"),
    ("LiveChatMessageListResponse", "items", 1007, "message"),
    ("LiveChatMessageListResponse", "page_info", 1004, "message"),
    ("LiveChatMessage", "id", 101, "string"),
    ("LiveChatMessage", "snippet", 2, "message"),
    ("LiveChatMessage", "author_details", 3, "message"),
    ("LiveChatMessageAuthorDetails", "channel_id", 10101, "string"),
    ("LiveChatMessageAuthorDetails", "display_name", 103, "string"),
    ("LiveChatMessageAuthorDetails", "is_chat_owner", 5, "bool"),
    ("LiveChatMessageAuthorDetails", "is_chat_sponsor", 6, "bool"),
    ("LiveChatMessageAuthorDetails", "is_chat_moderator", 7, "bool"),
    ("LiveChatMessageSnippet", "type", 1, "enum"),
    ("LiveChatMessageSnippet", "author_channel_id", 301, "string"),
    ("LiveChatMessageSnippet", "published_at", 4, "string"),
    ("LiveChatMessageSnippet", "display_message", 16, "string"),
    ("LiveChatMessageSnippet", "text_message_details", 19, "message"),
    ("LiveChatMessageSnippet", "user_banned_details", 22, "message"),
    ("LiveChatMessageSnippet", "super_chat_details", 27, "message"),
    ("LiveChatMessageSnippet", "member_milestone_chat_details", 30, "message"),
    ("LiveChatMessageSnippet", "gift_details", 34, "message"),
    ("LiveChatTextMessageDetails", "message_text", 1, "string"),
    ("LiveChatSuperChatDetails", "amount_micros", 1, "uint64"),
    ("LiveChatSuperChatDetails", "user_comment", 4, "string"),
    ("LiveChatMemberMilestoneChatDetails", "user_comment", 3, "string"),
    ("LiveChatUserBannedMessageDetails", "banned_user_details", 1, "message"),
    ("ChannelProfileDetails", "channel_id", 101, "string"),
]
_TYPE_NAMES = {9: "string", 13: "uint32", 8: "bool", 11: "message", 14: "enum", 4: "uint64"}


@pytest.mark.parametrize(("message", "field", "number", "kind"), PUBLISHED)
def test_field_numbers_match_the_published_proto(
    message: str, field: str, number: int, kind: str
) -> None:
    descriptor = pb.DESCRIPTOR.message_types_by_name[message].fields_by_name[field]
    assert (descriptor.number, _TYPE_NAMES.get(descriptor.type)) == (number, kind)


def test_the_service_and_its_one_server_streaming_method() -> None:
    service = pb.DESCRIPTOR.services_by_name["V3DataLiveChatMessageService"]
    method = service.methods_by_name["StreamList"]
    assert service.full_name == "youtube.api.v3.V3DataLiveChatMessageService"
    assert method.input_type.name == "LiveChatMessageListRequest"
    assert method.output_type.name == "LiveChatMessageListResponse"
    assert method.server_streaming and not method.client_streaming
    types = pb.LiveChatMessageSnippet.TypeWrapper
    assert (types.TEXT_MESSAGE_EVENT, types.CHAT_ENDED_EVENT, types.SUPER_CHAT_EVENT) == (1, 4, 15)
    assert (types.USER_BANNED_EVENT, types.GIFT_EVENT) == (10, 21)


def _documented_items() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for path in sorted(FIXTURES.glob("youtube_livechatmessages_list_*.json")):
        items += json.loads(path.read_text(encoding="utf-8"))["items"]
    return items


@pytest.mark.parametrize("item", _documented_items(), ids=lambda item: str(item["id"])[:24])
def test_a_streamed_message_reads_exactly_like_the_polled_one(item: dict[str, Any]) -> None:
    wire = to_proto(item).SerializeToString()  # what crosses the connection
    streamed = to_json(pb.LiveChatMessage.FromString(wire))
    assert streamed == item
    assert convert.to_event(streamed, CTX) == convert.to_event(item, CTX)


def test_a_response_carries_the_page_token_and_the_offline_time() -> None:
    response = pb.LiveChatMessageListResponse(
        next_page_token="GPaimtHdmuUC", offline_at="2025-06-02T21:00:00Z", items=[]
    )
    page = to_json(pb.LiveChatMessageListResponse.FromString(response.SerializeToString()))
    assert page == {"nextPageToken": "GPaimtHdmuUC", "offlineAt": "2025-06-02T21:00:00Z"}


def test_an_unknown_message_type_is_read_as_untyped_and_ignored() -> None:
    # snippet (field 2) holding only type = 99, a value this proto does not know
    snippet = bytes([0x08, 99])
    wire = bytes([0x12, len(snippet)]) + snippet
    item = to_json(pb.LiveChatMessage.FromString(wire))
    assert item == {"snippet": {}}
    assert convert.to_event({"id": "x", **item}, CTX) is None


@pytest.mark.parametrize(
    ("name", "rest"),
    [
        ("TEXT_MESSAGE_EVENT", "textMessageEvent"),
        ("CHAT_ENDED_EVENT", "chatEndedEvent"),
        ("SPONSOR_ONLY_MODE_STARTED_EVENT", "sponsorOnlyModeStartedEvent"),
        ("TOMBSTONE", "tombstone"),
        ("PERMANENT", "permanent"),
    ],
)
def test_enum_values_take_their_rest_spelling(name: str, rest: str) -> None:
    assert camel(name) == rest
