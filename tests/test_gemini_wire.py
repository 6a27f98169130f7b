"""``bot.llm.gemini_wire`` against google-genai's own typed ``generate_content``, on one
loopback API.

The provider writes the REST JSON itself and hands it to the public ``generate_content`` in
``HttpOptions.extra_body``. These tests pin what that must keep: the request on the wire (body,
path, query, headers) is what ``generate_content`` / ``generate_content_stream`` send for the
same typed request (the body the same JSON, in the same number of bytes; only the order of its
top-level keys may differ), the answers handed on are the very JSON the SDK read
(``tests/test_gemini_answers.py`` proves they fold as the SDK's objects did), and each call is
one request (the SDK's automatic continuation off). The SDK-typed request (``tests/gemini_typed.py``)
is the reference.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from google import genai
from google.genai import models, types

from bot.llm import gemini_wire
from bot.llm.gemini import GeminiProvider
from bot.llm.types import (
    CachePoint,
    ImagePart,
    LLMRequest,
    Message,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
)
from tests.gemini_typed import sdk_request, typed_from_body
from tests.loopback.base import Recorded
from tests.loopback.gemini_server import GeminiServer
from tests.provider_rig import RETRY, collect
from tests.provider_vendors import gemini_client

MODEL = "gemini-2.5-flash"
SIG = base64.b64encode(b"\x12\x34opaque-signature\xff\xfe").decode()
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


class RawGeminiServer(GeminiServer):
    """Keeps each request's body bytes too, so two senders can be compared byte for byte."""

    def __init__(self) -> None:
        super().__init__()
        self.raw: list[bytes] = []

    async def record(self, request: web.Request) -> Recorded:
        rec = await super().record(request)
        self.raw.append(await request.read())  # aiohttp keeps the body it already read
        return rec


@pytest.fixture
async def server() -> AsyncIterator[RawGeminiServer]:
    async with RawGeminiServer() as srv:
        yield srv


@pytest.fixture
async def client(server: RawGeminiServer) -> AsyncIterator[genai.Client]:
    built = gemini_client(server.base_url)
    yield built
    await built.aio.aclose()
    built.close()


def _rich_request(**fields: Any) -> LLMRequest:
    """Everything ``bot.llm.gemini`` can put on the wire, in one request."""
    tools = (
        ToolSpec(name="lookup", description="Look a thing up.", parameters=SCHEMA),
        ToolSpec(name="now", description="The time.", parameters={"type": "object"}),
    )
    history = (
        Message.user("look up a and b — ünïcode"),
        Message(
            role="assistant",
            parts=(
                ThinkingPart(text="I should look.", signature=SIG, vendor="gemini"),
                TextPart(text="Checking."),
                ThinkingPart(signature=SIG, vendor="gemini"),
                ToolCallPart(id="fc_1", name="lookup", arguments={"q": "a"}, signature=SIG),
                ToolCallPart(id="call_1", name="lookup", arguments={"q": "b", "n": None}),
            ),
        ),
        Message(
            role="user",
            parts=(
                ToolResultPart(call_id="fc_1", name="lookup", content="found a"),
                ToolResultPart(call_id="call_1", name="lookup", content="boom", is_error=True),
                CachePoint(),
            ),
        ),
        Message(
            role="assistant",
            parts=(
                ThinkingPart(text="a claude thought", signature="sig-A", vendor="anthropic"),
                ThinkingPart(signature="%%not-base64%%", vendor="gemini"),
                ToolCallPart(id="call_2", name="now", arguments={}),
            ),
        ),
        Message(role="user", parts=(ToolResultPart(call_id="call_2", name="now", content="noon"),)),
        Message(role="assistant", parts=(CachePoint(),)),  # no parts left: not sent
        Message(
            role="user",
            parts=(
                TextPart(text="and these?"),
                ImagePart(mime="image/png", data=b"\x89PNG\xff\xfe-bytes"),
                ImagePart(mime="image/jpeg", url="https://cdn.example/cat.jpg"),
                ImagePart(),
            ),
        ),
    )
    values: dict[str, Any] = {
        "model": MODEL,
        "system": (TextPart(text="You are Chorus."), CachePoint(), TextPart(text="Be brief.")),
        "messages": history,
        "tools": tools,
        "max_tokens": 321,
        "temperature": 0.25,
        "response_schema": SCHEMA,
        "reasoning": "medium",
    }
    return LLMRequest.model_validate({**values, **fields})


def _same_request(server: RawGeminiServer) -> None:
    """The two requests ``server`` received (``generate_content``'s, then the provider's) are
    the same: path, query, headers (key, client headers, timeout, length) and JSON body."""
    (theirs, ours), (their_bytes, our_bytes) = server.requests, server.raw
    assert (ours.method, ours.path, ours.query) == (theirs.method, theirs.path, theirs.query)
    assert ours.headers == theirs.headers
    assert ours.body == theirs.body and json.loads(our_bytes) == json.loads(their_bytes)
    assert len(our_bytes) == len(their_bytes)


# -- the wire ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "fields",
    [{}, {"reasoning": "off", "temperature": None, "response_schema": None, "tools": ()}],
    ids=["rich", "plain"],
)
async def test_a_completion_sends_the_bytes_generate_content_sends(
    server: RawGeminiServer, client: genai.Client, fields: dict[str, Any]
) -> None:
    request = _rich_request(**fields)
    contents, config = sdk_request(request)

    await client.aio.models.generate_content(model=MODEL, contents=contents, config=config)
    await GeminiProvider(client, base_url=server.base_url, retry=RETRY).complete(request)

    _same_request(server)
    assert server.requests[1].path.endswith(f"/models/{MODEL}:generateContent")


async def test_a_stream_sends_the_bytes_generate_content_stream_sends(
    server: RawGeminiServer, client: genai.Client
) -> None:
    request = _rich_request()
    contents, config = sdk_request(request)

    stream = await client.aio.models.generate_content_stream(
        model=MODEL, contents=contents, config=config
    )
    _ = [chunk async for chunk in stream]
    await collect(GeminiProvider(client, base_url=server.base_url, retry=RETRY), request)

    _same_request(server)
    assert server.requests[1].query == {"alt": "sse"}


async def test_a_body_read_back_into_the_sdks_types_sends_the_same_json(
    server: RawGeminiServer, client: genai.Client
) -> None:
    """What ``bench.overhead``'s bare SDK replays: Chorus's request, read back into the types."""
    request = _rich_request(
        messages=(Message.user("a question"), Message.assistant("an answer"), Message.user("?")),
        reasoning="low",
    )
    await collect(GeminiProvider(client, base_url=server.base_url, retry=RETRY), request)
    contents, config = typed_from_body(server.bodies[0])
    stream = await client.aio.models.generate_content_stream(
        model=MODEL, contents=contents, config=config
    )
    _ = [chunk async for chunk in stream]
    _same_request(server)


# -- the answers ------------------------------------------------------------------------------
REPLY = {
    "thought": "Thinking it over.",
    "text": "Let me check both.",
    "signature": SIG,
    "tool_calls": [{"id": "fc_9", "name": "lookup", "arguments": {"q": "a"}}],
    "usage": {"cachedContentTokenCount": 3, "thoughtsTokenCount": 5},
}


def _dump(response: types.GenerateContentResponse) -> dict[str, Any]:
    """All but the transport's headers and the id the loopback API numbers per request."""
    return response.model_dump(exclude={"sdk_http_response", "response_id"}, exclude_none=True)


def _as_sdk_read(answer: dict[str, Any]) -> types.GenerateContentResponse:
    """An answer's JSON read the way ``generate_content`` reads it (the SDK's own reading)."""
    fields = models._GenerateContentResponse_from_mldev(answer, None, None)
    return types.GenerateContentResponse._from_response(response=fields, kwargs={})


async def test_a_response_is_handed_on_as_the_json_the_sdk_read(
    server: RawGeminiServer, client: genai.Client
) -> None:
    request = _rich_request(response_schema=None)
    contents, config = sdk_request(request)
    server.replies.extend([REPLY, REPLY])

    theirs = await client.aio.models.generate_content(model=MODEL, contents=contents, config=config)
    answer = await gemini_wire.generate(client, MODEL, gemini_wire.request_body(request))
    ours = _as_sdk_read(answer)

    assert _dump(ours) == _dump(theirs)
    assert ours.candidates and ours.candidates[0].content  # not two empty answers
    assert answer["usageMetadata"]["thoughtsTokenCount"] == 5


async def test_stream_chunks_are_handed_on_as_the_json_the_sdk_read(
    server: RawGeminiServer, client: genai.Client
) -> None:
    request = _rich_request(response_schema=None)
    contents, config = sdk_request(request)
    server.replies.extend([REPLY, REPLY])

    stream = await client.aio.models.generate_content_stream(
        model=MODEL, contents=contents, config=config
    )
    theirs = [_dump(chunk) async for chunk in stream]
    body = gemini_wire.request_body(request)
    chunks = gemini_wire.generate_stream(client, MODEL, body)
    ours = [_dump(_as_sdk_read(chunk)) async for chunk in chunks]

    assert ours == theirs
    assert len(ours) > 2  # thought, text pieces, and the calls with the finish reason


async def test_no_contents_is_refused_before_any_io_like_the_sdk(
    server: RawGeminiServer, client: genai.Client
) -> None:
    request = LLMRequest(model=MODEL, messages=(Message(role="user", parts=(CachePoint(),)),))
    with pytest.raises(ValueError, match="contents are required"):
        await client.aio.models.generate_content(model=MODEL, contents=[])
    with pytest.raises(ValueError, match="contents are required"):
        gemini_wire.request_body(request)
    assert server.requests == []


class _ResumableServer(RawGeminiServer):
    """Ends each stream with a chunk the SDK would resume (no finish reason, a token)."""

    async def _stream(
        self, request: web.Request, chunks: list[dict[str, Any]]
    ) -> web.StreamResponse:
        last = chunks[-1]["candidates"][0]
        last.pop("finishReason", None)
        last["continuationToken"] = base64.b64encode(b"resume-here").decode()
        return await super()._stream(request, chunks)


async def test_a_call_is_one_request_where_generate_content_would_continue() -> None:
    """The SDK's automatic continuation would re-send a resumable stream; a provider call is
    one request, its retries ``bot.resilience``'s."""
    async with _ResumableServer() as server:
        client = gemini_client(server.base_url)
        try:
            server.replies.extend(["Hello there.", "Hello there.", "Hello there."])
            stream = await client.aio.models.generate_content_stream(model=MODEL, contents="hi")
            _ = [chunk async for chunk in stream]
            assert len(server.requests) == 2  # the SDK went on with the token
            request = LLMRequest(model=MODEL, messages=(Message.user("hi"),))
            await collect(GeminiProvider(client, base_url=server.base_url, retry=RETRY), request)
            assert len(server.requests) == 3
        finally:
            await client.aio.aclose()
            client.close()
