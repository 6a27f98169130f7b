"""A loopback stand-in for the Anthropic Messages API: ``POST /v1/messages``, JSON and SSE.

Point the real ``anthropic`` SDK at ``server.base_url`` (the value for ANTHROPIC_BASE_URL) and its
request building, SSE decoding and error mapping all run for real. Shapes follow
https://docs.anthropic.com/en/api/messages, .../messages-streaming and .../errors.

Script (see ``LoopbackServer``): queued ``failures`` first (``server.fail(...)`` builds them in
Anthropic's error shape), then ``replies``, then ``default_reply(body)``. A reply is either

- a ``str``: a plain text answer (``stop_reason: end_turn``), or
- a ``dict`` in a vendor-neutral form, every key optional::

      {"text": "...",
       "thinking": "Let me think...", "signature": "sig-1",   # a signed thinking block first
       "redacted": "opaque-data",                            # a redacted_thinking block
       "tool_calls": [{"id": "toolu_1", "name": "lookup", "arguments": {"q": "x"}}],
       "stop": "end_turn" | "tool_use" | "max_tokens" | "refusal" | "stop_sequence" | <wire value>,
       "usage": {"input_tokens": 5, "output_tokens": 7,
                 "cache_write_tokens": 100, "cache_read_tokens": 900},   # overrides defaults
       "stream_error": {"type": "overloaded_error", "message": "Overloaded"},
       "stream_cut": True,
       "chunk_delay": 0.1}                                  # seconds between text deltas

  ``stop`` defaults to ``tool_use`` when there are tool calls. ``stream_error`` (streaming only)
  sends an ``event: error`` after the content blocks instead of ``message_delta``/``message_stop``;
  ``stream_cut`` just ends the stream there, like a dropped connection. ``signature`` defaults
  to a fresh ``sig_loopback<n>``; a streamed thinking block arrives as ``thinking_delta`` pieces
  and one ``signature_delta``, as the real API sends it. ``chunk_delay`` paces a model that
  writes slowly: the text's word-sized deltas come that far apart, and an unstreamed answer
  waits as long as its stream would take in all.

Validation, like the real API (each a 400 ``invalid_request_error``): with ``thinking`` enabled,
``budget_tokens`` must be >= 1024 and below ``max_tokens``, ``temperature`` may not be sent (other
than 1), and the final assistant turn, when it holds a ``tool_use``, must start with a thinking
block; any replayed thinking block must carry a signature this server issued for that very text
(``redacted_thinking`` data likewise); ``output_config.format`` must be a ``json_schema`` format.

Usage is deterministic: input tokens ~= len(json of system + tools + messages) // 4.
"""

from __future__ import annotations

import asyncio
import json
import time
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


_THINKING_REQUIRED = (
    "messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
    "`{found}`. When `thinking` is enabled, a final `assistant` message must start with a "
    "thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We "
    "recommend you include thinking blocks from previous turns. To avoid this requirement, "
    "disable `thinking`. Please consult our documentation at "
    "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
)


class AnthropicServer(LoopbackServer):
    def __init__(self) -> None:
        super().__init__()
        self.signatures: dict[str, str] = {}  # issued signature -> the thinking text it signs
        self.redacted: set[str] = set()  # issued redacted_thinking data
        self.chunk_times: list[float] = []  # when each paced text delta was sent (monotonic)
        self.arrivals: list[float] = []  # when each request came (monotonic)

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/v1/messages", self._messages), web.get("/v1/models", self.list_models)]

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
        body = _error(status, message, error_type, len(self.failures))
        self.failures.append(ScriptedFailure(status, body, dict(headers or {})))

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        self.arrivals.append(time.monotonic())
        rec = await self.record(request)
        failure = self.next_failure()
        if failure is not None:
            return failure
        body: dict[str, Any] = rec.body if isinstance(rec.body, dict) else {}
        problem = self._invalid(body)
        if problem is not None:
            return web.json_response(_error(400, problem, None, len(self.requests)), status=400)
        number = len(self.requests)
        reply = _normalise(self.next_reply(body), body, number)
        if reply["thinking"] is not None:
            self.signatures[reply["signature"]] = reply["thinking"]
        if reply["redacted"] is not None:
            self.redacted.add(reply["redacted"])
        if body.get("stream"):
            return await self._stream(request, body, reply, number)
        if reply["chunk_delay"]:  # as long as writing it takes, then all at once
            await asyncio.sleep(reply["chunk_delay"] * len(_pieces(reply["text"])))
        message = _message(body, number)
        message["content"] = _content(reply)
        message["stop_reason"] = reply["stop"]
        message["usage"] = _usage(reply, final=True)
        return web.json_response(message, headers={"request-id": f"req_loopback{number:04d}"})

    def _invalid(self, body: dict[str, Any]) -> str | None:
        """What the real API would refuse in this request, or None."""
        output_format = (body.get("output_config") or {}).get("format")
        if output_format is not None and (
            output_format.get("type") != "json_schema"
            or not isinstance(output_format.get("schema"), dict)
        ):
            return "output_config.format: expected a json_schema format with a schema"
        messages = body.get("messages") or []
        for i, message in enumerate(messages):
            for j, block in enumerate(message.get("content") or []):
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "thinking" and (
                    self.signatures.get(block.get("signature", "")) != block.get("thinking")
                ):
                    return f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                if block.get("type") == "redacted_thinking" and block.get("data") not in (
                    self.redacted
                ):
                    return f"messages.{i}.content.{j}: Invalid `data` in `redacted_thinking` block"
        thinking = body.get("thinking") or {}
        if thinking.get("type") != "enabled":
            return None
        budget = thinking.get("budget_tokens", 0)
        if budget < 1024:
            return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
        if body.get("max_tokens", 0) <= budget:
            return "`max_tokens` must be greater than `thinking.budget_tokens`"
        if body.get("temperature", 1) != 1:
            return "`temperature` may only be set to 1 when thinking is enabled"
        assistant = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
        if assistant:
            index = assistant[-1]
            content = messages[index].get("content") or []
            types = [b.get("type") for b in content if isinstance(b, dict)]
            if "tool_use" in types and types[0] not in ("thinking", "redacted_thinking"):
                return _THINKING_REQUIRED.format(index=index, found=types[0])
        return None

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
        for index, (block, deltas) in enumerate(_stream_blocks(reply)):
            await send(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": block},
            )
            for delta in deltas:
                if delta.get("type") == "text_delta" and reply["chunk_delay"]:
                    await asyncio.sleep(reply["chunk_delay"])
                    self.chunk_times.append(time.monotonic())  # (paced ones: for timings)
                await send(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            await send("content_block_stop", {"type": "content_block_stop", "index": index})
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


def _error(status: int, message: str, error_type: str | None, number: int) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": error_type or _ERROR_TYPES.get(status, "api_error"), "message": message},
        "request_id": f"req_loopback{number:04d}",
    }


def _normalise(reply: Any, body: dict[str, Any], number: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"text": reply} if isinstance(reply, str) else dict(reply)
    text = str(spec.get("text") or "")
    thinking = spec.get("thinking")
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
    output = (thinking or "") + text + "".join(json.dumps(c["arguments"]) for c in calls)
    usage = {
        "input_tokens": max(1, len(prompt) // 4),
        "output_tokens": max(1, len(output) // 4),
        "cache_write_tokens": 0,
        "cache_read_tokens": 0,
    }
    usage.update(spec.get("usage") or {})
    return {
        "text": text,
        "thinking": thinking,
        "signature": spec.get("signature") or f"sig_loopback{number:04d}",
        "redacted": spec.get("redacted"),
        "tool_calls": calls,
        "stop": stop,
        "usage": usage,
        "stream_error": spec.get("stream_error"),
        "stream_cut": bool(spec.get("stream_cut")),
        "chunk_delay": float(spec.get("chunk_delay") or 0.0),
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
    if reply["thinking"] is not None:
        blocks.append(
            {"type": "thinking", "thinking": reply["thinking"], "signature": reply["signature"]}
        )
    if reply["redacted"] is not None:
        blocks.append({"type": "redacted_thinking", "data": reply["redacted"]})
    if reply["text"]:
        blocks.append({"type": "text", "text": reply["text"]})
    for call in reply["tool_calls"]:
        blocks.append(
            {"type": "tool_use", "id": call["id"], "name": call["name"], "input": call["arguments"]}
        )
    return blocks


def _stream_blocks(reply: dict[str, Any]) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Each content block as its ``content_block_start`` payload and the deltas that fill it."""
    blocks: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    if reply["thinking"] is not None:
        deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(reply["thinking"])]
        deltas.append({"type": "signature_delta", "signature": reply["signature"]})
        blocks.append(({"type": "thinking", "thinking": "", "signature": ""}, deltas))
    if reply["redacted"] is not None:
        blocks.append(({"type": "redacted_thinking", "data": reply["redacted"]}, []))
    if reply["text"]:
        deltas = [{"type": "text_delta", "text": p} for p in _pieces(reply["text"])]
        blocks.append(({"type": "text", "text": ""}, deltas))
    for call in reply["tool_calls"]:
        args = call["arguments"]
        raw = args if isinstance(args, str) else json.dumps(args)
        pieces = ["", raw[: len(raw) // 2], raw[len(raw) // 2 :]]
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces]
        block = {"type": "tool_use", "id": call["id"], "name": call["name"], "input": {}}
        blocks.append((block, deltas))
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
