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
errors (``errors.APIError`` from HTTP and from in-band stream errors), and the reading of a
stream's lines into chunks. The answers are handed on as their JSON objects, which
``bot.llm.gemini_parse`` folds itself (it says why).

**Private SDK internals used** (google-genai is pinned in constraints.txt; tests/
test_gemini_wire.py fails if a new version moves or changes any of them, and proves that the
body sent here equals the one ``generate_content`` sends for a rich request):

- ``Client.aio._api_client`` and its ``async_request(method, path, request_dict,
  http_options)``, ``_build_request`` (the same four) and ``_async_request(http_request,
  http_options, stream)`` (``google/genai/_api_client.py``);
- ``HttpResponse.async_segments()``, the stream's chunks as loaded JSON.

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
from typing import Any, cast

from google import genai
from google.genai import errors

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


async def generate(client: genai.Client, model: str, body: JSON) -> JSON:
    """``POST {model}:generateContent``; the answer's JSON object (``gemini_parse`` reads it)."""
    path = f"{model_path(model)}:generateContent"
    response = await client.aio._api_client.async_request("post", path, body, None)
    return json_object(response.body, "a gemini answer") if response.body else {}


async def generate_stream(
    client: genai.Client, model: str, body: JSON
) -> AsyncGenerator[JSON, None]:
    """``POST {model}:streamGenerateContent?alt=sse``, one JSON object per event.

    The chunks come from the SDK's own reading of the stream (``HttpResponse.async_segments``:
    its SSE lines, and an error the API writes as bare JSON lines), each loaded once. What
    ``async_request_streamed`` adds on top is done here without it: a chunk carrying ``error``
    raises the SDK's ``errors.APIError`` for its code, as it would have; it no longer dumps
    each chunk back to text, to be loaded a third time.
    """
    api = client.aio._api_client
    path = f"{model_path(model)}:streamGenerateContent?alt=sse"
    request = api._build_request("post", path, body, None)
    response = await api._async_request(http_request=request, http_options=None, stream=True)
    # an async generator (typed as an iterator): closing it releases the connection
    segments = cast(AsyncGenerator[Any, None], response.async_segments())
    try:
        async for chunk in segments:
            if not isinstance(chunk, dict):
                raise MalformedAnswer(f"a gemini stream chunk that is not an object: {chunk!r:.80}")
            if "error" in chunk:
                error = chunk["error"]
                code = error.get("code") if isinstance(error, dict) else None
                # The API's in-band errors carry their HTTP code; one without is the server's.
                status = code if isinstance(code, int) and not isinstance(code, bool) else 500
                await errors.APIError.raise_error_async(status, chunk, response)
            yield chunk
    finally:
        await segments.aclose()


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
