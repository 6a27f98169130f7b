"""Server-sent events off a streamed answer's bytes, for the Anthropic and OpenAI streams.

Why Chorus reads SSE itself: the SDKs' streams build one of their pydantic event types for
every event, once per token on every streaming platform, and reading each event's JSON instead
costs a fraction of that (``python -m bench.vendor_call``, its streamed table: the SDK's own
``create`` stream and its ``AsyncStream`` on the provider's request, against the provider;
figures in BENCHMARKS.md). The providers ask the SDK client's ``post`` for the raw response
(``cast_to=httpx2.Response``, the escape hatch the SDKs document for requests of their own), so
the request, its headers, retries and HTTP errors stay the client's; only the body is read here.
``tests/test_llm_streams.py`` holds each provider's fold to the SDK's own accumulator fed the
same events.

The decoding follows the WHATWG event-stream rules the SDKs' decoders follow: lines end with
CRLF, LF or CR (a CRLF may be split across two reads), ``:`` starts a comment (a field with
no name, skipped as unknown fields are), one space after
the field's colon is dropped, ``data`` lines join with ``\\n``, a blank line dispatches, and an
event left unfinished when the body ends is dropped. As in the SDKs, an event is dispatched when
it has a name or data (an ``event: error`` with no data still arrives); ``id`` and ``retry``
mean nothing to a one-shot answer and are skipped. A line or an event larger than
``MAX_EVENT`` raises ``MalformedAnswer``: an answer's events are a few hundred bytes, and a
server that never ends a line must not grow the worker's memory without bound.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import NamedTuple

from bot.llm.errors import MalformedAnswer

MAX_EVENT = 8 * 1024 * 1024
_EOL = re.compile(rb"\r\n|\r|\n")


class Event(NamedTuple):
    """One dispatched event: its ``event:`` name (None when it had none) and its data."""

    name: str | None
    data: str


class Decoder:
    """Incremental: ``feed`` each read of the body, get the events it completed."""

    __slots__ = ("_tail", "_name", "_data", "_held", "_after_cr")

    def __init__(self) -> None:
        self._tail = b""  # the start of a line whose end has not arrived yet
        self._name: str | None = None
        self._data: list[str] = []
        self._held = 0  # bytes of the lines read so far of the event being read
        self._after_cr = False  # the last read ended with CR: a LF first in the next is its end

    def feed(self, chunk: bytes) -> list[Event]:
        if self._after_cr and chunk:  # an empty read says nothing of the CR's LF
            self._after_cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        buffer = self._tail + chunk if self._tail else chunk
        if b"\r" in buffer:
            self._after_cr = buffer.endswith(b"\r")
            lines = _EOL.split(buffer)
        else:
            lines = buffer.split(b"\n")
        self._tail = lines.pop()  # b"" when the read ended a line
        events: list[Event] = []
        for line in lines:
            if line:
                self._held += len(line)
                self._field(line)
            else:
                self._held = 0
                if self._name is not None or self._data:
                    data = self._data
                    text = data[0] if len(data) == 1 else "\n".join(data)
                    events.append(Event(self._name, text))
                    self._name, self._data = None, []
        if self._held + len(self._tail) > MAX_EVENT:
            raise MalformedAnswer(f"a server-sent event longer than {MAX_EVENT} bytes")
        return events

    def _field(self, line: bytes) -> None:
        field, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        try:
            if field == b"data":
                self._data.append(value.decode())
            elif field == b"event":
                self._name = value.decode()
        except UnicodeDecodeError as exc:
            raise MalformedAnswer(f"a server-sent event that is not UTF-8: {exc}") from exc


async def events(chunks: AsyncIterator[bytes]) -> AsyncIterator[Event]:
    """The events of a body read chunk by chunk (``httpx2.Response.aiter_bytes()``)."""
    decoder = Decoder()
    async for chunk in chunks:
        for event in decoder.feed(chunk):
            yield event
