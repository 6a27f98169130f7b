"""The loopback OpenAI API with the moderation endpoint: ``POST /v1/moderations`` next to Chat
Completions, so the official ``openai`` SDK's ``moderations.create`` runs against it.

Shape per https://platform.openai.com/docs/api-reference/moderations (the ``moderation`` object:
``flagged``, ``categories``, ``category_scores``, ``category_applied_input_types``). Script:
``flag`` maps a word to the category it flags (case-insensitive, anywhere in the input);
``moderation_failures`` are answered first (``fail_moderation``), and ``moderation_delay``
seconds pass before each answer (a slow endpoint, for timeouts).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from aiohttp import web

from tests.loopback.base import ScriptedFailure
from tests.loopback.openai_server import OpenAIServer

CATEGORIES = (
    "harassment",
    "harassment/threatening",
    "hate",
    "hate/threatening",
    "illicit",
    "illicit/violent",
    "self-harm",
    "self-harm/instructions",
    "self-harm/intent",
    "sexual",
    "sexual/minors",
    "violence",
    "violence/graphic",
)


class ModeratingOpenAIServer(OpenAIServer):
    def __init__(self) -> None:
        super().__init__()
        self.flag: dict[str, str] = {}
        self.moderation_failures: deque[ScriptedFailure] = deque()
        self.moderation_delay = 0.0

    def routes(self) -> list[web.RouteDef]:
        return [*super().routes(), web.post("/v1/moderations", self._moderations)]

    def fail_moderation(self, status: int, message: str = "scripted failure") -> None:
        error = {"message": message, "type": "server_error", "param": None, "code": None}
        self.moderation_failures.append(ScriptedFailure(status, {"error": error}))

    @property
    def moderated(self) -> list[Any]:
        """The inputs the moderation endpoint was asked about."""
        return [r.body["input"] for r in self.requests if r.path == "/v1/moderations"]

    @property
    def completions(self) -> int:
        return sum(1 for r in self.requests if r.path == "/v1/chat/completions")

    async def _moderations(self, request: web.Request) -> web.Response:
        rec = await self.record(request)
        if self.moderation_delay:
            await asyncio.sleep(self.moderation_delay)
        if self.moderation_failures:
            failure = self.moderation_failures.popleft()
            return web.json_response(failure.body, status=failure.status)
        body: dict[str, Any] = rec.body if isinstance(rec.body, dict) else {}
        inputs = body.get("input", "")
        texts = inputs if isinstance(inputs, list) else [inputs]
        return web.json_response(
            {
                "id": f"modr-loopback{len(self.requests):04d}",
                "model": body.get("model", "omni-moderation-latest"),
                "results": [self._result(str(text)) for text in texts],
            }
        )

    def _result(self, text: str) -> dict[str, Any]:
        hits = {cat for word, cat in self.flag.items() if word.lower() in text.lower()}
        return {
            "flagged": bool(hits),
            "categories": {c: c in hits for c in CATEGORIES},
            "category_scores": {c: 0.99 if c in hits else 0.001 for c in CATEGORIES},
            "category_applied_input_types": {c: ["text"] for c in CATEGORIES},
        }
