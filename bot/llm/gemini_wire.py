"""Gemini requests as REST JSON, sent through google-genai's public ``generate_content``.

Why not ``generate_content``'s typed parameters: before any I/O it validates the whole request
into pydantic models (every ``Content`` and ``Part`` of the history, with a type-mismatch check
per field), then walks the models back out into the REST JSON with a path lookup for each of
the ~20 possible fields of every part: per call and over the whole history, far more CPU than
the rest of the call at the 40-message history limit (``python -m bench.gemini_call``, the
typed call against this module; figures in BENCHMARKS.md). So ``request_body`` writes that
JSON directly from the neutral types, in the very shape the SDK produces (the same JSON on the
wire: ``tests/test_gemini_wire.py``), and ``generate_content`` carries it in
its documented ``HttpOptions.extra_body`` ("extra parameters to add to the request body, in the
backend API's structure"): the SDK builds its body for a one-part stand-in content, then lays
the JSON over it, its lists replacing the SDK's. Each call turns off what ``generate_content``
adds on top of one request: automatic function calling and automatic continuation.

What stays the SDK's: the model's resource name, the URL (base URL, API version), the key and
client headers, the ``x-server-timeout`` header, the client's retry options (``attempts=1``),
the transport and its errors (``errors.APIError`` from HTTP and from in-band stream errors).
A whole answer comes back as its JSON (``should_return_http_response``: the response's body,
not read into ``GenerateContentResponse``), which ``bot.llm.gemini_parse`` folds; a stream's
chunks come as the SDK's ``GenerateContentResponse``, handed on as their REST JSON
(``model_dump`` by alias) to the same fold, because google-genai offers no raw stream.

Shape of the SDK's JSON, kept here on purpose: top-level and part keys are camelCase, but the
nested objects the SDK dumps from pydantic models without aliases are snake_case
(``inlineData.mime_type``, ``fileData.file_uri``, ``functionDeclarations[].parameters_json_schema``,
``thinkingConfig.thinking_budget``); Google's JSON parser accepts both spellings. Bytes
(``inlineData.data``, ``thoughtSignature``) are URL-safe base64, as the SDK encodes them.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import AsyncGenerator, Iterable
from typing import Any

import pydantic
from google import genai
from google.genai import types

from bot.llm.errors import MalformedAnswer, json_object
from bot.llm.types import (
    REASONING_BUDGETS,
    ImagePart,
    LLMRequest,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
)

# https://ai.google.dev/gemini-api/docs/thought-signatures (FAQ: dummy signatures)
PLACEHOLDER_SIGNATURE = b"skip_thought_signature_validator"
# Thinking budget per reasoning level (tokens), the same as Anthropic's.
THINKING_BUDGETS = REASONING_BUDGETS
# What ``generate_content`` builds its own body for; ``extra_body``'s ``contents`` replaces it.
STAND_IN = types.Content(role="user", parts=[types.Part(text="")])

JSON = dict[str, Any]


# -- sending --------------------------------------------------------------------------------
def call_config(body: JSON, *, whole: bool) -> types.GenerateContentConfigDict:
    """``generate_content``'s config for sending ``body`` as it is, in one request; ``whole``:
    the answer comes back as its JSON, not read into the SDK's type (streams cannot). A dict,
    not the model: ``generate_content`` validates a dict, but deep-copies a model (the JSON in
    ``extra_body`` with it)."""
    return types.GenerateContentConfigDict(
        http_options=types.HttpOptionsDict(extra_body=body),
        should_return_http_response=whole or None,
        automatic_function_calling=types.AutomaticFunctionCallingConfigDict(disable=True),
        automatic_continuation=False,
    )


async def generate(client: genai.Client, model: str, body: JSON) -> JSON:
    """``POST {model}:generateContent``; the answer's JSON object (``gemini_parse`` reads it)."""
    config = call_config(body, whole=True)
    response = await client.aio.models.generate_content(
        model=model, contents=STAND_IN, config=config
    )
    raw = response.sdk_http_response.body if response.sdk_http_response else None
    return json_object(raw, "a gemini answer") if raw else {}


async def generate_stream(
    client: genai.Client, model: str, body: JSON
) -> AsyncGenerator[JSON, None]:
    """``POST {model}:streamGenerateContent?alt=sse``, one JSON object per chunk: the SDK's
    reading of each (an in-band error raised as its ``errors.APIError``), by its REST names."""
    config = call_config(body, whole=False)
    chunks = await client.aio.models.generate_content_stream(
        model=model, contents=STAND_IN, config=config
    )
    try:
        async for chunk in chunks:
            yield chunk.model_dump(mode="json", by_alias=True, exclude_none=True)
    except pydantic.ValidationError as exc:  # the SDK could not read a chunk as an answer
        raise MalformedAnswer(f"a gemini stream chunk that is not an answer: {exc}") from exc
    finally:  # a stream left early: the SDK's own generator lets its response go now
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()


# -- the request body -----------------------------------------------------------------------
def request_body(request: LLMRequest) -> JSON:
    """The ``generateContent`` JSON for ``request``, key for key what the SDK would send."""
    contents = _contents(request.messages)
    if not contents:
        raise ValueError("contents are required.")  # the SDK's own refusal, before any I/O
    body: JSON = {"contents": contents}
    system = [{"text": p.text} for p in request.system if isinstance(p, TextPart)]
    if system:
        body["systemInstruction"] = {"parts": system}
    if request.tools:
        declarations = [
            {"description": t.description, "name": t.name, "parameters_json_schema": t.parameters}
            for t in request.tools
        ]
        body["tools"] = [{"functionDeclarations": declarations}]
    body["generationConfig"] = _generation_config(request)
    return body


def _generation_config(request: LLMRequest) -> JSON:
    """Reasoning is a thinking budget added on top of the answer's own ``max_tokens``."""
    config: JSON = {}
    if request.temperature is not None:
        config["temperature"] = request.temperature
    limit = request.max_tokens
    budget = THINKING_BUDGETS.get(request.reasoning)  # None for "off": the model's default
    if budget is not None:
        limit += budget
    config["maxOutputTokens"] = limit
    if request.response_schema is not None:
        config["responseMimeType"] = "application/json"
        config["responseJsonSchema"] = request.response_schema
    if budget is not None:
        config["thinkingConfig"] = {"thinking_budget": budget}
    return config


def _contents(messages: Iterable[Message]) -> list[JSON]:
    contents = []
    for message in messages:
        role = "model" if message.role == "assistant" else "user"
        parts = _parts(message.parts, signed=role == "model")
        if parts:  # Gemini rejects a content without parts
            contents.append({"parts": parts, "role": role})
    return contents


def _parts(parts: Iterable[Part], *, signed: bool) -> list[JSON]:
    """Wire parts of one message; ``signed``: a model turn, whose signatures go back."""
    out: list[JSON] = []
    for part in parts:
        if isinstance(part, TextPart):
            out.append({"text": part.text})
        elif isinstance(part, ToolCallPart):
            wire: JSON = {
                "functionCall": {"id": part.id, "args": dict(part.arguments), "name": part.name}
            }
            signature = signature_bytes(part.signature) if signed else None
            if signed and signature is None and not any("functionCall" in p for p in out):
                signature = PLACEHOLDER_SIGNATURE  # the first call of a turn must be signed
            if signature is not None:
                wire["thoughtSignature"] = _b64(signature)
            out.append(wire)
        elif isinstance(part, ThinkingPart):
            if signed and part.vendor == "gemini":
                _add_thought(out, part)
        elif isinstance(part, ToolResultPart):
            key = "error" if part.is_error else "result"
            response = {"id": part.call_id, "name": part.name, "response": {key: part.content}}
            out.append({"functionResponse": response})
        elif isinstance(part, ImagePart):
            out.append(_image(part))
        # CachePoint: Gemini caches a stable prefix implicitly.
    return out


def _add_thought(out: list[JSON], part: ThinkingPart) -> None:
    """A thought part goes back as sent; a bare signature returns to the text part before it."""
    signature = signature_bytes(part.signature)
    if part.text:
        thought: JSON = {"text": part.text, "thought": True}
        if signature is not None:
            thought["thoughtSignature"] = _b64(signature)
        out.append(thought)
    elif signature is not None:
        previous = out[-1] if out else None
        if previous is not None and "text" in previous and not previous.get("thoughtSignature"):
            previous["thoughtSignature"] = _b64(signature)
        else:
            out.append({"text": "", "thoughtSignature": _b64(signature)})


def signature_bytes(value: str | None) -> bytes | None:
    """The bytes of a signature kept as base64 (either alphabet); None if unusable."""
    if not value:
        return None
    try:
        return base64.b64decode(value.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        return None


def _b64(data: bytes) -> str:
    """Bytes as the SDK writes them into JSON: URL-safe base64."""
    return base64.urlsafe_b64encode(data).decode("ascii")


def _image(part: ImagePart) -> JSON:
    if part.data is not None:
        return {"inlineData": {"data": _b64(part.data), "mime_type": part.mime}}
    if part.url:
        # The Gemini API fetches public and signed HTTPS URLs given as file data.
        return {"fileData": {"file_uri": part.url, "mime_type": part.mime}}
    return {"text": "[an image that could not be attached]"}
