"""A scripted provider: the in-memory twin of the vendor providers, for tests and demos.

It answers from a queue of prepared responses (or a function of the request) and records every
request, so tests can assert on exactly what the agent sent without any network.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from typing import ClassVar

from bot.llm.errors import LLMError
from bot.llm.types import LLMRequest, LLMResponse, StreamEvent, TextDelta, TextPart, Usage

Script = LLMResponse | str | Exception
Responder = Callable[[LLMRequest], Script]


def _echo(request: LLMRequest) -> Script:
    last = request.messages[-1].text if request.messages else ""
    return f"echo: {last}"


class ScriptedProvider:
    """Pops the next scripted item per call; falls back to ``responder`` (echo by default)."""

    name: ClassVar[str] = "scripted"

    def __init__(
        self, script: Iterable[Script] = (), *, responder: Responder | None = None
    ) -> None:
        self.script: deque[Script] = deque(script)
        self.responder: Responder = responder or _echo
        self.requests: list[LLMRequest] = []
        self.closed = False

    def _next(self, request: LLMRequest) -> LLMResponse:
        self.requests.append(request)
        item = self.script.popleft() if self.script else self.responder(request)
        if isinstance(item, Exception):
            raise item
        if isinstance(item, str):
            usage = Usage(
                input_tokens=sum(len(m.text) for m in request.messages) // 4 + 1,
                output_tokens=len(item) // 4 + 1,
            )
            return LLMResponse(
                parts=(TextPart(text=item),),
                stop_reason="end_turn",
                usage=usage,
                model=request.model,
            )
        return item

    async def complete(self, request: LLMRequest) -> LLMResponse:
        return self._next(request)

    async def stream(self, request: LLMRequest) -> AsyncIterator[StreamEvent]:
        response = self._next(request)
        for piece in re.split(r"(?<= )", response.text):
            if piece:
                yield TextDelta(text=piece)
        yield response

    async def aclose(self) -> None:
        self.closed = True


__all__ = ["LLMError", "ScriptedProvider"]
