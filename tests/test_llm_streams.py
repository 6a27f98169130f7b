"""Streamed answers read off their events' JSON: ``anthropic_parse.StreamState`` and
``openai_parse.StreamState`` fed by ``bot.llm.sse``, not by the SDKs' event types.

Each state is compared with the SDK's own accumulator (``accumulate_event`` for Anthropic,
``ChatCompletionStreamState`` for OpenAI) fed the very same events, its final message read the
way a whole answer is read (``test_llm_answers`` compares that reading with the SDKs' types).
Then whole streams through the real SDKs from raw servers: split anywhere, with comments,
pings and events Chorus does not know; an in-band error; events that are not events; and the
connection kept after an OpenAI stream's ``[DONE]``.
"""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import RawMessageStreamEvent
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

from bot.llm import anthropic as anthropic_provider
from bot.llm import anthropic_parse, openai_parse
from bot.llm.anthropic import AnthropicProvider
from bot.llm.anthropic_parse import parse_message
from bot.llm.errors import MalformedAnswer, ProviderRequestError, event_object
from bot.llm.openai import OpenAIProvider, sdk_client
from bot.llm.openai_parse import parse_completion
from bot.llm.types import LLMRequest, LLMResponse, Message, StreamEvent, TextDelta, TextPart
from bot.resilience import RetryPolicy
from tests.raw_server import Script, serve

MESSAGE_EVENTS: list[dict[str, Any]] = [
    {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 120, "output_tokens": 1, "cache_read_input_tokens": 1500},
        },
    },
    {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "thinking", "thinking": "", "signature": ""},
    },
    {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "thinking_delta", "thinking": "con"},
    },
    {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "thinking_delta", "thinking": "sider"},
    },
    {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "signature_delta", "signature": "sig-1"},
    },
    {"type": "content_block_stop", "index": 0},
    {
        "type": "content_block_start",
        "index": 1,
        "content_block": {"type": "redacted_thinking", "data": "opaque"},
    },
    {"type": "content_block_stop", "index": 1},
    {"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "Let me "}},
    {"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "look."}},
    {"type": "content_block_stop", "index": 2},
    {
        "type": "content_block_start",
        "index": 3,
        "content_block": {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {}},
    },
    {
        "type": "content_block_delta",
        "index": 3,
        "delta": {"type": "input_json_delta", "partial_json": '{"q": "du'},
    },
    {
        "type": "content_block_delta",
        "index": 3,
        "delta": {"type": "input_json_delta", "partial_json": 'cks", "n": 3}'},
    },
    {"type": "content_block_stop", "index": 3},
    {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"output_tokens": 33, "cache_creation_input_tokens": 7},
    },
    {"type": "message_stop"},
]


def test_a_stream_folds_as_the_sdks_accumulator_folds_it() -> None:
    state = anthropic_parse.StreamState(model="asked-for")
    shown = "".join(state.feed(event) for event in MESSAGE_EVENTS)
    snapshot: Any = None
    json_bufs: dict[int, bytes] = {}
    for event in MESSAGE_EVENTS:
        typed = cast(RawMessageStreamEvent, event)
        snapshot = accumulate_event(event=typed, current_snapshot=snapshot, json_bufs=json_bufs)
    sdk = parse_message(snapshot.model_dump_json().encode())
    ours = state.response()
    assert state.stopped and shown == "Let me look."  # thinking is never shown
    assert ours.parts == sdk.parts and len(ours.parts) == 4
    assert (ours.model, ours.stop_reason, ours.raw_stop_reason) == (
        sdk.model,
        sdk.stop_reason,
        sdk.raw_stop_reason,
    )
    assert ours.usage == sdk.usage
    assert (ours.usage.input_tokens, ours.usage.cache_write_tokens) == (120, 7)


CHUNKS: list[dict[str, Any]] = [
    {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test", "choices": [
        {"index": 0, "delta": {"role": "assistant", "content": "Let "}, "finish_reason": None}]},
    {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test", "choices": [
        {"index": 0, "delta": {"content": "me look."}, "finish_reason": None},
        {"index": 1, "delta": {"content": "another choice, never shown"}, "finish_reason": None}]},
    {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test", "choices": [
        {"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
            "function": {"name": "search", "arguments": '{"q": '}}]}, "finish_reason": None}]},
    {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test", "choices": [
        {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"ducks"}'}},
            {"index": 1, "id": "call_b", "type": "function",
             "function": {"name": "clock", "arguments": ""}}]}, "finish_reason": None}]},
    {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test", "choices": [
        {"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test", "choices": [],
     "usage": {"prompt_tokens": 1620, "completion_tokens": 33, "total_tokens": 1653,
               "prompt_tokens_details": {"cached_tokens": 1500}}},
]  # fmt: skip


def test_chunks_fold_as_the_sdks_stream_state_folds_them() -> None:
    state = openai_parse.StreamState(model="asked-for")
    shown = "".join(state.feed(chunk) for chunk in CHUNKS)
    sdk_state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    for chunk in CHUNKS:
        sdk_state.handle_chunk(ChatCompletionChunk.model_validate(chunk))
    final = sdk_state.get_final_completion()
    sdk = parse_completion(final.model_dump_json().encode())
    ours = state.response()
    assert shown == "Let me look."
    assert ours.parts == sdk.parts and len(ours.parts) == 3
    assert (ours.model, ours.stop_reason, ours.raw_stop_reason) == (
        sdk.model,
        sdk.stop_reason,
        sdk.raw_stop_reason,
    )
    assert ours.usage == sdk.usage and ours.usage.cache_read_tokens == 1500


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ("<html>", "not JSON"),
        ("[1]", "not an object"),
        ('{"type": "content_block_delta", "delta": {"type": "text_delta"}}', "without an index"),
        ('{"type": "content_block_start", "index": 0}', "without its content_block"),
        ('{"type": "message_start"}', "without its message"),
    ],
    ids=["html", "list", "no-index", "no-block", "no-message"],
)
def test_what_is_not_a_message_event_is_refused_by_name(data: str, says: str) -> None:
    with pytest.raises(MalformedAnswer, match=says):
        anthropic_parse.StreamState(model="m").feed(event_object(data))


@pytest.mark.parametrize(
    ("chunk", "says"),
    [({"object": "error"}, "without choices"), ({"choices": [{"index": 0, "delta": {"tool_calls": [7]}}]}, "not an object")],
    ids=["no-choices", "bad-call"],
)  # fmt: skip
def test_what_is_not_a_chunk_is_refused_by_name(chunk: dict[str, Any], says: str) -> None:
    with pytest.raises(MalformedAnswer, match=says):
        openai_parse.StreamState(model="m").feed(chunk)


# -- whole streams through the real SDKs ------------------------------------------------------
REQUEST = LLMRequest(model="m", messages=(Message(role="user", parts=(TextPart(text="hi"),)),))


def _sse_answer(body: bytes, cuts: tuple[int, ...] = ()) -> list[bytes]:
    """A chunked 200 ``text/event-stream`` answer whose body goes out in pieces cut at
    ``cuts``, each piece a chunk of its own."""
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    edges = [0, *cuts, len(body)]
    pieces = [body[a:b] for a, b in zip(edges, edges[1:], strict=False) if b > a]
    return [head, *(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces), b"0\r\n\r\n"]


def _message_stream(*extra: bytes) -> bytes:
    lines = [b": keep-alive\n\n", b'event: ping\ndata: {"type": "ping"}\n\n', *extra]
    for event in MESSAGE_EVENTS:
        lines.append(
            b"event: %s\ndata: %s\n\n" % (event["type"].encode(), json.dumps(event).encode())
        )
    return b"".join(lines)


async def _events(provider: AnthropicProvider | OpenAIProvider) -> list[StreamEvent]:
    return [event async for event in provider.stream(REQUEST)]


def _anthropic(url: str, retries: int = 0) -> AnthropicProvider:
    client = anthropic_provider.sdk_client("k", url, 30.0)
    provider = AnthropicProvider(client, base_url=url, retry=RetryPolicy(max_retries=retries))
    provider._owns_client = True
    return provider


async def test_a_stream_split_anywhere_reads_whole() -> None:
    unknown = b'event: content_block_future\ndata: {"type": "content_block_future"}\n\n'
    # the SDK's stream passes on only named events; an unnamed one is not the answer's
    text = {"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "?"}}
    unnamed = b"data: %s\n\n" % json.dumps(text).encode()
    body = _message_stream(unknown, unnamed).replace(b"\n", b"\r\n")
    script = Script([_sse_answer(body, cuts) for cuts in [(1,), (17, 18, 19), (200, 401, 402)]])
    site = await serve(script)
    provider = _anthropic(site.url)
    async with site.server:
        try:
            for _ in range(3):
                events = await _events(provider)
                final = events[-1]
                assert isinstance(final, LLMResponse)
                assert [e.text for e in events if isinstance(e, TextDelta)] == ["Let me ", "look."]
                assert final.text == "Let me look." and len(final.parts) == 4
                assert final.usage.cache_read_tokens == 1500
        finally:
            await provider.aclose()
    assert len(site.accepted) == 1  # each stream read to its end, the connection kept


async def test_error_events_are_classified_and_what_is_not_an_event_is_not_retried() -> None:
    def error(kind: str, message: str) -> bytes:
        body = {"type": "error", "error": {"type": kind, "message": message}}
        return b"event: error\ndata: %s\n\n" % json.dumps(body).encode()

    script = Script(
        [
            _sse_answer(error("invalid_request_error", "prompt is too long")),
            _sse_answer(b": hi\n\n" + error("overloaded_error", "Overloaded")),
            _sse_answer(_message_stream()),
            _sse_answer(b"event: message_start\ndata: <html>\n\n"),
            _sse_answer(_message_stream()),
        ]
    )
    site = await serve(script)
    provider = _anthropic(site.url, retries=2)
    async with site.server:
        try:
            with pytest.raises(ProviderRequestError, match="invalid_request_error: prompt is"):
                await _events(provider)
            assert len(script.requests) == 1
            events = await _events(provider)  # overloaded, then answered on the retry
            assert isinstance(events[-1], LLMResponse) and events[-1].text == "Let me look."
            assert len(script.requests) == 3
            with pytest.raises(ProviderRequestError, match="not JSON") as err:
                await _events(provider)
        finally:
            await provider.aclose()
    assert isinstance(err.value.__cause__, MalformedAnswer)
    assert len(script.requests) == 4  # not retried: the same request would get the same


async def test_an_openai_stream_ends_at_done_and_keeps_its_connection() -> None:
    body = b": comment\n\n" + _done(CHUNKS)
    after_done = body + b'data: {"choices": "never read"}\n\n'
    script = Script([_sse_answer(body, (5, 300)), _sse_answer(after_done)])
    site = await serve(script)
    client = sdk_client("k", site.url, 30.0)
    provider = OpenAIProvider(client, base_url=site.url, retry=RetryPolicy(max_retries=0))
    async with site.server:
        try:
            for _ in range(2):
                events = [event async for event in provider.stream(REQUEST)]
                final = events[-1]
                assert isinstance(final, LLMResponse)
                assert final.text == "Let me look." and final.stop_reason == "tool_use"
                assert [p.name for p in final.tool_calls] == ["search", "clock"]
        finally:
            await client.close()
    assert len(site.accepted) == 1  # read to the end after [DONE]: one connection for both


async def test_an_openai_error_inside_a_stream_is_classified_by_its_kind() -> None:
    error = {"error": {"message": "The server had an error", "type": "server_error"}}
    refused = {"error": {"message": "Bad things", "type": "invalid_request_error"}}
    script = Script(
        [
            _sse_answer(b"data: %s\n\n" % json.dumps(error).encode()),
            _sse_answer(_done(CHUNKS)),
            _sse_answer(b"data: %s\n\n" % json.dumps(refused).encode()),
        ]
    )
    site = await serve(script)
    client = sdk_client("k", site.url, 30.0)
    provider = OpenAIProvider(client, base_url=site.url, retry=RetryPolicy(max_retries=2))
    async with site.server:
        try:
            events = [event async for event in provider.stream(REQUEST)]
            assert isinstance(events[-1], LLMResponse) and len(script.requests) == 2
            with pytest.raises(ProviderRequestError, match="Bad things"):
                _ = [event async for event in provider.stream(REQUEST)]
        finally:
            await client.close()
    assert len(script.requests) == 3


def _done(chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(b"data: %s\n\n" % json.dumps(c).encode() for c in chunks) + b"data: [DONE]\n\n"
