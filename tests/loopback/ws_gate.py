"""A websocket gate in front of a loopback server, to take a platform's socket endpoint down.

Why: a client SDK that lost its socket reconnects by itself, at once, so a test cannot see
the moment the platform is unreachable unless something refuses it. ``WebsocketGate`` relays
each connection to ``upstream`` (frames both ways, the query string passed on) until
``go_down()``: then every relayed socket is closed and new connections get HTTP 503 (counted
in ``refused``) until ``come_back()``. The loopback behind it stays untouched.
"""

from __future__ import annotations

import asyncio
from typing import Self

import aiohttp
from aiohttp import WSMsgType, web


class WebsocketGate:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.down = False
        self.refused = 0
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._live: set[web.WebSocketResponse] = set()

    async def __aenter__(self) -> Self:
        app = web.Application()
        app.add_routes([web.get("/{tail:.*}", self._relay)])
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"ws://{host}:{port}/"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def go_down(self) -> None:
        self.down = True
        for socket in list(self._live):
            await socket.close()

    def come_back(self) -> None:
        self.down = False

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        if self.down:
            self.refused += 1
            return web.Response(status=503, text="unavailable")
        downstream = web.WebSocketResponse()
        await downstream.prepare(request)
        self._live.add(downstream)
        url = self.upstream + (f"?{request.query_string}" if request.query_string else "")
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.ws_connect(url) as upstream,
            ):
                pumps = [
                    asyncio.create_task(_pump(downstream, upstream)),
                    asyncio.create_task(_pump(upstream, downstream)),
                ]
                await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
                for pump in pumps:
                    pump.cancel()
                await asyncio.gather(*pumps, return_exceptions=True)
        finally:
            self._live.discard(downstream)
            await downstream.close()
        return downstream


async def _pump(
    source: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
    sink: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
) -> None:
    async for message in source:
        if message.type is WSMsgType.TEXT:
            await sink.send_str(message.data)
        elif message.type is WSMsgType.BINARY:
            await sink.send_bytes(message.data)
    await sink.close()
