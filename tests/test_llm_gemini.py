"""What only Gemini's wire has, through the real google-genai SDK and a loopback Gemini API.

What every vendor shares is the provider contract (``test_provider_contract*.py``). Here: the
``generateContent`` request shape, generated call ids, ``RetryInfo`` and ``API_KEY_INVALID``,
the key variables the SDK reads itself, thinking budgets, thought signatures and their replay,
and the ``responseJsonSchema`` structured-output shape."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest

from bot.llm import guard
from bot.llm.base import SDKProvider
from bot.llm.errors import ProviderAuthError, ProviderRequestError, RealVendorCallBlocked
from bot.llm.gemini import GeminiProvider
from bot.llm.types import (
    CachePoint,
    ImagePart,
    LLMRequest,
    LLMResponse,
    Message,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
)
from bot.settings import ConfigError, LLMSettings
from tests.loopback.gemini_server import GeminiServer, error_info, retry_info
from tests.provider_rig import RETRY, RecordingSleep, answer, collect
from tests.provider_rig import ask as ask_vendor
from tests.provider_vendors import GEMINI, Vendor, gemini_client

MODEL = GEMINI.model


@pytest.fixture
def vendor() -> Vendor:
    return GEMINI


def _request(text: str = "hello", **fields: Any) -> LLMRequest:
    return ask_vendor(GEMINI, text, **fields)


# -- the request ---------------------------------------------------------------------------
async def test_a_stream_asks_for_server_sent_events(
    provider: SDKProvider, server: GeminiServer
) -> None:
    await collect(provider, _request())
    (rec,) = server.requests
    assert rec.query == {"alt": "sse"}


# -- request mapping ------------------------------------------------------------------------
async def test_request_maps_system_roles_tools_calls_results_and_images(
    provider: SDKProvider, server: GeminiServer
) -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    request = LLMRequest(
        model=MODEL,
        system=(TextPart(text="You are Chorus."), CachePoint(), TextPart(text="Be brief.")),
        messages=(
            Message.user("look this up"),
            Message(
                role="assistant",
                parts=(
                    TextPart(text="Checking."),
                    ToolCallPart(id="call_0", name="lookup", arguments={"q": "a"}),
                    ToolCallPart(id="call_1", name="lookup", arguments={"q": "b"}),
                ),
            ),
            Message(
                role="user",
                parts=(
                    ToolResultPart(call_id="call_0", name="lookup", content="found a"),
                    ToolResultPart(call_id="call_1", name="lookup", content="boom", is_error=True),
                    CachePoint(),
                ),
            ),
            Message(
                role="user",
                parts=(
                    TextPart(text="and these?"),
                    ImagePart(mime="image/png", data=b"\x89PNG-bytes"),
                    ImagePart(mime="image/jpeg", url="https://cdn.example/cat.jpg"),
                ),
            ),
        ),
        tools=(ToolSpec(name="lookup", description="Look a thing up.", parameters=schema),),
        max_tokens=321,
        temperature=0.25,
    )

    await provider.complete(request)

    body = server.requests[0].body
    assert body["systemInstruction"] == {
        "parts": [{"text": "You are Chorus."}, {"text": "Be brief."}]
    }
    assert [c["role"] for c in body["contents"]] == ["user", "model", "user", "user"]
    model_parts = body["contents"][1]["parts"]
    assert model_parts[0] == {"text": "Checking."}
    assert model_parts[1]["functionCall"] == {"id": "call_0", "name": "lookup", "args": {"q": "a"}}
    # Gemini 3 needs a signature on the first call of a replayed turn; only the first carries it.
    signature = base64.b64decode(model_parts[1]["thoughtSignature"])
    assert signature == b"skip_thought_signature_validator"
    assert "thoughtSignature" not in model_parts[2]
    results = [p["functionResponse"] for p in body["contents"][2]["parts"]]
    assert results == [
        {"id": "call_0", "name": "lookup", "response": {"result": "found a"}},
        {"id": "call_1", "name": "lookup", "response": {"error": "boom"}},
    ]
    text, inline, by_url = body["contents"][3]["parts"]
    assert text == {"text": "and these?"}
    assert base64.b64decode(inline["inlineData"]["data"]) == b"\x89PNG-bytes"
    assert _field(inline["inlineData"], "mimeType") == "image/png"
    assert _field(by_url["fileData"], "fileUri") == "https://cdn.example/cat.jpg"
    (declaration,) = body["tools"][0]["functionDeclarations"]
    assert declaration["name"] == "lookup"
    assert declaration["description"] == "Look a thing up."
    assert _field(declaration, "parametersJsonSchema") == schema
    assert body["generationConfig"] == {"maxOutputTokens": 321, "temperature": 0.25}


def _field(obj: dict[str, Any], camel: str) -> Any:
    """The SDK sends some nested keys in snake_case; the real API accepts either spelling."""
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)
    return obj[camel] if camel in obj else obj[snake]


async def test_function_calls_map_to_tool_calls_with_stable_ids_and_round_trip(
    provider: SDKProvider, server: GeminiServer
) -> None:
    server.replies.append(
        {
            "thought": "I should look both up.",
            "text": "Let me check.",
            "tool_calls": [
                {"id": "fc_7", "name": "lookup", "arguments": {"q": "a"}},
                {"name": "lookup", "arguments": {"q": "b"}},
            ],
        }
    )

    first = await provider.complete(_request("look up a and b"))

    assert first.stop_reason == "tool_use"
    assert first.text == "Let me check."  # the thought part is not answer text
    assert [(c.id, c.arguments) for c in first.tool_calls] == [
        ("fc_7", {"q": "a"}),
        ("call_1", {"q": "b"}),
    ]

    results = Message(
        role="user",
        parts=tuple(
            ToolResultPart(call_id=c.id, name=c.name, content="ok") for c in first.tool_calls
        ),
    )
    second = LLMRequest(
        model=MODEL, messages=(Message.user("look up a and b"), first.as_message(), results)
    )
    await provider.complete(second)

    body = server.requests[1].body
    calls = [p["functionCall"] for p in body["contents"][1]["parts"] if "functionCall" in p]
    answers = [p["functionResponse"] for p in body["contents"][2]["parts"]]
    assert [c["id"] for c in calls] == [a["id"] for a in answers] == ["fc_7", "call_1"]


async def test_stream_with_function_calls_ends_in_tool_use(
    provider: SDKProvider, server: GeminiServer
) -> None:
    server.replies.append(
        {"text": "Looking it up.", "tool_calls": [{"name": "lookup", "arguments": {"q": "x"}}]}
    )

    deltas, final = await collect(provider, _request())

    assert "".join(deltas) == "Looking it up."
    assert final.stop_reason == "tool_use"
    assert final.tool_calls == [ToolCallPart(id="call_0", name="lookup", arguments={"q": "x"})]


# -- errors in Google's own shape ------------------------------------------------------------
async def test_429_honours_google_retry_info_detail(
    provider: SDKProvider, server: GeminiServer, sleep: RecordingSleep
) -> None:
    server.fail(429, "Quota exceeded", details=[retry_info(3)])

    await provider.complete(_request())

    assert sleep.delays == [3.0]
    assert len(server.requests) == 2


@pytest.mark.parametrize("code", [401, 403])
async def test_401_and_403_raise_auth_error_naming_the_key(
    provider: SDKProvider, server: GeminiServer, sleep: RecordingSleep, code: int
) -> None:
    server.fail(code, "denied")

    with pytest.raises(ProviderAuthError) as info:
        await provider.complete(_request())

    assert info.value.status == code
    assert info.value.key_env == "GEMINI_API_KEY"
    assert "GEMINI_API_KEY" in str(info.value) and "GOOGLE_API_KEY" in str(info.value)
    assert "https://aistudio.google.com/apikey" in str(info.value)
    assert len(server.requests) == 1 and sleep.delays == []


async def test_400_api_key_invalid_is_an_auth_error(sleep: RecordingSleep) -> None:
    srv = GeminiServer(api_key="the-right-key")
    async with srv:
        client = gemini_client(srv.base_url, "a-wrong-key")
        provider = GeminiProvider(client, base_url=srv.base_url, retry=RETRY, sleep=sleep)
        try:
            with pytest.raises(ProviderAuthError) as info:
                await provider.complete(_request())
        finally:
            await client.aio.aclose()

    assert info.value.status == 401
    assert "GEMINI_API_KEY" in str(info.value)
    assert len(srv.requests) == 1 and sleep.delays == []


async def test_invalid_argument_is_a_request_error_sent_once(
    provider: SDKProvider, server: GeminiServer, sleep: RecordingSleep
) -> None:
    server.fail(
        400,
        "Invalid JSON payload received.",
        status="INVALID_ARGUMENT",
        details=[error_info("BAD_REQUEST")],
    )

    with pytest.raises(ProviderRequestError) as info:
        await provider.complete(_request())

    assert not isinstance(info.value, ProviderAuthError)
    assert info.value.status == 400
    assert "Invalid JSON payload" in str(info.value)
    assert len(server.requests) == 1 and sleep.delays == []


# -- guard and construction -----------------------------------------------------------------
@pytest.fixture
def blocked() -> Iterator[None]:
    was_blocked = guard.real_calls_blocked()
    guard.block_real_calls()
    yield None
    if not was_blocked:
        guard.allow_real_calls()


@pytest.mark.usefixtures("blocked")
async def test_guard_blocks_from_settings_without_base_url() -> None:
    provider = GeminiProvider.from_settings(
        LLMSettings.model_validate({"GEMINI_API_KEY": "k", "GOOGLE_GEMINI_BASE_URL": None})
    )
    try:
        with pytest.raises(RealVendorCallBlocked, match="generativelanguage.googleapis.com"):
            await provider.complete(_request())
    finally:
        await provider.aclose()


async def test_the_sdk_sends_the_timeout_from_settings_to_the_server(
    server: GeminiServer,
) -> None:
    settings = LLMSettings.model_validate(
        {
            "GEMINI_API_KEY": "k",
            "GOOGLE_GEMINI_BASE_URL": server.base_url,
            "CHORUS_LLM_TIMEOUT": 12.5,
        }
    )
    provider = GeminiProvider.from_settings(settings)
    try:
        await provider.complete(_request())
    finally:
        await provider.aclose()
    (rec,) = server.requests
    assert rec.headers["x-server-timeout"] == "13"  # in whole seconds, rounded up


def test_from_settings_without_a_key_names_both_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    settings = LLMSettings()

    with pytest.raises(ConfigError, match="GEMINI_API_KEY.*GOOGLE_API_KEY"):
        GeminiProvider.from_settings(settings)


# -- reasoning, thought signatures and structured output -------------------------------------
SIG = base64.b64encode(b"\x12\x34opaque-signature\xff").decode()
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "score": {"type": "integer", "minimum": 0}},
    "required": ["answer"],
}


def _next_turn(request: LLMRequest, response: LLMResponse) -> LLMRequest:
    results = Message(
        role="user",
        parts=tuple(
            ToolResultPart(call_id=c.id, name=c.name, content="ok") for c in response.tool_calls
        ),
    )
    messages = (*request.messages, response.as_message(), results)
    return request.model_copy(update={"messages": messages})


@pytest.mark.parametrize(("level", "budget"), [("low", 1024), ("medium", 4096), ("high", 16384)])
async def test_reasoning_levels_map_to_a_thinking_budget_on_top_of_the_output_limit(
    provider: SDKProvider, server: GeminiServer, level: str, budget: int
) -> None:
    await provider.complete(_request(reasoning=level, max_tokens=500))
    config = server.requests[0].body["generationConfig"]
    assert _field(config["thinkingConfig"], "thinkingBudget") == budget
    assert "thinkingLevel" not in config["thinkingConfig"]
    assert "thinking_level" not in config["thinkingConfig"]
    assert config["maxOutputTokens"] == 500 + budget


async def test_reasoning_off_leaves_the_models_default(
    provider: SDKProvider, server: GeminiServer
) -> None:
    await provider.complete(_request(max_tokens=500))
    assert server.requests[0].body["generationConfig"] == {"maxOutputTokens": 500}


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_call_signature_is_kept_and_sent_back_and_the_api_accepts_it(
    provider: SDKProvider, server: GeminiServer, streaming: bool
) -> None:
    server.replies.append(
        {
            "text": "Let me check.",
            "signature": SIG,
            "tool_calls": [
                {"name": "lookup", "arguments": {"q": "a"}},
                {"name": "lookup", "arguments": {"q": "b"}},
            ],
        }
    )
    server.replies.append("Both found.")
    first = _request("look up a and b", reasoning="low")
    response = await answer(provider, first, streaming)
    # Gemini signs only the first call of a turn; the second has no signature of its own.
    assert [c.signature for c in response.tool_calls] == [SIG, None]
    assert response.text == "Let me check."

    final = await provider.complete(_next_turn(first, response))

    assert final.text == "Both found."
    assert len(server.requests) == 2  # accepted: nothing retried or refused
    parts = server.requests[1].body["contents"][1]["parts"]
    assert parts[0] == {"text": "Let me check."}
    # the real one, not the placeholder (re-encoded by the SDK as URL-safe base64)
    assert base64.urlsafe_b64decode(parts[1]["thoughtSignature"]) == base64.b64decode(SIG)
    assert "thoughtSignature" not in parts[2]


@pytest.mark.parametrize("signature", [None, "%%not-base64%%"])
async def test_a_replayed_call_without_its_signature_is_refused(
    provider: SDKProvider, server: GeminiServer, sleep: RecordingSleep, signature: str | None
) -> None:
    """The loopback API checks signatures like Gemini 3, so the round trip above means something."""
    server.replies.append(
        {"signature": SIG, "tool_calls": [{"name": "lookup", "arguments": {"q": "a"}}]}
    )
    first = _request("look up a")
    response = await provider.complete(first)
    (call,) = response.tool_calls
    unsigned = response.model_copy(
        update={"parts": (call.model_copy(update={"signature": signature}),)}
    )
    request = _next_turn(first, unsigned)
    with pytest.raises(ProviderRequestError, match="thought.signature") as info:
        await provider.complete(request)
    assert info.value.status == 400
    assert sleep.delays == []
    # what was sent in its place: the placeholder, which only satisfies turns nobody signed
    sent = server.requests[1].body["contents"][1]["parts"][0]["thoughtSignature"]
    assert base64.urlsafe_b64decode(sent) == b"skip_thought_signature_validator"


@pytest.mark.parametrize("streaming", [False, True])
async def test_thoughts_and_text_signatures_become_thinking_parts_not_text(
    provider: SDKProvider, server: GeminiServer, streaming: bool
) -> None:
    server.replies.append(
        {"thinking": "The user says hi.", "text": "Hello there friend.", "signature": SIG}
    )
    first = _request("hi", reasoning="medium")
    response = await answer(provider, first, streaming)

    assert response.text == "Hello there friend."
    assert response.parts == (
        ThinkingPart(text="The user says hi.", vendor="gemini"),
        TextPart(text="Hello there friend."),
        ThinkingPart(signature=SIG, vendor="gemini"),
    )

    follow_up = first.model_copy(
        update={"messages": (*first.messages, response.as_message(), Message.user("again"))}
    )
    await provider.complete(follow_up)
    # the thought goes back as a thought, the signature on the text part it came with
    thought, text = server.requests[1].body["contents"][1]["parts"]
    assert thought == {"text": "The user says hi.", "thought": True}
    assert text["text"] == "Hello there friend."
    assert base64.urlsafe_b64decode(text["thoughtSignature"]) == base64.b64decode(SIG)


async def test_other_vendors_thinking_is_not_sent(
    provider: SDKProvider, server: GeminiServer
) -> None:
    turn = Message(
        role="assistant",
        parts=(
            ThinkingPart(text="claude thought", signature="sig-A", vendor="anthropic"),
            TextPart(text="earlier answer"),
            ThinkingPart(signature="c2ln", vendor="anthropic"),
        ),
    )
    await provider.complete(
        LLMRequest(model=MODEL, messages=(Message.user("a"), turn, Message.user("b")))
    )
    assert server.requests[0].body["contents"][1]["parts"] == [{"text": "earlier answer"}]


async def test_structured_output_sets_json_mime_type_and_schema(
    provider: SDKProvider, server: GeminiServer
) -> None:
    await provider.complete(_request("define chorus", response_schema=SCHEMA))
    config = server.requests[0].body["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"] == SCHEMA  # full JSON Schema, passed unchanged
    assert "responseSchema" not in config
