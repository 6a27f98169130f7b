"""A small aiohttp server base for loopback stand-ins of vendor and platform APIs.

Each vendor server records every request (path, headers, JSON body) and answers from a script:
queued failures first (status, body, headers), then queued reply texts, then ``default_reply``.
The real SDKs are pointed at ``server.url`` so their own request and parsing code runs.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Self

from aiohttp import web


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class ScriptedFailure:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


def _default_reply(body: Any) -> str:
    return "ok"


class LoopbackServer:
    """Subclasses add routes in ``routes()``; ``start()`` binds 127.0.0.1 on a free port."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.failures: deque[ScriptedFailure] = deque()
        self.replies: deque[Any] = deque()
        self.default_reply: Callable[[Any], Any] = _default_reply
        self._runner: web.AppRunner | None = None
        self._recorded: asyncio.Condition | None = None
        self.url = ""
        # The model list (``chorus init`` tries a key with it), kept apart from ``requests``.
        self.listings: list[Recorded] = []
        self.listing_failures: deque[ScriptedFailure] = deque()

    def routes(self) -> list[web.RouteDef]:
        raise NotImplementedError

    async def start(self) -> Self:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.add_routes(self.routes())
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        sockets = site._server.sockets  # type: ignore[union-attr]
        port = sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- helpers for subclasses -------------------------------------------------------------
    async def record(self, request: web.Request) -> Recorded:
        raw = await request.read()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        rec = Recorded(
            method=request.method,
            path=request.path,
            query=dict(request.query),
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body,
        )
        self.requests.append(rec)
        async with self._recorded_condition():
            self._recorded_condition().notify_all()
        return rec

    async def wait_for(self, predicate: Callable[[], bool], limit: float = 30.0) -> None:
        """Until ``predicate()`` holds, checked after each recorded request (at most ``limit``
        seconds): a test waits on what the server saw, never on a sleep."""
        condition = self._recorded_condition()
        async with asyncio.timeout(limit), condition:
            await condition.wait_for(predicate)

    def _recorded_condition(self) -> asyncio.Condition:
        if self._recorded is None:
            self._recorded = asyncio.Condition()
        return self._recorded

    async def list_models(self, request: web.Request) -> web.Response:
        """``GET .../models``: recorded in ``listings``; ``listing_failures`` answer first."""
        self.listings.append(
            Recorded(
                request.method,
                request.path,
                dict(request.query),
                {k.lower(): v for k, v in request.headers.items()},
                None,
            )
        )
        if self.listing_failures:
            failure = self.listing_failures.popleft()
            return web.json_response(failure.body, status=failure.status)
        return web.json_response({"data": [{"id": "loopback-model", "type": "model"}]})

    def next_failure(self) -> web.Response | None:
        if not self.failures:
            return None
        failure = self.failures.popleft()
        return web.json_response(failure.body, status=failure.status, headers=failure.headers)

    def next_reply(self, body: Any) -> Any:
        return self.replies.popleft() if self.replies else self.default_reply(body)

    @property
    def bodies(self) -> list[Any]:
        return [r.body for r in self.requests]
