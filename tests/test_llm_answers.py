"""Whole answers read off their JSON: ``anthropic_parse.parse_message`` and
``openai_parse.parse_completion``.

The providers no longer let the SDKs build their answer types (``Message``, ``ChatCompletion``)
from a whole answer; they read the JSON themselves. Here: every field read, compared with what
the SDK's own types say of the same body (so a field read wrongly or not at all shows), and
answers that are not the vendor's answer at all, through the real SDK from a raw server, which
must fail clearly, once, without a retry.
"""

from __future__ import annotations

import json
from typing import cast

import anthropic
import openai
import pytest
from anthropic._models import construct_type
from openai._models import construct_type as openai_construct
from openai.types.chat import ChatCompletion

from bot.llm.anthropic import AnthropicProvider
from bot.llm.anthropic_parse import parse_message
from bot.llm.errors import MalformedAnswer, ProviderRequestError
from bot.llm.openai import OpenAIProvider
from bot.llm.openai_parse import parse_completion
from bot.llm.types import LLMRequest, Message, TextPart, ThinkingPart, ToolCallPart
from bot.resilience import RetryPolicy
from tests.raw_server import Script, serve

RICH = {
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [
        {"type": "thinking", "thinking": "consider", "signature": "sig-1"},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "text", "text": "Let me look."},
        {"type": "text", "text": ""},
        {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"q": "ducks", "n": 3}},
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 120,
        "output_tokens": 33,
        "cache_creation_input_tokens": 7,
        "cache_read_input_tokens": 1500,
    },
}


def test_every_field_read_agrees_with_the_sdks_own_types() -> None:
    body = json.dumps(RICH).encode()
    sdk = cast(anthropic.types.Message, construct_type(type_=anthropic.types.Message, value=RICH))
    read = parse_message(body)
    assert read.model == sdk.model and read.raw_stop_reason == sdk.stop_reason
    assert read.stop_reason == "tool_use"
    assert (read.usage.input_tokens, read.usage.output_tokens) == (
        sdk.usage.input_tokens,
        sdk.usage.output_tokens,
    )
    assert (read.usage.cache_write_tokens, read.usage.cache_read_tokens) == (
        sdk.usage.cache_creation_input_tokens,
        sdk.usage.cache_read_input_tokens,
    )
    tool = next(b for b in sdk.content if isinstance(b, anthropic.types.ToolUseBlock))
    thinking = next(b for b in sdk.content if isinstance(b, anthropic.types.ThinkingBlock))
    assert read.parts == (
        ThinkingPart(text=thinking.thinking, signature=thinking.signature, vendor="anthropic"),
        ThinkingPart(text="", signature="opaque", redacted=True, vendor="anthropic"),
        TextPart(text="Let me look."),  # the empty text block is dropped
        ToolCallPart(id=tool.id, name=tool.name, arguments=dict(tool.input)),
    )  # a block type Chorus does not know (server_tool_use) is skipped


def test_an_answer_without_usage_or_stop_reason_reads_as_zero_and_other() -> None:
    bare = {"model": "m", "content": [{"type": "text", "text": "hi"}]}
    read = parse_message(json.dumps(bare).encode())
    assert read.text == "hi" and read.stop_reason == "other" and read.usage.input_tokens == 0


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"<html>Bad gateway</html>", "not JSON"),
        (b'{"type": "message", "role": "assistant"}', "no content list"),
        (b"[1, 2]", "no content list"),
        (b'{"content": [{"type": "tool_use", "name": "search", "input": {}}]}', "without id"),
    ],
    ids=["html", "no-content", "not-an-object", "tool-without-id"],
)
def test_what_is_not_a_message_is_refused_by_name(body: bytes, says: str) -> None:
    with pytest.raises(MalformedAnswer, match=says):
        parse_message(body)


@pytest.mark.parametrize("vendor", ["anthropic", "openai"])
async def test_a_200_that_is_not_an_answer_fails_once_and_clearly(vendor: str) -> None:
    page = b"<html>the proxy says hello</html>"
    answer = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s"
    script = Script([[answer % (len(page), page)]] * 3)
    site = await serve(script)
    retry = RetryPolicy(max_retries=2)
    client: anthropic.AsyncAnthropic | openai.AsyncOpenAI
    if vendor == "anthropic":
        client = anthropic.AsyncAnthropic(api_key="k", base_url=site.url, max_retries=0)
        provider: AnthropicProvider | OpenAIProvider = AnthropicProvider(
            client, base_url=site.url, retry=retry
        )
    else:
        client = openai.AsyncOpenAI(api_key="k", base_url=site.url, max_retries=0)
        provider = OpenAIProvider(client, base_url=site.url, retry=retry)
    request = LLMRequest(model="m", messages=(Message(role="user", parts=(TextPart(text="hi"),)),))
    async with site.server:
        try:
            with pytest.raises(ProviderRequestError, match="the answer is not JSON") as err:
                await provider.complete(request)
        finally:
            await client.close()
    assert isinstance(err.value.__cause__, MalformedAnswer)
    assert len(script.requests) == 1  # not retried: the same request would get the same page


# -- OpenAI -----------------------------------------------------------------------------------
COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-test-2026",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": "Let me look.",
                "refusal": None,
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "search", "arguments": '{"q": "ducks"}'},
                    },
                    {"type": "custom", "id": "c", "custom": {"name": "grammar", "input": "x"}},
                    {"id": "", "type": "function", "function": {"name": "time", "arguments": ""}},
                ],
            },
        }
    ],
    "usage": {
        "prompt_tokens": 1620,
        "completion_tokens": 33,
        "total_tokens": 1653,
        "prompt_tokens_details": {"cached_tokens": 1500},
    },
}


def test_every_completion_field_read_agrees_with_the_sdks_own_types() -> None:
    sdk = cast(ChatCompletion, openai_construct(type_=ChatCompletion, value=COMPLETION))
    read = parse_completion(json.dumps(COMPLETION).encode(), "asked-for")
    assert sdk.usage is not None and sdk.usage.prompt_tokens_details is not None
    cached = sdk.usage.prompt_tokens_details.cached_tokens
    assert read.usage.cache_read_tokens == cached
    assert read.usage.input_tokens == sdk.usage.prompt_tokens - (cached or 0)
    assert read.usage.output_tokens == sdk.usage.completion_tokens
    assert (read.model, read.raw_stop_reason) == (sdk.model, sdk.choices[0].finish_reason)
    assert read.stop_reason == "tool_use"
    calls = [c for c in sdk.choices[0].message.tool_calls or () if c.type == "function"]
    assert read.parts == (
        TextPart(text=str(sdk.choices[0].message.content)),
        ToolCallPart(id=calls[0].id, name=calls[0].function.name, arguments={"q": "ducks"}),
        ToolCallPart(id="call_2", name=calls[1].function.name, arguments={}),  # no id: by index
    )  # the custom tool's call is skipped


def test_a_refusal_without_choices_or_usage_reads_as_such() -> None:
    refused = {"model": "", "choices": [{"message": {"content": None, "refusal": "No."}}]}
    read = parse_completion(json.dumps(refused).encode(), "asked-for")
    assert (read.text, read.stop_reason, read.model) == ("No.", "refusal", "asked-for")
    empty = parse_completion(b'{"model": "m", "choices": []}')
    assert (empty.parts, empty.stop_reason, empty.usage.input_tokens) == ((), "other", 0)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"upstream timed out", "not JSON"),
        (b'{"object": "error"}', "no choices list"),
        (b'{"choices": [{"index": 0}]}', "no message"),
        (b'{"choices": [{"message": {"tool_calls": [{"type": "function"}]}}]}', "function name"),
    ],
    ids=["text", "no-choices", "no-message", "call-without-name"],
)
def test_what_is_not_a_completion_is_refused_by_name(body: bytes, says: str) -> None:
    with pytest.raises(MalformedAnswer, match=says):
        parse_completion(body)
