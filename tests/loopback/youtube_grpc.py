"""A loopback stand-in for YouTube's gRPC ``liveChatMessages.streamList`` (grpc.aio, 127.0.0.1).

It serves the vendored proto (adapters/youtube/_proto) on a free port and shares the chat id,
the issued access tokens and the echo of sent messages with the REST stand-in
(youtube_server.py), so one adapter can read here and answer there. Every protobuf message is
built field by field from the REST-shaped fixtures (``text_item`` and the documented payloads)
by ``to_proto`` -- not with the adapter's own translation, so a mistake there cannot cancel out.

The chat is one log; a page token is a position in it (``pos-N``). A call without a token gets
the history first (the log so far), then one response per ``push``; a call with a token resumes
at that position, or ``overlap`` items earlier (as an at-least-once server might; the adapter
must drop what it has seen); a token of the REST stand-in (``page-N``, polling got that far)
resumes at the log's end, as if both served one chat. Scripts: ``fail(code)`` makes the next call fail before answering;
``close_after`` closes each call cleanly after that many responses; ``offline_at`` is set on
every response from then on. ``calls`` records each call's token, metadata and responses.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Self

import grpc
from grpc import aio

from adapters.youtube._proto import stream_list_pb2 as pb
from tests.loopback.youtube_server import YouTubeServer

SERVICE = "youtube.api.v3.V3DataLiveChatMessageService"
_T = pb.LiveChatMessageSnippet.TypeWrapper
TYPES = {
    "textMessageEvent": _T.TEXT_MESSAGE_EVENT,
    "chatEndedEvent": _T.CHAT_ENDED_EVENT,
    "messageDeletedEvent": _T.MESSAGE_DELETED_EVENT,
    "userBannedEvent": _T.USER_BANNED_EVENT,
    "superChatEvent": _T.SUPER_CHAT_EVENT,
    "superStickerEvent": _T.SUPER_STICKER_EVENT,
    "newSponsorEvent": _T.NEW_SPONSOR_EVENT,
    "memberMilestoneChatEvent": _T.MEMBER_MILESTONE_CHAT_EVENT,
    "membershipGiftingEvent": _T.MEMBERSHIP_GIFTING_EVENT,
    "giftMembershipReceivedEvent": _T.GIFT_MEMBERSHIP_RECEIVED_EVENT,
}
_BAN = pb.LiveChatUserBannedMessageDetails.BanTypeWrapper
BAN_TYPES = {"permanent": _BAN.PERMANENT, "temporary": _BAN.TEMPORARY}


@dataclass
class StreamCall:
    page_token: str | None
    authorization: str
    live_chat_id: str
    parts: list[str]
    responses: int = 0


class YouTubeStreamServer:
    def __init__(self, rest: YouTubeServer) -> None:
        self.rest = rest
        self.log: list[pb.LiveChatMessage] = []
        self.calls: list[StreamCall] = []
        self.failures: deque[grpc.StatusCode] = deque()
        self.close_after: int | None = None
        self.overlap = 0
        self.offline_at: str | None = None
        self.target = ""
        self._server: aio.Server | None = None
        self._wake = asyncio.Event()
        self._seen: asyncio.Condition | None = None  # notified on every call and response
        rest.on_insert.append(lambda resource: self.push(resource))

    # -- scripting --------------------------------------------------------------------------
    def push(self, *items: Mapping[str, Any]) -> None:
        """Append REST-shaped chat items; open calls send them in one response."""
        self.log.extend(to_proto(item) for item in items)
        self._notify()

    def fail(self, code: grpc.StatusCode) -> None:
        self.failures.append(code)

    def go_offline(self, when: str) -> None:
        self.offline_at = when
        self._notify()

    def _notify(self) -> None:
        self._wake.set()
        self._wake = asyncio.Event()

    async def wait_for(self, predicate: Callable[[], bool], limit: float = 30.0) -> None:
        """Until ``predicate()`` holds, checked after each call and response the server saw (at
        most ``limit`` seconds): a test waits on what the server saw, never on a sleep."""
        condition = self._condition()
        async with asyncio.timeout(limit), condition:
            await condition.wait_for(predicate)

    def _condition(self) -> asyncio.Condition:
        if self._seen is None:
            self._seen = asyncio.Condition()
        return self._seen

    async def _saw(self) -> None:
        condition = self._condition()
        async with condition:
            condition.notify_all()

    # -- the server -------------------------------------------------------------------------
    async def start(self) -> Self:
        handler = grpc.unary_stream_rpc_method_handler(
            self._stream_list,
            request_deserializer=pb.LiveChatMessageListRequest.FromString,
            response_serializer=pb.LiveChatMessageListResponse.SerializeToString,
        )
        generic = grpc.method_handlers_generic_handler(SERVICE, {"StreamList": handler})
        self._server = aio.server()
        self._server.add_generic_rpc_handlers((generic,))
        port = self._server.add_insecure_port("127.0.0.1:0")
        await self._server.start()
        self.target = f"127.0.0.1:{port}"
        return self

    async def close(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _stream_list(
        self, request: pb.LiveChatMessageListRequest, context: aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.LiveChatMessageListResponse]:
        metadata = {key: value for key, value in context.invocation_metadata() or ()}
        token = request.page_token if request.HasField("page_token") else None
        # The position is fixed as the call is recorded, before any await: a test that pushes
        # once it sees the call must find its item delivered, never taken for the log so far.
        position: int | None
        # the first answer of a call without a token is the history as the call found it: an
        # item pushed once the test saw the call comes in the next answer, never in the backlog
        history = len(self.log) if token is None else None
        if token is None:
            position = 0  # the history: everything so far, in the first response
        elif token.startswith("pos-"):
            position = max(0, int(token.removeprefix("pos-")) - self.overlap)
        elif token.startswith("page-"):  # the REST stand-in's token: polling got this far
            position = len(self.log)
        else:
            position = None
        call = StreamCall(
            token, str(metadata.get("authorization", "")), request.live_chat_id, list(request.part)
        )
        self.calls.append(call)
        await self._saw()
        if not self.rest.token_valid(call.authorization.removeprefix("Bearer ")):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "invalid authentication")
        if self.failures:
            await context.abort(self.failures.popleft(), "scripted failure")
        if request.live_chat_id != self.rest.live_chat_id:
            await context.abort(grpc.StatusCode.NOT_FOUND, "liveChatNotFound")
        await context.send_initial_metadata(())  # headers at once, as a real server sends them
        if position is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "invalid page token")
            return
        while self.close_after is None or call.responses < self.close_after:
            wake = self._wake
            if history is not None:
                items, position, history = self.log[:history], history, None
            elif len(self.log) <= position and self.offline_at is None:
                await wake.wait()
                continue
            else:
                items, position = self.log[position:], len(self.log)
            yield self._response(items, position)
            call.responses += 1
            await self._saw()
            if self.offline_at is not None:
                return  # the stream went offline: said once, then the call ends

    def _response(
        self, items: list[pb.LiveChatMessage], position: int
    ) -> pb.LiveChatMessageListResponse:
        response = pb.LiveChatMessageListResponse(
            kind="youtube#liveChatMessageListResponse",
            etag="etag",
            next_page_token=f"pos-{position}",
            items=items,
            page_info=pb.PageInfo(total_results=len(items), results_per_page=len(items)),
        )
        if self.offline_at is not None:
            response.offline_at = self.offline_at
        return response


def to_proto(item: Mapping[str, Any]) -> pb.LiveChatMessage:
    """A REST ``liveChatMessage`` resource as the proto message, field by field."""
    message = pb.LiveChatMessage()
    for key, field in (("kind", "kind"), ("etag", "etag"), ("id", "id")):
        if key in item:
            setattr(message, field, item[key])
    if "snippet" in item:
        message.snippet.CopyFrom(_snippet(item["snippet"]))
    if "authorDetails" in item:
        message.author_details.CopyFrom(_author(item["authorDetails"]))
    return message


def _snippet(data: Mapping[str, Any]) -> pb.LiveChatMessageSnippet:
    snippet = pb.LiveChatMessageSnippet(type=TYPES[data["type"]])
    for key, field in (
        ("liveChatId", "live_chat_id"),
        ("authorChannelId", "author_channel_id"),
        ("publishedAt", "published_at"),
        ("hasDisplayContent", "has_display_content"),
        ("displayMessage", "display_message"),
    ):
        if key in data:
            setattr(snippet, field, data[key])
    if "textMessageDetails" in data:
        snippet.text_message_details.message_text = data["textMessageDetails"]["messageText"]
    if "messageDeletedDetails" in data:
        deleted = data["messageDeletedDetails"]["deletedMessageId"]
        snippet.message_deleted_details.deleted_message_id = deleted
    if "superChatDetails" in data:
        paid = data["superChatDetails"]
        snippet.super_chat_details.CopyFrom(
            pb.LiveChatSuperChatDetails(
                amount_micros=int(paid["amountMicros"]),
                currency=paid["currency"],
                amount_display_string=paid["amountDisplayString"],
                user_comment=paid["userComment"],
                tier=paid["tier"],
            )
        )
    if "userBannedDetails" in data:
        ban = data["userBannedDetails"]
        details = snippet.user_banned_details
        details.banned_user_details.CopyFrom(_profile(ban["bannedUserDetails"]))
        details.ban_type = BAN_TYPES[ban["banType"]]
        if "banDurationSeconds" in ban:
            details.ban_duration_seconds = int(ban["banDurationSeconds"])
    if "superStickerDetails" in data:
        sticker = data["superStickerDetails"]
        meta = sticker["superStickerMetadata"]
        snippet.super_sticker_details.CopyFrom(
            pb.LiveChatSuperStickerDetails(
                amount_micros=int(sticker["amountMicros"]),
                currency=sticker["currency"],
                amount_display_string=sticker["amountDisplayString"],
                tier=sticker["tier"],
                super_sticker_metadata=pb.SuperStickerMetadata(
                    sticker_id=meta["stickerId"],
                    alt_text=meta["altText"],
                    alt_text_language=meta["language"],  # REST calls it "language"
                ),
            )
        )
    if "newSponsorDetails" in data:
        sponsor = data["newSponsorDetails"]
        snippet.new_sponsor_details.CopyFrom(
            pb.LiveChatNewSponsorDetails(
                member_level_name=sponsor["memberLevelName"], is_upgrade=sponsor["isUpgrade"]
            )
        )
    if "memberMilestoneChatDetails" in data:
        milestone = data["memberMilestoneChatDetails"]
        snippet.member_milestone_chat_details.CopyFrom(
            pb.LiveChatMemberMilestoneChatDetails(
                member_level_name=milestone["memberLevelName"],
                member_month=milestone["memberMonth"],
                user_comment=milestone["userComment"],
            )
        )
    if "membershipGiftingDetails" in data:
        gifting = data["membershipGiftingDetails"]
        snippet.membership_gifting_details.CopyFrom(
            pb.LiveChatMembershipGiftingDetails(
                gift_memberships_count=gifting["giftMembershipsCount"],
                gift_memberships_level_name=gifting["giftMembershipsLevelName"],
            )
        )
    if "giftMembershipReceivedDetails" in data:
        gift = data["giftMembershipReceivedDetails"]
        snippet.gift_membership_received_details.CopyFrom(
            pb.LiveChatGiftMembershipReceivedDetails(
                member_level_name=gift["memberLevelName"],
                gifter_channel_id=gift["gifterChannelId"],
                associated_membership_gifting_message_id=gift[
                    "associatedMembershipGiftingMessageId"
                ],
            )
        )
    return snippet


def _author(data: Mapping[str, Any]) -> pb.LiveChatMessageAuthorDetails:
    return pb.LiveChatMessageAuthorDetails(
        channel_id=data["channelId"],
        channel_url=data["channelUrl"],
        display_name=data["displayName"],
        profile_image_url=data["profileImageUrl"],
        is_verified=data["isVerified"],
        is_chat_owner=data["isChatOwner"],
        is_chat_sponsor=data["isChatSponsor"],
        is_chat_moderator=data["isChatModerator"],
    )


def _profile(data: Mapping[str, Any]) -> pb.ChannelProfileDetails:
    return pb.ChannelProfileDetails(
        channel_id=data["channelId"],
        channel_url=data["channelUrl"],
        display_name=data["displayName"],
        profile_image_url=data["profileImageUrl"],
    )
