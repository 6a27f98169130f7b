"""A loopback stand-in for OpenAI Chat Completions: ``POST /v1/chat/completions``, JSON and SSE.

Point the real ``openai`` SDK at ``server.base_url`` (the value for OPENAI_BASE_URL, ending in
``/v1``). Shapes follow https://platform.openai.com/docs/api-reference/chat (the ``chat.completion``
object, ``chat.completion.chunk`` streaming with ``data: [DONE]``, and the final usage chunk sent
when ``stream_options.include_usage`` is true).

Script (see ``LoopbackServer``): queued ``failures`` first (``server.fail(...)`` builds them in
OpenAI's error shape), then ``replies``, then ``default_reply(body)``. A reply is either

- a ``str``: a plain text answer (``finish_reason: stop``), or
- a ``dict`` in a vendor-neutral form, every key optional::

      {"text": "...",
       "tool_calls": [{"id": "call_1", "name": "lookup", "arguments": {"q": "x"}}],
       "refusal": "I can't help with that.",
       "stop": "end_turn" | "tool_use" | "max_tokens" | "refusal" | <wire finish_reason>,
       "usage": {"input_tokens": 5, "output_tokens": 7, "cache_read_tokens": 900,
                 "reasoning_tokens": 300},
       "stream_error": {"type": "server_error", "message": "boom"},
       "stream_cut": True}

  ``arguments`` may be a ``str`` to send raw (e.g. broken) JSON. ``usage.input_tokens`` is the
  UNCACHED part: ``prompt_tokens`` = input + cache_read, ``cached_tokens`` = cache_read.
  ``stream_error`` (streaming only) sends ``data: {"error": ...}`` after the content and ends the
  stream without a finish chunk or ``[DONE]``; ``stream_cut`` ends it there without the error,
  like a dropped connection. ``reasoning_tokens`` are hidden output: ``completion_tokens`` =
  output + reasoning, with the reasoning part in ``completion_tokens_details``, as OpenAI counts.

Validation, like the real API (HTTP 400 ``invalid_request_error``): ``reasoning_effort`` is
refused by a model that does not reason and a non-default ``temperature`` by one that does
(``REASONING_MODEL``: o-series and gpt-5 names); a ``json_schema`` ``response_format`` needs a
valid ``name`` and a ``schema`` object.

Usage is deterministic: prompt tokens ~= len(json of messages + tools) // 4.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import struct
from typing import Any

from aiohttp import web

from tests.loopback.base import LoopbackServer, ScriptedFailure
from tests.loopback.embedding_model import embed_text

CREATED = 1_700_000_000  # a fixed timestamp keeps answers deterministic

_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
}
_ERRORS: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}


# Which models the loopback API treats as reasoning models (deliberately not the provider's own
# pattern, so the tests compare two independent rules).
REASONING_MODEL = re.compile(r"^(o\d|gpt-5)")
_FORMAT_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _invalid(body: dict[str, Any]) -> tuple[str, str, str] | None:
    """(message, param, code) of what the real API would refuse in this request, or None."""
    reasoning = bool(REASONING_MODEL.match(str(body.get("model", ""))))
    if "reasoning_effort" in body and not reasoning:
        message = "Unsupported parameter: 'reasoning_effort' is not supported with this model."
        return message, "reasoning_effort", "unsupported_parameter"
    if reasoning and body.get("temperature", 1) != 1:
        message = (
            f"Unsupported value: 'temperature' does not support {body['temperature']} with this "
            "model. Only the default (1) value is supported."
        )
        return message, "temperature", "unsupported_value"
    response_format = body.get("response_format") or {}
    if response_format.get("type") == "json_schema":
        spec = response_format.get("json_schema") or {}
        if not _FORMAT_NAME.match(str(spec.get("name", ""))):
            return "Invalid 'response_format.json_schema.name'.", "response_format", "invalid_value"
        if not isinstance(spec.get("schema"), dict):
            return (
                "Invalid 'response_format.json_schema.schema'.",
                "response_format",
                "invalid_value",
            )
    return None


class OpenAIServer(LoopbackServer):
    embed_delay = 0.0  # seconds before each embeddings answer (a slow endpoint, for timeouts)

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/v1/chat/completions", self._completions),
            web.post("/v1/embeddings", self._embeddings),
            web.get("/v1/models", self.list_models),
        ]

    @property
    def embedded(self) -> list[Any]:
        """The inputs the embeddings endpoint was asked about (one list per request)."""
        return [r.body["input"] for r in self.requests if r.path == "/v1/embeddings"]

    async def _embeddings(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/embeddings``: ``embed_text`` vectors, as floats or base64 float32 (the
        SDK asks for base64 unless told otherwise). ``embed_delay`` seconds pass first."""
        rec = await self.record(request)
        await asyncio.sleep(self.embed_delay)
        failure = self.next_failure()
        if failure is not None:
            return failure
        body: dict[str, Any] = rec.body if isinstance(rec.body, dict) else {}
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else list(inputs or [])
        if not texts or not all(isinstance(t, str) and t for t in texts):
            error = {
                "message": "'input' must be a non-empty string or array of strings",
                "type": "invalid_request_error",
                "param": "input",
                "code": None,
            }
            return web.json_response({"error": error}, status=400)
        data = []
        for i, text in enumerate(texts):
            vector = embed_text(text, body.get("dimensions"))
            value: Any = vector
            if body.get("encoding_format") == "base64":
                value = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            data.append({"object": "embedding", "index": i, "embedding": value})
        tokens = sum(len(t) // 4 + 1 for t in texts)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        model = body.get("model", "")
        return web.json_response({"object": "list", "data": data, "model": model, "usage": usage})

    @property
    def base_url(self) -> str:
        """The value for OPENAI_BASE_URL (the SDK appends ``/chat/completions``)."""
        return self.url + "/v1"

    def fail(
        self,
        status: int,
        message: str = "scripted failure",
        *,
        error_type: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Queue one error answer in the API's shape (``{"error": {message, type, param, code}}``)."""
        default_type, default_code = _ERRORS.get(status, ("server_error", None))
        error = {
            "message": message,
            "type": error_type or default_type,
            "param": None,
            "code": code or default_code,
        }
        self.failures.append(ScriptedFailure(status, {"error": error}, dict(headers or {})))

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        rec = await self.record(request)
        failure = self.next_failure()
        if failure is not None:
            return failure
        body: dict[str, Any] = rec.body if isinstance(rec.body, dict) else {}
        problem = _invalid(body)
        if problem is not None:
            text, param, code = problem
            error = {"message": text, "type": "invalid_request_error", "param": param}
            return web.json_response({"error": {**error, "code": code}}, status=400)
        reply = _normalise(self.next_reply(body), body)
        number = len(self.requests)
        headers = {"x-request-id": f"req_loopback{number:04d}"}
        if body.get("stream"):
            return await self._stream(request, body, reply, number, headers)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": reply["text"] or None,
            "refusal": reply["refusal"],
            "annotations": [],
        }
        if reply["tool_calls"]:
            message["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in reply["tool_calls"]
            ]
        completion = {
            **_envelope(body, number, "chat.completion"),
            "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": reply["stop"]}
            ],
            "usage": _usage(reply),
        }
        return web.json_response(completion, headers=headers)

    async def _stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        reply: dict[str, Any],
        number: int,
        headers: dict[str, str],
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                **headers,
            }
        )
        await response.prepare(request)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        envelope = _envelope(body, number, "chat.completion.chunk")

        async def send(data: dict[str, Any] | str) -> None:
            payload = data if isinstance(data, str) else json.dumps(data)
            await response.write(f"data: {payload}\n\n".encode())

        async def chunk(delta: dict[str, Any], finish: str | None = None) -> None:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            data: dict[str, Any] = {**envelope, "choices": [choice]}
            if include_usage:
                data["usage"] = None
            await send(data)

        await chunk({"role": "assistant", "content": "", "refusal": None})
        for piece in _pieces(reply["text"]):
            await chunk({"content": piece})
        if reply["refusal"]:
            await chunk({"refusal": reply["refusal"]})
        for index, call in enumerate(reply["tool_calls"]):
            first = {
                "index": index,
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": ""},
            }
            await chunk({"tool_calls": [first]})
            raw = call["arguments"]
            for piece in (raw[: len(raw) // 2], raw[len(raw) // 2 :]):
                await chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        if reply["stream_error"] is not None:
            error = {"param": None, "code": None, **reply["stream_error"]}
            await send({"error": error})
        elif not reply["stream_cut"]:
            await chunk({}, reply["stop"])
            if include_usage:
                await send({**envelope, "choices": [], "usage": _usage(reply)})
            await send("[DONE]")
        await response.write_eof()
        return response


def _normalise(reply: Any, body: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"text": reply} if isinstance(reply, str) else dict(reply)
    text = str(spec.get("text") or "")
    calls = []
    for i, c in enumerate(spec.get("tool_calls") or []):
        arguments = c.get("arguments", {})
        calls.append(
            {
                "id": c.get("id") or f"call_loopback{i:04d}",
                "name": c["name"],
                "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
            }
        )
    refusal = spec.get("refusal") or None
    stop = spec.get("stop") or ("tool_use" if calls else "end_turn")
    prompt = json.dumps([body.get("messages"), body.get("tools")])
    output = text + (refusal or "") + "".join(c["arguments"] for c in calls)
    usage = {
        "input_tokens": max(1, len(prompt) // 4),
        "output_tokens": max(1, len(output) // 4),
        "cache_read_tokens": 0,
        "reasoning_tokens": 0,
    }
    usage.update(spec.get("usage") or {})
    return {
        "text": text,
        "tool_calls": calls,
        "refusal": refusal,
        "stop": _FINISH.get(stop, stop),
        "usage": usage,
        "stream_error": spec.get("stream_error"),
        "stream_cut": bool(spec.get("stream_cut")),
    }


def _envelope(body: dict[str, Any], number: int, obj: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-loopback{number:04d}",
        "object": obj,
        "created": CREATED,
        "model": body.get("model", "gpt-loopback"),
        "service_tier": "default",
        "system_fingerprint": "fp_loopback",
    }


def _usage(reply: dict[str, Any]) -> dict[str, Any]:
    usage = reply["usage"]
    prompt = usage["input_tokens"] + usage["cache_read_tokens"]
    completion = usage["output_tokens"] + usage["reasoning_tokens"]
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": usage["cache_read_tokens"], "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": usage["reasoning_tokens"],
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _pieces(text: str) -> list[str]:
    """Split into word-sized deltas (each keeps its trailing space) like a real stream."""
    words = text.split(" ")
    return [p for p in [w + " " for w in words[:-1]] + [words[-1]] if p]
