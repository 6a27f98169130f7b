"""``bot.llm.gemini_wire`` against google-genai's own ``generate_content``, on one loopback API.

The provider writes the REST JSON itself and sends it through the SDK client's request layer
(private internals). These tests pin what that must keep: the bytes on the wire (body, path,
query, headers) are exactly what ``generate_content`` / ``generate_content_stream`` send for the
same request, the answers handed on are the very JSON the SDK read (``tests/
test_gemini_answers.py`` proves they fold as the SDK's objects did), and the internals used
still exist with the signatures relied on. The SDK-typed request that ``bot.llm.gemini`` built before
(``_sdk_request`` below) lives on here only as the reference.
"""

from __future__ import annotations

import base64
import inspect
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from google import genai
from google.genai import _api_client, _transformers, models, types

from bot.llm import gemini_wire
from bot.llm.gemini import GeminiProvider
from bot.llm.types import (
    CachePoint,
    ImagePart,
    LLMRequest,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
)
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


# -- the reference: the SDK-typed request bot.llm.gemini built before gemini_wire -------------
def _sdk_request(request: LLMRequest) -> tuple[list[types.Content], types.GenerateContentConfig]:
    system = [types.Part(text=p.text) for p in request.system if isinstance(p, TextPart)]
    tools: types.ToolListUnion | None = None
    if request.tools:
        declarations = [
            types.FunctionDeclaration(
                name=t.name, description=t.description, parameters_json_schema=t.parameters
            )
            for t in request.tools
        ]
        tools = [types.Tool(function_declarations=declarations)]
    thinking = None
    limit = request.max_tokens
    if request.reasoning != "off":
        budget = gemini_wire.THINKING_BUDGETS[request.reasoning]
        thinking = types.ThinkingConfig(thinking_budget=budget)
        limit += budget
    structured = request.response_schema is not None
    config = types.GenerateContentConfig(
        system_instruction=types.Content(parts=system) if system else None,
        tools=tools,
        max_output_tokens=limit,
        temperature=request.temperature,
        thinking_config=thinking,
        response_mime_type="application/json" if structured else None,
        response_json_schema=request.response_schema,
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        automatic_continuation=False,
    )
    contents = []
    for message in request.messages:
        role = "model" if message.role == "assistant" else "user"
        parts = _sdk_parts(message.parts, signed=role == "model")
        if parts:
            contents.append(types.Content(role=role, parts=parts))
    return contents, config


def _sdk_parts(parts: tuple[Part, ...], *, signed: bool) -> list[types.Part]:
    out: list[types.Part] = []
    for part in parts:
        if isinstance(part, TextPart):
            out.append(types.Part(text=part.text))
        elif isinstance(part, ToolCallPart):
            signature = gemini_wire._signature(part.signature) if signed else None
            if signed and signature is None and not any(p.function_call for p in out):
                signature = gemini_wire.PLACEHOLDER_SIGNATURE
            call = types.FunctionCall(id=part.id, name=part.name, args=dict(part.arguments))
            out.append(types.Part(function_call=call, thought_signature=signature))
        elif isinstance(part, ThinkingPart):
            if signed and part.vendor == "gemini":
                signature = gemini_wire._signature(part.signature)
                if part.text:
                    out.append(
                        types.Part(text=part.text, thought=True, thought_signature=signature)
                    )
                elif signature is not None:
                    last = out[-1] if out else None
                    if last is not None and last.text is not None and not last.thought_signature:
                        out[-1] = last.model_copy(update={"thought_signature": signature})
                    else:
                        out.append(types.Part(text="", thought_signature=signature))
        elif isinstance(part, ToolResultPart):
            key = "error" if part.is_error else "result"
            response = types.FunctionResponse(
                id=part.call_id, name=part.name, response={key: part.content}
            )
            out.append(types.Part(function_response=response))
        elif isinstance(part, ImagePart):
            if part.data is not None:
                out.append(types.Part(inline_data=types.Blob(mime_type=part.mime, data=part.data)))
            elif part.url:
                out.append(
                    types.Part(file_data=types.FileData(file_uri=part.url, mime_type=part.mime))
                )
            else:
                out.append(types.Part(text="[an image that could not be attached]"))
    return out


def _same_request(ours: Recorded, theirs: Recorded) -> None:
    assert (ours.method, ours.path, ours.query) == (theirs.method, theirs.path, theirs.query)
    assert ours.headers == theirs.headers  # key, client headers, timeout, content type
    assert ours.body == theirs.body


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
    contents, config = _sdk_request(request)

    await client.aio.models.generate_content(model=MODEL, contents=contents, config=config)
    await GeminiProvider(client, base_url=server.base_url, retry=RETRY).complete(request)

    theirs, ours = server.requests
    _same_request(ours, theirs)
    assert server.raw[1] == server.raw[0]
    assert ours.path.endswith(f"/models/{MODEL}:generateContent")


async def test_a_stream_sends_the_bytes_generate_content_stream_sends(
    server: RawGeminiServer, client: genai.Client
) -> None:
    request = _rich_request()
    contents, config = _sdk_request(request)

    stream = await client.aio.models.generate_content_stream(
        model=MODEL, contents=contents, config=config
    )
    _ = [chunk async for chunk in stream]
    await collect(GeminiProvider(client, base_url=server.base_url, retry=RETRY), request)

    theirs, ours = server.requests
    _same_request(ours, theirs)
    assert server.raw[1] == server.raw[0]
    assert ours.query == {"alt": "sse"}


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
    contents, config = _sdk_request(request)
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
    contents, config = _sdk_request(request)
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


@pytest.mark.parametrize(
    "model", ["gemini-2.5-flash", "models/gemini-3-pro", "tunedModels/123", "a..b", "x?y", ""]
)
def test_model_paths_are_the_sdks(client: genai.Client, model: str) -> None:
    try:
        expected = _transformers.t_model(client.aio._api_client, model)
    except ValueError as exc:
        with pytest.raises(ValueError, match=str(exc)):
            gemini_wire.model_path(model)
    else:
        assert gemini_wire.model_path(model) == expected


# -- the private SDK internals gemini_wire relies on ------------------------------------------
def test_the_sdk_internals_gemini_wire_uses_are_still_there(client: genai.Client) -> None:
    """If this fails, a google-genai upgrade (pinned in constraints.txt) moved what
    ``bot.llm.gemini_wire`` calls: re-read ``AsyncModels._generate_content`` and adapt."""
    api = client.aio._api_client
    assert isinstance(api, _api_client.BaseApiClient)
    for name in ("async_request", "_build_request"):
        assert list(inspect.signature(getattr(api, name)).parameters) == [
            "http_method",
            "path",
            "request_dict",
            "http_options",
        ]
    assert inspect.iscoroutinefunction(api.async_request)
    assert inspect.iscoroutinefunction(api._async_request)
    assert list(inspect.signature(api._async_request).parameters) == [
        "http_request",
        "http_options",
        "stream",
    ]
    assert inspect.isasyncgenfunction(_api_client.HttpResponse.async_segments)
    # what gemini_wire.generate_stream does in place of async_request_streamed is still all
    # that it does on top of _async_request: raise an in-band error, hand the chunk on
    source = inspect.getsource(_api_client.BaseApiClient.async_request_streamed)
    assert "self._async_request(" in source and "stream=True" in source
    assert "errors.APIError.raise_error_async(" in source
    # the converter whose output gemini_wire writes by hand is still how the SDK builds it
    source = inspect.getsource(models.AsyncModels._generate_content)
    assert "_GenerateContentParameters_to_mldev" in source
    assert "'{model}:generateContent'" in source
