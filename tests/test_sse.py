"""``bot.llm.sse``: server-sent events off a streamed answer's bytes, however they are split.

The decoder is compared with the SDKs' own (``anthropic``'s and ``openai``'s ``SSEDecoder``,
which the providers used before) on the same bodies cut at every place, and checked against
the event-stream rules where the SDKs' decoders are not the reference: CR-only lines split
between reads, and the size bound.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
from anthropic._streaming import SSEDecoder as AnthropicDecoder
from openai._streaming import SSEDecoder as OpenAIDecoder

from bot.llm import sse
from bot.llm.errors import MalformedAnswer

BODY = (
    "event: message_start\n"
    'data: {"type": "message_start"}\n'
    "\n"
    ": a comment, as servers send to keep a connection alive\n"
    "event: ping\n"
    "data: {}\n"
    "\n"
    "data: one\n"
    "data:two\n"
    "data:  three, with its second space kept\n"
    "retry: 100\n"
    "unknown: field\n"
    "\n"
    "\n"
    "event: error\n"
    "\n"
    "event: named\n"
    "data: é and 日本\n"
    "data\n"
    "\n"
    "data: an event the body ends before it is finished\n"
)
EXPECTED = [
    ("message_start", '{"type": "message_start"}'),
    ("ping", "{}"),
    (None, "one\ntwo\n three, with its second space kept"),
    ("error", ""),
    ("named", "é and 日本\n"),
]


def _pieces(body: bytes, cuts: tuple[int, ...]) -> list[bytes]:
    edges = [0, *cuts, len(body)]
    return [body[a:b] for a, b in itertools.pairwise(edges)]


def _ours(pieces: list[bytes]) -> list[tuple[str | None, str]]:
    decoder = sse.Decoder()
    return [(e.name, e.data) for piece in pieces for e in decoder.feed(piece)]


def _sdks(
    make: Callable[[], AnthropicDecoder | OpenAIDecoder], pieces: list[bytes]
) -> list[tuple[str | None, str]]:
    found = make().iter_bytes(iter(pieces))
    return [(event.event, event.data) for event in found]


def _cuts(size: int) -> Iterator[tuple[int, ...]]:
    """Every single cut, and every pair of cuts seven bytes apart or more (the body read in
    three pieces)."""
    for cut in range(1, size):
        yield (cut,)
    for first in range(1, size, 7):
        for second in range(first + 1, size, 11):
            yield (first, second)


@pytest.mark.parametrize("end", ["\n", "\r\n"], ids=["lf", "crlf"])
def test_every_split_reads_as_the_sdks_decoders_read_it(end: str) -> None:
    body = BODY.replace("\n", end).encode()
    assert _ours([body]) == EXPECTED
    for cuts in _cuts(len(body)):
        pieces = _pieces(body, cuts)
        ours = _ours(pieces)
        assert ours == EXPECTED, cuts
        assert ours == _sdks(AnthropicDecoder, pieces) == _sdks(OpenAIDecoder, pieces), cuts


def test_lines_ended_by_cr_alone_read_alike_wherever_they_are_split() -> None:
    body = BODY.replace("\n", "\r").encode()
    for cuts in _cuts(len(body)):
        assert _ours(_pieces(body, cuts)) == EXPECTED, cuts


def test_a_crlf_split_between_two_reads_is_one_line_end() -> None:
    decoder = sse.Decoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"") == []  # an empty read in between changes nothing
    assert decoder.feed(b"\n") == []  # the CR's LF, not a blank line
    assert decoder.feed(b"\r") == [sse.Event(None, "a")]  # a blank line ended by CR alone
    assert decoder.feed(b"\ndata: b\r\n\r\n") == [sse.Event(None, "b")]


def test_an_event_is_dispatched_as_soon_as_its_blank_line_arrives() -> None:
    decoder = sse.Decoder()
    assert decoder.feed(b"event: a\ndata: 1\n") == []
    assert decoder.feed(b"\n") == [sse.Event("a", "1")]
    assert decoder.feed(b"data: 2\r\r") == [sse.Event(None, "2")]  # no wait for a next read


def test_many_events_in_one_read_are_not_one_long_event() -> None:
    event = b"data: " + b"x" * 5000 + b"\n\n"
    found = sse.Decoder().feed(event * 2000)  # about 10 MB in one read
    assert len(found) == 2000 and found[0].data == "x" * 5000


def test_a_line_that_never_ends_is_refused_not_held() -> None:
    decoder = sse.Decoder()
    piece = b"x" * 65536
    with pytest.raises(MalformedAnswer, match="longer than"):
        for _ in range(sse.MAX_EVENT // len(piece) + 1):
            decoder.feed(piece)


def test_an_event_of_endless_lines_is_refused() -> None:
    decoder = sse.Decoder()
    lines = b"data: " + b"y" * 1000 + b"\n"
    with pytest.raises(MalformedAnswer, match="longer than"):
        for _ in range(2 * sse.MAX_EVENT // len(lines)):
            decoder.feed(lines)


def test_an_id_alone_dispatches_nothing() -> None:
    # the SDKs' decoders keep the last id and then dispatch an empty event at every blank line;
    # an id means nothing to a one-shot answer, and an event needs a name or data
    assert sse.Decoder().feed(b"id: 7\n\n\n\ndata: x\n\n\n") == [sse.Event(None, "x")]


def test_a_line_that_is_not_utf8_is_refused() -> None:
    with pytest.raises(MalformedAnswer, match="not UTF-8"):
        sse.Decoder().feed(b"data: \xff\xfe\n\n")


async def test_events_reads_a_body_chunk_by_chunk() -> None:
    body = BODY.encode()

    async def chunks() -> AsyncIterator[bytes]:
        for piece in _pieces(body, (3, 40, 41, 90)):
            yield piece

    assert [tuple(e) async for e in sse.events(chunks())] == EXPECTED
