"""``bot.llm.gemini_parse`` folds Gemini's JSON exactly as a fold over the SDK's objects does.

A whole answer is read off its JSON; a stream's chunks arrive as google-genai's
``GenerateContentResponse`` and are folded by their REST names. ``sdk_read`` (the SDK's own
reading, as ``generate_content`` does it) and ``ReferenceBuilder`` (a fold over the SDK's
objects) in ``tests/gemini_reference.py`` are the reference: every answer below must give the
same ``LLMResponse`` both ways, and what the SDK's validation refuses must be refused as
``MalformedAnswer``.
"""

from __future__ import annotations

import base64
import itertools

import pytest
from aiohttp import web
from pydantic import ValidationError

from bot.llm.errors import MalformedAnswer, ProviderRequestError
from bot.llm.gemini import GeminiProvider
from bot.llm.gemini_parse import ResponseBuilder
from bot.llm.types import (
    LLMRequest,
    Message,
    ThinkingPart,
    ToolCallPart,
    Usage,
)
from tests.gemini_reference import JSON, ReferenceBuilder, both, candidate, sdk_read
from tests.loopback.gemini_server import GeminiServer
from tests.provider_rig import RETRY, collect
from tests.provider_vendors import gemini_client

MODEL = "gemini-2.5-flash"
SIG = base64.urlsafe_b64encode(b"\x12\x34opaque-signature\xff\xfe").decode()


USAGE = {
    "promptTokenCount": 120,
    "cachedContentTokenCount": 100,
    "toolUsePromptTokenCount": 7,
    "candidatesTokenCount": 30,
    "thoughtsTokenCount": 12,
    "totalTokenCount": 169,
}
ANSWERS: dict[str, list[JSON]] = {
    "rich": [
        {
            "candidates": [
                candidate(
                    [
                        {"text": "Weighing it.", "thought": True, "thoughtSignature": SIG},
                        {"text": "Let me "},
                        {"text": "check.", "thoughtSignature": SIG},
                        {"functionCall": {"id": "fc_1", "name": "lookup", "args": {"q": "a"}}},
                        {"functionCall": {"name": "lookup", "args": {"q": ["b", 2]}}},
                        {"functionCall": {"name": "clock"}, "thoughtSignature": SIG},
                    ]
                )
            ],
            "usageMetadata": USAGE,
            "modelVersion": "gemini-2.5-flash-001",
            "responseId": "r1",
        }
    ],
    "a stream with running usage": [
        {"candidates": [candidate([{"text": "Hel"}], None)], "usageMetadata": {}},
        {
            "candidates": [candidate([{"text": "lo "}, {"text": ""}], None)],
            "usageMetadata": {"promptTokenCount": 9},
            "modelVersion": "m-1",
        },
        {"candidates": [candidate([{"text": "there."}])], "usageMetadata": USAGE},
    ],
    "a finish reason, then a chunk of usage alone": [
        {"candidates": [candidate([{"text": "Done."}], "STOP")], "usageMetadata": USAGE},
        {"candidates": [{"content": {"parts": []}}], "usageMetadata": {}},
    ],
    "a blocked prompt": [
        {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 4}}
    ],
    "a thought with only its signature": [
        {
            "candidates": [
                candidate(
                    [
                        {"thought": True, "thoughtSignature": SIG},
                        {"thought": True, "text": ""},
                        {"text": "ok"},
                    ]
                )
            ]
        }
    ],
    "a block reason, then feedback without one": [
        {"promptFeedback": {"blockReason": "OTHER"}},
        {"promptFeedback": {}, "candidates": [candidate([{"text": "?"}])]},
    ],
    "no content": [{"candidates": [{"finishReason": "MAX_TOKENS"}]}],
    "a continuation": [{"candidates": [candidate([{"text": "To be "}], "CONTINUATION")]}],
    "null fields": [
        {
            "candidates": [candidate([{"text": None, "thoughtSignature": None}, {"text": "x"}])],
            "usageMetadata": None,
            "modelVersion": None,
            "promptFeedback": None,
        }
    ],
    "an empty answer": [{}],
    "no candidates": [{"candidates": []}],
    "a finish reason the SDK does not know": [{"candidates": [candidate([], "NEW_REASON")]}],
    "an image refusal": [{"candidates": [candidate([], "IMAGE_SAFETY")]}],
    "a refusal mid-stream": [
        {"candidates": [candidate([{"text": "Sure, "}], None)]},
        {"candidates": [candidate([], "RECITATION")]},
    ],
    "calls in two chunks": [
        {"candidates": [candidate([{"functionCall": {"name": "a", "args": {}}}], None)]},
        {"candidates": [candidate([{"functionCall": {"name": "b", "args": {"n": 1}}}])]},
    ],
}


@pytest.mark.parametrize("chunks", ANSWERS.values(), ids=ANSWERS.keys())
def test_every_answer_folds_as_it_did_through_the_sdks_objects(chunks: list[JSON]) -> None:
    theirs, theirs_text, ours, ours_text = both(chunks)
    assert ours == theirs
    assert ours_text == theirs_text


def test_the_reference_answers_are_not_trivial() -> None:
    rich, _, _, _ = both(ANSWERS["rich"])
    kinds = [type(part).__name__ for part in rich.parts]
    assert kinds == [
        "ThinkingPart",
        "TextPart",
        "ThinkingPart",
        "ToolCallPart",
        "ToolCallPart",
        "ToolCallPart",
    ]
    assert [p.id for p in rich.parts if isinstance(p, ToolCallPart)] == ["fc_1", "call_1", "call_2"]
    assert rich.usage == Usage(input_tokens=27, output_tokens=42, cache_read_tokens=100)
    assert (rich.stop_reason, rich.model) == ("tool_use", "gemini-2.5-flash-001")
    blocked, _, _, _ = both(ANSWERS["a blocked prompt"])
    assert (blocked.stop_reason, blocked.raw_stop_reason) == ("refusal", "prompt_blocked:SAFETY")


# -- what the SDK refused -------------------------------------------------------------------
MALFORMED: dict[str, JSON] = {
    "text not a string": {"candidates": [candidate([{"text": 5}])]},
    "thought not a flag": {"candidates": [candidate([{"text": "a", "thought": [True]}])]},
    "args not an object": {"candidates": [candidate([{"functionCall": {"args": [1]}}])]},
    "parts not a list": {"candidates": [{"content": {"parts": {"text": "a"}}}]},
    "a part not an object": {"candidates": [candidate(["text"])]},  # type: ignore[list-item]
    "candidates not a list": {"candidates": {"content": {}}},
    "a count not a number": {"usageMetadata": {"promptTokenCount": "many"}},
    "a count that is a fraction": {"usageMetadata": {"promptTokenCount": 1.5}},
    "a signature not base64": {"candidates": [candidate([{"text": "a", "thoughtSignature": "?"}])]},
    "a model version not a string": {"modelVersion": 3},
    "a block reason not a string": {"promptFeedback": {"blockReason": ["SAFETY"]}},
}


@pytest.mark.parametrize("payload", MALFORMED.values(), ids=MALFORMED.keys())
def test_what_the_sdks_validation_refused_is_a_malformed_answer(payload: JSON) -> None:
    # the SDK's validation refused it, or its reading failed on it
    with pytest.raises((ValidationError, TypeError, AttributeError)):
        ReferenceBuilder("m").observe(sdk_read(payload))
    with pytest.raises(MalformedAnswer):
        ResponseBuilder("m").observe(payload)


STRICTER: dict[str, JSON] = {
    "a flag as a word": {"candidates": [candidate([{"text": "a", "thought": "yes"}])]},
    "a flag as a number": {"candidates": [candidate([{"text": "a", "thought": 1}])]},
    "a candidate not an object": {"candidates": ["x"]},
    "a count as a flag": {"usageMetadata": {"promptTokenCount": True}},
    "a count as a word": {"usageMetadata": {"promptTokenCount": "5"}},
    "a count as a fraction that is whole": {"usageMetadata": {"promptTokenCount": 1.0}},
}


@pytest.mark.parametrize("payload", STRICTER.values(), ids=STRICTER.keys())
def test_what_the_sdk_let_through_in_a_shape_the_api_never_writes_is_refused(
    payload: JSON,
) -> None:
    """Stricter than the SDK on purpose: its lax reading took a flag written as a word or a
    number for ``True``, a count written as a flag, a word or ``1.0`` for a number, and a
    candidate that is a string for an empty one. A server that writes these is not speaking
    Gemini's JSON."""
    ReferenceBuilder("m").observe(sdk_read(payload))  # read without a complaint
    with pytest.raises(MalformedAnswer, match="is not (true or false|a whole number|an object)"):
        ResponseBuilder("m").observe(payload)


def test_signatures_are_read_as_thesdk_reads_them_every_way_they_can_be_written() -> None:
    """Every string of up to four characters from both base64 alphabets, padding, and a
    character of neither: the SDK's bytes (or its refusal) and ours agree on each."""
    refused = 0
    for n in range(1, 5):
        for chars in itertools.product("A/_=+-Q.", repeat=n):
            value = "".join(chars)
            payload = {"candidates": [candidate([{"text": "t", "thoughtSignature": value}])]}
            try:
                theirs: object = _both_ways_reference(payload)
            except ValidationError:
                theirs = "refused"
            try:
                ours: object = ResponseBuilder("m").observe(payload) and _signature(payload)
            except MalformedAnswer:
                ours = "refused"
            assert ours == theirs, value
            refused += theirs == "refused"
    assert 0 < refused < 8**4  # both kinds of value were tried


def _both_ways_reference(payload: JSON) -> str | None:
    builder = ReferenceBuilder("m")
    builder.observe(sdk_read(payload))
    return next((p.signature for p in builder.parts if isinstance(p, ThinkingPart)), None)


def _signature(payload: JSON) -> str | None:
    builder = ResponseBuilder("m")
    builder.observe(payload)
    return next((p.signature for p in builder.parts if isinstance(p, ThinkingPart)), None)


# -- through the provider, from the loopback API --------------------------------------------
REPLIES: list[JSON] = [
    {
        "thought": "Thinking it over.",
        "text": "Let me check both.",
        "signature": SIG,
        "tool_calls": [{"id": "fc_9", "name": "lookup", "arguments": {"q": "a"}}],
        "usage": {"cachedContentTokenCount": 3, "thoughtsTokenCount": 5},
    },
    {"text": "A plain answer in a few words.", "finish": "MAX_TOKENS"},
    {"prompt_block": "PROHIBITED_CONTENT"},
]


@pytest.mark.parametrize("reply", REPLIES, ids=["rich", "cut short", "blocked"])
async def test_the_provider_reads_what_generate_content_read(reply: JSON) -> None:
    server = GeminiServer()
    await server.start()
    try:
        server.replies.extend([reply] * 4)
        client = gemini_client(server.base_url)
        request = LLMRequest(model=MODEL, messages=(Message.user("hi"),))
        provider = GeminiProvider(client, base_url=server.base_url, retry=RETRY)

        whole = ReferenceBuilder(MODEL)
        whole.observe(await client.aio.models.generate_content(model=MODEL, contents="hi"))
        assert await provider.complete(request) == whole.finish_response()

        streamed = ReferenceBuilder(MODEL)
        stream = await client.aio.models.generate_content_stream(model=MODEL, contents="hi")
        theirs_text = [t async for chunk in stream for t in streamed.observe(chunk)]
        texts, final = await collect(provider, request)
        assert (texts, final) == (theirs_text, streamed.finish_response())
        assert final.parts or final.stop_reason == "refusal"  # not two empty answers
    finally:
        await server.close()


async def _refusal(server: GeminiServer, *, streamed: bool) -> MalformedAnswer:
    """What a call to ``server`` was refused for, after one request and no retry."""
    await server.start()
    try:
        provider = GeminiProvider(
            gemini_client(server.base_url), base_url=server.base_url, retry=RETRY
        )
        request = LLMRequest(model=MODEL, messages=(Message.user("hi"),))
        with pytest.raises(ProviderRequestError) as raised:
            if streamed:
                await collect(provider, request)
            else:
                await provider.complete(request)
        assert len(server.requests) == 1  # refused, not retried
    finally:
        await server.close()
    cause = raised.value.__cause__
    assert isinstance(cause, MalformedAnswer)
    return cause


class _OffSchemaChunkServer(GeminiServer):
    """Streams one chunk whose candidate's text is a number, which the SDK's reading refuses."""

    async def _stream(self, request: web.Request, chunks: list[JSON]) -> web.StreamResponse:
        chunk = {"candidates": [{"content": {"parts": [{"text": 5}], "role": "model"}}]}
        return await super()._stream(request, [chunk])


async def test_a_stream_chunk_the_sdk_cannot_read_is_malformed_and_not_retried() -> None:
    refusal = await _refusal(_OffSchemaChunkServer(), streamed=True)
    assert "a gemini stream chunk that is not an answer" in str(refusal)
    assert isinstance(refusal.__cause__, ValidationError)


class _ProxyPageServer(GeminiServer):
    """Answers every call with a proxy's HTML page and a 200."""

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        await self.record(request)
        return web.Response(text="<html>sign in to the proxy</html>", content_type="text/html")


async def test_a_whole_answer_that_is_not_json_is_malformed_and_not_retried() -> None:
    refusal = await _refusal(_ProxyPageServer(), streamed=False)
    assert "a gemini answer that is not JSON: '<html>" in str(refusal)
