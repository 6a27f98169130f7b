"""A loopback stand-in for the Anthropic Messages API: ``POST /v1/messages``, JSON and SSE.

Point the real ``anthropic`` SDK at ``server.base_url`` (the value for ANTHROPIC_BASE_URL) and its
request building, SSE decoding and error mapping all run for real. Shapes follow
https://docs.anthropic.com/en/api/messages, .../messages-streaming and .../errors.

Script (see ``LoopbackServer``): queued ``failures`` first (``server.fail(...)`` builds them in
Anthropic's error shape), then ``replies``, then ``default_reply(body)``. A reply is either

- a ``str``: a plain text answer (``stop_reason: end_turn``), or
- a ``dict`` in a vendor-neutral form, every key optional::

      {"text": "...",
       "tool_calls": [{"id": "toolu_1", "name": "lookup", "arguments": {"q": "x"}}],
       "stop": "end_turn" | "tool_use" | "max_tokens" | "refusal" | "stop_sequence" | <wire value>,
       "usage": {"input_tokens": 5, "output_tokens": 7,
                 "cache_write_tokens": 100, "cache_read_tokens": 900},   # overrides defaults
       "stream_error": {"type": "overloaded_error", "message": "Overloaded"},
       "stream_cut": True}

  ``stop`` defaults to ``tool_use`` when there are tool calls. ``stream_error`` (streaming only)
  sends an ``event: error`` after the content blocks instead of ``message_delta``/``message_stop``;
  ``stream_cut`` just ends the stream there, like a dropped connection.

Usage is deterministic: input tokens ~= len(json of system + tools + messages) // 4.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from tests.loopback.base import LoopbackServer, ScriptedFailure

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    409: "conflict_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


class AnthropicServer(LoopbackServer):
    def routes(self) -> list[web.RouteDef]:
        return [web.post("/v1/messages", self._messages)]

    @property
    def base_url(self) -> str:
        """The value for ANTHROPIC_BASE_URL (the SDK appends ``/v1/messages``)."""
        return self.url

    def fail(
        self,
        status: int,
        message: str = "scripted failure",
        *,
        error_type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Queue one error answer in the API's shape (``{"type": "error", "error": {...}}``)."""
        kind = error_type or _ERROR_TYPES.get(status, "api_error")
        body = {
            "type": "error",
            "error": {"type": kind, "message": message},
            "request_id": f"req_loopback{len(self.failures):04d}",
        }
        self.failures.append(ScriptedFailure(status, body, dict(headers or {})))

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        rec = await self.record(request)
        failure = self.next_failure()
        if failure is not None:
            return failure
        body: dict[str, Any] = rec.body if isinstance(rec.body, dict) else {}
        reply = _normalise(self.next_reply(body), body)
        number = len(self.requests)
        if body.get("stream"):
            return await self._stream(request, body, reply, number)
        message = _message(body, number)
        message["content"] = _content(reply)
        message["stop_reason"] = reply["stop"]
        message["usage"] = _usage(reply, final=True)
        return web.json_response(message, headers={"request-id": f"req_loopback{number:04d}"})

    async def _stream(
        self, request: web.Request, body: dict[str, Any], reply: dict[str, Any], number: int
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                "request-id": f"req_loopback{number:04d}",
            }
        )
        await response.prepare(request)

        async def send(event: str, data: dict[str, Any]) -> None:
            frame = f"event: {event}\ndata: {json.dumps(data)}\n\n"
            await response.write(frame.encode())

        start = _message(body, number)
        start.update(content=[], stop_reason=None, usage=_usage(reply, final=False))
        await send("message_start", {"type": "message_start", "message": start})
        await send("ping", {"type": "ping"})
        index = 0
        if reply["text"]:
            await send(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                },
            )
            for piece in _pieces(reply["text"]):
                delta = {"type": "text_delta", "text": piece}
                await send(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            await send("content_block_stop", {"type": "content_block_stop", "index": index})
            index += 1
        for call in reply["tool_calls"]:
            block = {"type": "tool_use", "id": call["id"], "name": call["name"], "input": {}}
            await send(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": block},
            )
            raw = (
                call["arguments"]
                if isinstance(call["arguments"], str)
                else json.dumps(call["arguments"])
            )
            for piece in ["", raw[: len(raw) // 2], raw[len(raw) // 2 :]]:
                delta = {"type": "input_json_delta", "partial_json": piece}
                await send(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            await send("content_block_stop", {"type": "content_block_stop", "index": index})
            index += 1
        if reply["stream_error"] is not None:
            await send("error", {"type": "error", "error": reply["stream_error"]})
        elif not reply["stream_cut"]:
            await send(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": reply["stop"], "stop_sequence": None},
                    "usage": {"output_tokens": reply["usage"]["output_tokens"]},
                },
            )
            await send("message_stop", {"type": "message_stop"})
        await response.write_eof()
        return response


def _normalise(reply: Any, body: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"text": reply} if isinstance(reply, str) else dict(reply)
    text = str(spec.get("text") or "")
    calls = [
        {
            "id": c.get("id") or f"toolu_loopback{i:04d}",
            "name": c["name"],
            "arguments": c.get("arguments", {}),
        }
        for i, c in enumerate(spec.get("tool_calls") or [])
    ]
    stop = spec.get("stop") or ("tool_use" if calls else "end_turn")
    prompt = json.dumps([body.get("system"), body.get("tools"), body.get("messages")])
    output = text + "".join(json.dumps(c["arguments"]) for c in calls)
    usage = {
        "input_tokens": max(1, len(prompt) // 4),
        "output_tokens": max(1, len(output) // 4),
        "cache_write_tokens": 0,
        "cache_read_tokens": 0,
    }
    usage.update(spec.get("usage") or {})
    return {
        "text": text,
        "tool_calls": calls,
        "stop": stop,
        "usage": usage,
        "stream_error": spec.get("stream_error"),
        "stream_cut": bool(spec.get("stream_cut")),
    }


def _message(body: dict[str, Any], number: int) -> dict[str, Any]:
    return {
        "id": f"msg_loopback{number:04d}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "claude-loopback"),
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {},
    }


def _content(reply: dict[str, Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if reply["text"]:
        blocks.append({"type": "text", "text": reply["text"]})
    for call in reply["tool_calls"]:
        blocks.append(
            {"type": "tool_use", "id": call["id"], "name": call["name"], "input": call["arguments"]}
        )
    return blocks


def _usage(reply: dict[str, Any], *, final: bool) -> dict[str, Any]:
    usage = reply["usage"]
    return {
        "input_tokens": usage["input_tokens"],
        # message_start reports the output so far (1); message_delta carries the total.
        "output_tokens": usage["output_tokens"] if final else 1,
        "cache_creation_input_tokens": usage["cache_write_tokens"],
        "cache_read_input_tokens": usage["cache_read_tokens"],
        "service_tier": "standard",
    }


def _pieces(text: str) -> list[str]:
    """Split into word-sized deltas (each keeps its trailing space) like a real stream."""
    words = text.split(" ")
    return [p for p in [w + " " for w in words[:-1]] + [words[-1]] if p]
