"""A loopback stand-in for the Gemini Developer API, so the real google-genai SDK runs in tests.

It speaks the wire format the SDK parses: ``POST /{version}/models/{model}:generateContent`` returns
one JSON ``GenerateContentResponse`` (camelCase: ``candidates[].content.parts[]``, ``finishReason``,
``usageMetadata``, ``modelVersion``, ``responseId``); ``:streamGenerateContent?alt=sse`` returns the
same objects as server-sent events, ``data: {json}\\r\\n\\r\\n``, as the real API does. Errors use
Google's JSON shape ``{"error": {"code", "message", "status", "details"}}``.

A scripted reply is a ``str`` (the answer text) or a ``dict``::

    {
        "text": "...",                 # answer text (optional)
        "thought": "...",              # a thought-summary part sent before the text (optional)
        "tool_calls": [{"name": "lookup", "arguments": {...}, "id": "fc_1"}],  # id optional
        "finish": "STOP",              # finishReason (default STOP)
        "usage": {"cachedContentTokenCount": 100, ...},  # overrides of usageMetadata
        "prompt_block": "SAFETY",      # answer with promptFeedback.blockReason, no candidates
        "stream_error": 503,           # streaming only: an in-band error event after the text
    }

Usage numbers are deterministic: ``promptTokenCount`` is a quarter of the JSON length of the
request's contents, system instruction and tools; ``candidatesTokenCount`` a quarter of the text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from aiohttp import web

from tests.loopback.base import LoopbackServer, ScriptedFailure

_STATUS_TEXT = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def error_body(
    code: int, message: str, status: str | None = None, details: Iterable[dict[str, Any]] = ()
) -> dict[str, Any]:
    """Google's error JSON (``google.rpc.Status`` as the REST API renders it)."""
    return {
        "error": {
            "code": code,
            "message": message,
            "status": status or _STATUS_TEXT.get(code, "UNKNOWN"),
            "details": list(details),
        }
    }


def retry_info(seconds: float) -> dict[str, Any]:
    """The ``RetryInfo`` detail Gemini attaches to a 429 (``"retryDelay": "7s"``)."""
    return {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{seconds:g}s"}


def error_info(reason: str) -> dict[str, Any]:
    return {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": "googleapis.com",
        "metadata": {"service": "generativelanguage.googleapis.com"},
    }


INVALID_KEY_BODY = error_body(
    400,
    "API key not valid. Please pass a valid API key.",
    "INVALID_ARGUMENT",
    [error_info("API_KEY_INVALID")],
)


class GeminiServer(LoopbackServer):
    """``replies`` items are ``str`` or reply dicts (see the module docstring).

    ``api_key``, when set, makes the server answer any other ``x-goog-api-key`` the way the real
    API does: HTTP 400, ``INVALID_ARGUMENT``, reason ``API_KEY_INVALID``.
    """

    def __init__(self, *, api_key: str | None = None) -> None:
        super().__init__()
        self.api_key = api_key

    @property
    def base_url(self) -> str:
        """The value for ``GOOGLE_GEMINI_BASE_URL`` (the SDK appends ``/{version}/models/...``)."""
        return self.url

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/{version}/models/{target}", self._handle)]

    def fail(
        self,
        code: int,
        message: str = "scripted failure",
        *,
        status: str | None = None,
        details: Iterable[dict[str, Any]] = (),
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Queue one error response in Google's shape."""
        self.failures.append(
            ScriptedFailure(code, error_body(code, message, status, details), dict(headers or {}))
        )

    # -- request handling -------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        rec = await self.record(request)
        model, _, action = request.match_info["target"].partition(":")
        if action not in ("generateContent", "streamGenerateContent"):
            return web.json_response(error_body(404, f"unknown method {action!r}"), status=404)
        if self.api_key is not None and rec.headers.get("x-goog-api-key") != self.api_key:
            return web.json_response(INVALID_KEY_BODY, status=400)
        failure = self.next_failure()
        if failure is not None:
            return failure
        body = rec.body if isinstance(rec.body, dict) else {}
        reply = _as_reply(self.next_reply(body))
        response_id = f"resp-{len(self.requests)}"
        if action == "generateContent":
            return web.json_response(_response(reply, body, model, response_id))
        return await self._stream(request, _chunks(reply, body, model, response_id))

    async def _stream(
        self, request: web.Request, chunks: list[dict[str, Any]]
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in chunks:
            await response.write(f"data: {json.dumps(chunk)}\r\n\r\n".encode())
        await response.write_eof()
        return response


def _as_reply(reply: Any) -> dict[str, Any]:
    if isinstance(reply, str):
        return {"text": reply}
    if isinstance(reply, dict):
        return reply
    raise TypeError(f"a Gemini loopback reply is a str or a dict, not {type(reply).__name__}")


def _prompt_tokens(body: dict[str, Any]) -> int:
    counted = {k: body.get(k) for k in ("contents", "systemInstruction", "tools")}
    return max(1, len(json.dumps(counted, sort_keys=True)) // 4)


def _usage(reply: dict[str, Any], body: dict[str, Any], *, final: bool = True) -> dict[str, Any]:
    prompt = _prompt_tokens(body)
    output = len(reply.get("text", "")) // 4 + 8 * len(reply.get("tool_calls", []))
    usage: dict[str, Any] = {"promptTokenCount": prompt}
    if final:
        usage["candidatesTokenCount"] = max(1, output)
    usage.update(reply.get("usage", {}))
    usage["totalTokenCount"] = (
        usage["promptTokenCount"]
        + usage.get("candidatesTokenCount", 0)
        + usage.get("thoughtsTokenCount", 0)
    )
    usage["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": usage["promptTokenCount"]}]
    return usage


def _call_parts(reply: dict[str, Any]) -> list[dict[str, Any]]:
    parts = []
    for call in reply.get("tool_calls", []):
        function_call: dict[str, Any] = {"name": call["name"], "args": call.get("arguments", {})}
        if call.get("id"):
            function_call["id"] = call["id"]
        parts.append({"functionCall": function_call})
    return parts


def _envelope(
    parts: list[dict[str, Any]] | None,
    finish: str | None,
    usage: dict[str, Any],
    model: str,
    response_id: str,
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts or [], "role": "model"}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return {
        "candidates": [candidate],
        "usageMetadata": usage,
        "modelVersion": model,
        "responseId": response_id,
    }


def _blocked(reply: dict[str, Any], body: dict[str, Any], model: str, rid: str) -> dict[str, Any]:
    usage = {"promptTokenCount": _prompt_tokens(body)}
    usage["totalTokenCount"] = usage["promptTokenCount"]
    return {
        "promptFeedback": {"blockReason": reply["prompt_block"]},
        "usageMetadata": usage,
        "modelVersion": model,
        "responseId": rid,
    }


def _response(reply: dict[str, Any], body: dict[str, Any], model: str, rid: str) -> dict[str, Any]:
    if reply.get("prompt_block"):
        return _blocked(reply, body, model, rid)
    parts: list[dict[str, Any]] = []
    if reply.get("thought"):
        parts.append({"text": reply["thought"], "thought": True})
    if reply.get("text"):
        parts.append({"text": reply["text"]})
    parts += _call_parts(reply)
    return _envelope(parts, reply.get("finish", "STOP"), _usage(reply, body), model, rid)


def _chunks(
    reply: dict[str, Any], body: dict[str, Any], model: str, rid: str
) -> list[dict[str, Any]]:
    """Text split into word pieces; the last chunk has the calls, finishReason and full usage."""
    if reply.get("prompt_block"):
        return [_blocked(reply, body, model, rid)]
    pieces = [p for p in re.split(r"(?<= )", reply.get("text", "")) if p]
    running = _usage(reply, body, final=False)
    chunks = []
    if reply.get("thought"):
        chunks.append(
            _envelope([{"text": reply["thought"], "thought": True}], None, running, model, rid)
        )
    if reply.get("stream_error"):
        chunks += [_envelope([{"text": p}], None, running, model, rid) for p in pieces]
        return [*chunks, error_body(int(reply["stream_error"]), "The stream was interrupted.")]
    tail = _call_parts(reply)
    if pieces and not tail:
        tail = [{"text": pieces.pop()}]
    chunks += [_envelope([{"text": p}], None, running, model, rid) for p in pieces]
    chunks.append(_envelope(tail, reply.get("finish", "STOP"), _usage(reply, body), model, rid))
    return chunks
