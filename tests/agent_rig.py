"""Shared rig for tool-loop tests: a provider of each vendor, through its real SDK, against
its loopback server, plus helpers that read tool results back out of each wire format."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from bot.events import Author, ChatMessage, ConversationKey, Role
from bot.llm.base import SDKProvider
from bot.llm.registry import build_provider
from bot.resilience import RetryPolicy
from bot.settings import LLMSettings
from bot.tools.base import ToolContext
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.base import LoopbackServer
from tests.loopback.gemini_server import GeminiServer
from tests.loopback.openai_server import OpenAIServer

VENDORS = ("anthropic", "openai", "gemini")
_SERVERS: dict[str, type[LoopbackServer]] = {
    "anthropic": AnthropicServer,
    "openai": OpenAIServer,
    "gemini": GeminiServer,
}
_ENV = {
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "claude-test"),
    "openai": ("OPENAI_API_KEY", "OPENAI_BASE_URL", "gpt-test"),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL", "gemini-test"),
}


@asynccontextmanager
async def vendor_rig(vendor: str) -> AsyncIterator[tuple[Any, SDKProvider, str]]:
    """(server, provider, model) for ``vendor``; retries off so each script item is one call."""
    server: Any = _SERVERS[vendor]()
    await server.start()
    key_env, url_env, model = _ENV[vendor]
    settings = LLMSettings.model_validate(
        {"CHORUS_MODEL": f"{vendor}:{model}", key_env: "k-test", url_env: server.base_url}
    )
    provider = build_provider(settings.model_spec(), settings, retry=RetryPolicy(max_retries=0))
    try:
        yield server, provider, model  # type: ignore[misc]
    finally:
        await provider.aclose()
        await server.close()


def refusal_reply(vendor: str) -> dict[str, Any]:
    if vendor == "gemini":
        return {"text": "", "finish": "SAFETY"}
    if vendor == "openai":
        return {"text": "", "refusal": "I can't help with that."}
    return {"text": "", "stop": "refusal"}


_ENVELOPE = re.compile(
    r'^(ERROR: )?<tool_output tool="[^"]*" trust="untrusted">\n(.*)\n</tool_output>$', re.DOTALL
)


def unwrap(content: str) -> str:
    """A tool result's own text, without the untrusted-data envelope the agent adds
    (``bot.agent.loop.untrusted``); anything else unchanged."""
    found = _ENVELOPE.match(content)
    return f"{found[1] or ''}{found[2]}" if found else content


def tool_results(vendor: str, body: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(call id or name, content without its envelope, is_error) of every tool result in a
    request body."""
    found: list[tuple[str, str, bool]] = []
    if vendor == "anthropic":
        for message in body["messages"]:
            for block in message["content"] if isinstance(message["content"], list) else []:
                if block.get("type") == "tool_result":
                    content = block["content"]
                    if isinstance(content, list):
                        content = "".join(c.get("text", "") for c in content)
                    found.append((block["tool_use_id"], content, bool(block.get("is_error"))))
    elif vendor == "openai":
        for message in body["messages"]:
            if message["role"] == "tool":
                content = message["content"]
                found.append((message["tool_call_id"], content, content.startswith("ERROR: ")))
    else:
        for content in body["contents"]:
            for part in content.get("parts", []):
                response = part.get("functionResponse") or part.get("function_response")
                if response:
                    payload = response.get("response", {})
                    is_error = "error" in payload
                    text = str(payload.get("error") if is_error else payload.get("result"))
                    found.append((response.get("id") or response["name"], text, is_error))
    return [(who, unwrap(text), is_error) for who, text, is_error in found]


def context(roles: frozenset[Role] = frozenset()) -> ToolContext:
    message = ChatMessage(
        platform="console",
        id="m1",
        conversation=ConversationKey(platform="console", channel="c"),
        author=Author(id="u1", display_name="Ada", roles=roles),
        text="hi",
        is_direct=True,
    )
    return ToolContext(message=message)
