"""A loopback stand-in for the Gemini Developer API, so the real google-genai SDK runs in tests.

It speaks the wire format the SDK parses: ``POST /{version}/models/{model}:generateContent`` returns
one JSON ``GenerateContentResponse`` (camelCase: ``candidates[].content.parts[]``, ``finishReason``,
``usageMetadata``, ``modelVersion``, ``responseId``); ``:streamGenerateContent?alt=sse`` returns the
same objects as server-sent events, ``data: {json}\\r\\n\\r\\n``, as the real API does. Errors use
Google's JSON shape ``{"error": {"code", "message", "status", "details"}}``.

A scripted reply is a ``str`` (the answer text) or a ``dict``::

    {
        "text": "...",                 # answer text (optional)
        "thought": "...",              # a thought-summary part sent before the text (optional;
                                       # "thinking" is the same)
        "signature": "c2lnLTE=",       # a thoughtSignature (base64): on the first function
                                       # call, else on the last text part, as Gemini puts it
        "tool_calls": [{"name": "lookup", "arguments": {...}, "id": "fc_1"}],  # id optional
        "finish": "STOP",              # finishReason (default STOP)
        "usage": {"cachedContentTokenCount": 100, ...},  # overrides of usageMetadata
        "prompt_block": "SAFETY",      # answer with promptFeedback.blockReason, no candidates
        "stream_error": 503,           # streaming only: an in-band error event after the text
    }

Validation, like the real API (HTTP 400 ``INVALID_ARGUMENT``): a replayed ``functionCall`` that
this server issued with a signature must carry that very ``thoughtSignature``; ``thinkingConfig``
may not set both a budget and a level; ``responseJsonSchema`` needs ``responseMimeType:
application/json``. (The SDK sends nested config keys in snake_case, which Google's JSON parser
accepts too, so both spellings are read.)

Usage numbers are deterministic: ``promptTokenCount`` is a quarter of the JSON length of the
request's contents, system instruction and tools; ``candidatesTokenCount`` a quarter of the text.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from aiohttp import web

from tests.loopback.base import LoopbackServer, ScriptedFailure
from tests.loopback.embedding_model import embed_text

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
        self.signatures: dict[str, str] = {}  # issued function call -> its thoughtSignature

    @property
    def base_url(self) -> str:
        """The value for ``GOOGLE_GEMINI_BASE_URL`` (the SDK appends ``/{version}/models/...``)."""
        return self.url

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/{version}/models/{target}", self._handle),
            web.get("/{version}/models", self.list_models),
        ]

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
        if action == "batchEmbedContents":
            return await self._embed(rec)
        if action not in ("generateContent", "streamGenerateContent"):
            return web.json_response(error_body(404, f"unknown method {action!r}"), status=404)
        if self.api_key is not None and rec.headers.get("x-goog-api-key") != self.api_key:
            return web.json_response(INVALID_KEY_BODY, status=400)
        failure = self.next_failure()
        if failure is not None:
            return failure
        body = rec.body if isinstance(rec.body, dict) else {}
        problem = self._invalid(body)
        if problem is not None:
            return web.json_response(error_body(400, problem), status=400)
        reply = _as_reply(self.next_reply(body))
        if reply.get("signature") and reply.get("tool_calls"):
            self.signatures[_call_key(_call_parts(reply)[0]["functionCall"])] = reply["signature"]
        response_id = f"resp-{len(self.requests)}"
        if action == "generateContent":
            return web.json_response(_response(reply, body, model, response_id))
        return await self._stream(request, _chunks(reply, body, model, response_id))

    async def _embed(self, rec: Any) -> web.StreamResponse:
        """``batchEmbedContents``: one ``embed_text`` vector per request's text parts."""
        if self.api_key is not None and rec.headers.get("x-goog-api-key") != self.api_key:
            return web.json_response(INVALID_KEY_BODY, status=400)
        failure = self.next_failure()
        if failure is not None:
            return failure
        body = rec.body if isinstance(rec.body, dict) else {}
        requests = body.get("requests") or []
        if not requests:
            return web.json_response(error_body(400, "requests must not be empty"), status=400)
        embeddings = []
        for item in requests:
            parts = (item.get("content") or {}).get("parts") or []
            text = " ".join(str(p.get("text", "")) for p in parts)
            size = item.get("outputDimensionality") or (item.get("embedContentConfig") or {}).get(
                "outputDimensionality"
            )
            embeddings.append({"values": embed_text(text, size)})
        return web.json_response({"embeddings": embeddings})

    @property
    def embedded(self) -> list[list[str]]:
        """The texts of each ``batchEmbedContents`` request."""
        return [
            [
                " ".join(p.get("text", "") for p in r["content"]["parts"])
                for r in rec.body["requests"]
            ]
            for rec in self.requests
            if rec.path.endswith(":batchEmbedContents")
        ]

    def _invalid(self, body: dict[str, Any]) -> str | None:
        """What the real API would refuse in this request, or None."""
        for i, content in enumerate(body.get("contents") or []):
            if content.get("role") != "model":
                continue
            for j, part in enumerate(content.get("parts") or []):
                call = part.get("functionCall")
                issued = self.signatures.get(_call_key(call)) if call else None
                sent = _get(part, "thoughtSignature")
                if issued is None or (sent is not None and _bytes(sent) == _bytes(issued)):
                    continue
                if sent is None:
                    return (
                        "Function call is missing a thought_signature in functionCall parts. "
                        "This is required for tools to work correctly, and missing "
                        "thought_signature may lead to degraded model performance. Additional "
                        f"data, function call `default_api:{call['name']}` , position {j + 1}. "
                        "Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures "
                        "for more details."
                    )
                return f"Corrupted thought signature (contents[{i}].parts[{j}])."
        config = body.get("generationConfig") or {}
        thinking = _get(config, "thinkingConfig") or {}
        if _get(thinking, "thinkingBudget") is not None and _get(thinking, "thinkingLevel"):
            return "You can only set only one of thinking budget and thinking level."
        if _get(config, "responseJsonSchema") is not None and (
            _get(config, "responseMimeType") != "application/json"
        ):
            return "responseJsonSchema requires responseMimeType to be application/json."
        return None

    async def _stream(
        self, request: web.Request, chunks: list[dict[str, Any]]
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in chunks:
            await response.write(f"data: {json.dumps(chunk)}\r\n\r\n".encode())
        await response.write_eof()
        return response


def _get(obj: dict[str, Any], camel: str) -> Any:
    """A field by its JSON name or its proto (snake_case) name: the API takes both."""
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)
    return obj.get(camel, obj.get(snake))


def _bytes(value: str) -> bytes:
    """Proto JSON ``bytes``: standard or URL-safe base64 (the SDK sends the URL-safe kind)."""
    return base64.b64decode(value.replace("-", "+").replace("_", "/"))


def _call_key(call: dict[str, Any]) -> str:
    """Name and arguments: a replayed call may carry an id the client made up."""
    return f"{call.get('name')}:{json.dumps(call.get('args') or {}, sort_keys=True)}"


def _as_reply(reply: Any) -> dict[str, Any]:
    if isinstance(reply, str):
        return {"text": reply}
    if isinstance(reply, dict):
        spec: dict[str, Any] = dict(reply)
        if "thinking" in spec:
            spec.setdefault("thought", spec.pop("thinking"))
        return spec
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
    """Function-call parts; the first carries the reply's signature (Gemini signs only it)."""
    parts: list[dict[str, Any]] = []
    for call in reply.get("tool_calls", []):
        function_call: dict[str, Any] = {"name": call["name"], "args": call.get("arguments", {})}
        if call.get("id"):
            function_call["id"] = call["id"]
        parts.append({"functionCall": function_call})
    if parts and reply.get("signature"):
        parts[0]["thoughtSignature"] = reply["signature"]
    return parts


def _text_signature(reply: dict[str, Any]) -> dict[str, Any]:
    """Without calls, the signature rides on the last text part."""
    if reply.get("signature") and not reply.get("tool_calls"):
        return {"thoughtSignature": reply["signature"]}
    return {}


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
        parts.append({"text": reply["text"], **_text_signature(reply)})
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
        tail = [{"text": pieces.pop(), **_text_signature(reply)}]
    chunks += [_envelope([{"text": p}], None, running, model, rid) for p in pieces]
    chunks.append(_envelope(tail, reply.get("finish", "STOP"), _usage(reply, body), model, rid))
    return chunks
