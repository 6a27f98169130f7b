"""Anthropic's whole answers, read off their JSON (``anthropic_parse.parse_message``).

The provider no longer lets the SDK build its ``Message`` type from a whole answer; it reads
the JSON itself. Here: every field it reads, compared with what the SDK's own types say of the
same body (so a field read wrongly or not at all shows), and answers that are not a message at
all, through the real SDK from a raw server, which must fail clearly, once, without a retry.
"""

from __future__ import annotations

import json
from typing import cast

import anthropic
import pytest
from anthropic._models import construct_type

from bot.llm.anthropic import AnthropicProvider
from bot.llm.anthropic_parse import MalformedAnswer, parse_message
from bot.llm.errors import ProviderRequestError
from bot.llm.types import LLMRequest, Message, TextPart, ThinkingPart, ToolCallPart
from bot.resilience import RetryPolicy
from tests.netio_rig import Script, serve

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


async def test_a_200_that_is_not_a_message_fails_once_and_clearly() -> None:
    page = b"<html>the proxy says hello</html>"
    answer = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s"
    script = Script([[answer % (len(page), page)]] * 3)
    site = await serve(script)
    client = anthropic.AsyncAnthropic(api_key="k", base_url=site.url, max_retries=0)
    provider = AnthropicProvider(client, base_url=site.url, retry=RetryPolicy(max_retries=2))
    request = LLMRequest(model="m", messages=(Message(role="user", parts=(TextPart(text="hi"),)),))
    async with site.server:
        try:
            with pytest.raises(ProviderRequestError, match="the answer is not JSON") as err:
                await provider.complete(request)
        finally:
            await client.close()
    assert isinstance(err.value.__cause__, MalformedAnswer)
    assert len(script.requests) == 1  # not retried: the same request would get the same page
