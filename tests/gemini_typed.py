"""Gemini requests as google-genai's documented ``generate_content`` takes them: typed
``Content`` and ``GenerateContentConfig``.

``sdk_request`` builds them from a neutral ``LLMRequest`` the way ``bot.llm.gemini`` would through
the SDK's types: the reference ``tests/test_gemini_wire.py`` holds ``bot.llm.gemini_wire``'s JSON
to, and the bare SDK call ``bench.gemini_call`` measures. ``typed_from_body`` reads a request's
REST JSON back into the same types (text, calls and results; not inline bytes), so that the bare
SDK can replay the very requests Chorus sent (``bench.overhead``).
"""

from __future__ import annotations

from typing import Any

from google.genai import types

from bot.llm import gemini_wire
from bot.llm.types import (
    ImagePart,
    LLMRequest,
    Part,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
)


def sdk_request(request: LLMRequest) -> tuple[list[types.Content], types.GenerateContentConfig]:
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
        parts = sdk_parts(message.parts, signed=role == "model")
        if parts:
            contents.append(types.Content(role=role, parts=parts))
    return contents, config


def sdk_parts(parts: tuple[Part, ...], *, signed: bool) -> list[types.Part]:
    out: list[types.Part] = []
    for part in parts:
        if isinstance(part, TextPart):
            out.append(types.Part(text=part.text))
        elif isinstance(part, ToolCallPart):
            signature = gemini_wire.signature_bytes(part.signature) if signed else None
            if signed and signature is None and not any(p.function_call for p in out):
                signature = gemini_wire.PLACEHOLDER_SIGNATURE
            call = types.FunctionCall(id=part.id, name=part.name, args=dict(part.arguments))
            out.append(types.Part(function_call=call, thought_signature=signature))
        elif isinstance(part, ThinkingPart):
            if signed and part.vendor == "gemini":
                signature = gemini_wire.signature_bytes(part.signature)
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


def typed_from_body(
    body: dict[str, Any],
) -> tuple[list[types.Content], types.GenerateContentConfig]:
    """``generate_content``'s arguments that send ``body`` (a request's REST JSON) again."""
    contents = [types.Content.model_validate(content) for content in body["contents"]]
    fields: dict[str, Any] = dict(body.get("generationConfig") or {})
    if "systemInstruction" in body:
        fields["systemInstruction"] = body["systemInstruction"]
    if "tools" in body:
        fields["tools"] = body["tools"]
    return contents, types.GenerateContentConfig.model_validate(fields)
