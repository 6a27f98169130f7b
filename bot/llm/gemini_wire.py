"""Gemini requests as REST JSON, sent through the google-genai client's own request layer.

Why not ``client.aio.models.generate_content``: before any I/O it validates the whole request
into pydantic models (``types._GenerateContentParameters``: every ``Content`` and ``Part`` of
the history, with a type-mismatch check per field), then walks the models back out into the
REST (``mldev``) JSON with a ``get_value_by_path`` lookup for each of the ~20 possible fields of
every part. That is per call and over the whole history: 75% of a 40-message ``chorus chat``
console turn's CPU (16 ms, against 2.8 for OpenAI; cProfile of the piped console). This module
writes that JSON directly from the neutral types, in the very shape the SDK produces (key order
included, so the bytes on the wire are the same), and hands it to the client's request layer:
the turn's CPU went from 15.5 to about 3 ms, level with OpenAI's.

What stays the SDK's: the URL (base URL, API version), the key and client headers, the
``x-server-timeout`` header, the client's retry options (``attempts=1``), the transport and its
errors (``errors.APIError`` from HTTP and from in-band stream errors), and reading the answer
into ``types.GenerateContentResponse`` exactly as ``generate_content`` does (less ``parsed``, the
structured-output convenience, and ``sdk_http_response``, which Chorus does not read).

**Private SDK internals used** (google-genai is pinned in constraints.txt; tests/
test_gemini_wire.py fails if a new version moves or changes any of them, and proves that the
body sent here equals the one ``generate_content`` sends for a rich request):

- ``Client.aio._api_client`` and its ``async_request`` / ``async_request_streamed(method, path,
  request_dict, http_options)`` (``google/genai/_api_client.py``);
- ``google.genai.models._GenerateContentResponse_from_mldev`` and
  ``types.GenerateContentResponse._from_response``, the SDK's own response reading.

Shape of the SDK's JSON, kept here on purpose: top-level and part keys are camelCase, but the
nested objects the SDK dumps from pydantic models without aliases are snake_case
(``inlineData.mime_type``, ``fileData.file_uri``, ``functionDeclarations[].parameters_json_schema``,
``thinkingConfig.thinking_budget``); Google's JSON parser accepts both spellings. Bytes
(``inlineData.data``, ``thoughtSignature``) are URL-safe base64, as the SDK encodes them.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import AsyncGenerator, Iterable
from typing import Any

from google import genai
from google.genai import types
from google.genai.models import _GenerateContentResponse_from_mldev

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

JSON = dict[str, Any]


# -- sending --------------------------------------------------------------------------------
def model_path(model: str) -> str:
    """The resource name the Developer API addresses (``t_model`` in the SDK, mldev branch)."""
    if not model:
        raise ValueError("model is required.")
    if ".." in model or "?" in model or "&" in model:
        raise ValueError("invalid model parameter.")
    if model.startswith(("models/", "tunedModels/")):
        return model
    return f"models/{model}"


async def generate(client: genai.Client, model: str, body: JSON) -> types.GenerateContentResponse:
    """``POST {model}:generateContent``; the answer read as ``generate_content`` reads it."""
    path = f"{model_path(model)}:generateContent"
    response = await client.aio._api_client.async_request("post", path, body, None)
    return _read(response.body)


async def generate_stream(
    client: genai.Client, model: str, body: JSON
) -> AsyncGenerator[types.GenerateContentResponse, None]:
    """``POST {model}:streamGenerateContent?alt=sse``, one parsed response per event.

    An in-band ``{"error": ...}`` event raises ``errors.APIError`` inside the SDK's iterator.
    """
    path = f"{model_path(model)}:streamGenerateContent?alt=sse"
    stream = await client.aio._api_client.async_request_streamed("post", path, body, None)
    try:
        async for chunk in stream:
            yield _read(chunk.body)
    finally:
        await stream.aclose()


def _read(text: str | None) -> types.GenerateContentResponse:
    """What ``AsyncModels._generate_content`` does with a body (``parsed`` is not read here)."""
    payload = json.loads(text) if text else {}
    fields = _GenerateContentResponse_from_mldev(payload, None, None)
    return types.GenerateContentResponse._from_response(response=fields, kwargs={})


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
            signature = _signature(part.signature) if signed else None
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
    signature = _signature(part.signature)
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


def _signature(value: str | None) -> bytes | None:
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
