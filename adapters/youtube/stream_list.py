"""The gRPC side of reading a live chat: ``liveChatMessages.streamList`` (server streaming).

Why: polling ``liveChatMessages.list`` costs 5 quota units a call -- about 7,900 units over a
4-hour stream at the planned ~9 s cadence -- and the chat goes deaf once the day's 10,000 are
spent. ``streamList`` pushes the same ``liveChatMessage`` resources over one open connection
(``youtube.googleapis.com:443``, ``youtube.api.v3.V3DataLiveChatMessageService/StreamList``), so
reading costs one charge per connection instead of one per poll (quota.py).

This module owns everything gRPC: the channel (TLS; plaintext only for a loopback test server,
which the settings enforce), the call with the OAuth bearer token as ``authorization`` metadata,
the message stubs generated from Google's published proto (``_proto/``, ``make proto``), and the
translation of each response into the REST JSON shape of ``liveChatMessageListResponse``, so
convert.py and the adapter treat a streamed page and a polled page alike. A failed call becomes
``StreamError`` with the gRPC status name and whether retrying may help; reconnecting, resuming
and falling back to polling are chat_stream.py's.

grpcio is part of the ``youtube`` extra; the adapter imports this module lazily and polls when
grpcio is missing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import grpc
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from grpc import aio

from adapters.youtube._proto import stream_list_pb2 as pb

METHOD = "/youtube.api.v3.V3DataLiveChatMessageService/StreamList"
PARTS = ("id", "snippet", "authorDetails")
# A dead connection (a NAT that dropped it, a server that vanished) is noticed by a ping.
_OPTIONS = (("grpc.keepalive_time_ms", 60_000), ("grpc.keepalive_timeout_ms", 20_000))
_CLOSE_S = 5.0
# Statuses after which the same request may well succeed: the network or the server had a
# moment. The rest (UNIMPLEMENTED, PERMISSION_DENIED, NOT_FOUND, RESOURCE_EXHAUSTED, ...) are
# answered more precisely by the REST API, which the reader falls back to.
_TRANSIENT = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.CANCELLED,
    }
)
_INT64 = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
)

# Where the REST resource names a field differently from the proto's JSON name.
_REST_NAMES = {"youtube.api.v3.SuperStickerMetadata.alt_text_language": "language"}


class StreamError(Exception):
    """A ``StreamList`` call failed; ``code`` is the gRPC status name (``UNAVAILABLE``...)."""

    def __init__(self, code: str, details: str, *, transient: bool) -> None:
        super().__init__(f"{code}: {details}" if details else code)
        self.code = code
        self.details = details
        self.transient = transient


class ChatStream:
    """One channel to the streamList endpoint; ``pages`` opens one call (one connection's
    worth of responses) at a time."""

    def __init__(self, target: str, *, insecure: bool = False) -> None:
        if insecure:
            self._channel = aio.insecure_channel(target, options=_OPTIONS)
        else:
            credentials = grpc.ssl_channel_credentials()
            self._channel = aio.secure_channel(target, credentials, options=_OPTIONS)
        self._stream_list = self._channel.unary_stream(
            METHOD,
            request_serializer=pb.LiveChatMessageListRequest.SerializeToString,
            response_deserializer=pb.LiveChatMessageListResponse.FromString,
        )

    async def pages(
        self, live_chat_id: str, page_token: str | None, access_token: str
    ) -> AsyncGenerator[dict[str, Any], None]:
        """The responses of one ``StreamList`` call as REST-shaped pages, until the server
        closes the stream (the iteration ends) or the call fails (``StreamError``)."""
        request = pb.LiveChatMessageListRequest(live_chat_id=live_chat_id, part=PARTS)
        if page_token:
            request.page_token = page_token
        call = self._stream_list(request, metadata=(("authorization", f"Bearer {access_token}"),))
        responses = call.__aiter__()
        try:
            while True:
                _raise_if_cancelled()  # a cancel swallowed while the last response was handled
                response = await _next(responses)
                if response is None:
                    break
                yield to_json(response)
        except aio.AioRpcError as exc:
            _raise_if_cancelled()
            code = exc.code()
            raise StreamError(
                code.name, exc.details() or "", transient=code in _TRANSIENT
            ) from None
        except asyncio.CancelledError:
            call.cancel()  # at once: the pending read ends on its own, unawaited
            raise
        finally:
            call.cancel()  # a no-op when the call is over; ends it when the reader stops early
        _raise_if_cancelled()

    async def aclose(self) -> None:
        """Close the channel; a close that hangs (on a call grpc has not finished cancelling)
        is given up on after ``_CLOSE_S`` rather than holding up the adapter's shutdown."""
        closing = asyncio.ensure_future(self._channel.close())
        closing.add_done_callback(_consume)
        await asyncio.wait([closing], timeout=_CLOSE_S)


async def _next(
    responses: AsyncIterator[pb.LiveChatMessageListResponse],
) -> pb.LiveChatMessageListResponse | None:
    """The next response, None at the end of the stream. The read runs in a task of its own
    behind ``shield``: cancelling the reader then takes effect at once, instead of waiting for
    grpc to finish a read it was asked to cancel (which, seen in tests, it may never do)."""
    step = asyncio.ensure_future(anext(responses))
    step.add_done_callback(_consume)
    try:
        return await asyncio.shield(step)
    except StopAsyncIteration:
        return None


def _consume(task: asyncio.Future[Any]) -> None:
    """Retrieve an abandoned task's outcome, so asyncio does not log it as never retrieved."""
    if not task.cancelled():
        task.exception()


def _raise_if_cancelled() -> None:
    """Stop if the task was asked to: grpc turns a cancel into a CANCELLED status or the end of
    the stream, and code that ran between two reads may have caught one; either way the task
    must stop, not read on or reconnect."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def to_json(message: Message) -> dict[str, Any]:
    """A message as the Data API's REST JSON renders the same resource: camelCase names
    (``json_name``, or REST's own where it differs), enum values as camelCase strings (``TEXT_MESSAGE_EVENT`` ->
    ``textMessageEvent``, ``PERMANENT`` -> ``permanent``), 64-bit integers as strings, and
    unset fields absent."""
    out: dict[str, Any] = {}
    for field, value in message.ListFields():
        name = _REST_NAMES.get(field.full_name, field.json_name)
        if field.is_repeated:
            out[name] = [_value(field, v) for v in value]
        else:
            out[name] = _value(field, value)
    return out


def _value(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return to_json(value)
    if field.type == FieldDescriptor.TYPE_ENUM and field.enum_type is not None:
        described = field.enum_type.values_by_number.get(value)
        return camel(described.name) if described is not None else value
    if field.type in _INT64:
        return str(value)
    return value


def camel(name: str) -> str:
    """``TEXT_MESSAGE_EVENT`` -> ``textMessageEvent``: the REST spelling of a proto enum value."""
    first, *rest = name.lower().split("_")
    return first + "".join(word.capitalize() for word in rest)
