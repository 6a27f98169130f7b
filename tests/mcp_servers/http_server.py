"""The echo server's tools over streamable HTTP on 127.0.0.1, for the MCP client tests.

Usage: ``python http_server.py [--port N] [--token T]``. It binds the socket itself (port 0
picks a free one), then prints ``PORT <n>`` on stdout: the listening socket already queues
connections, so the test can connect as soon as it reads that line (no sleep, no polling).
With ``--token`` every request must carry ``Authorization: Bearer <token>`` (401 otherwise),
which lets a test check that configured headers reach the server.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys

import uvicorn
from echo_server import server  # the same tools; this directory is on sys.path as a script
from starlette.types import ASGIApp, Receive, Scope, Send


def _require_token(app: ASGIApp, token: str) -> ASGIApp:
    expected = f"Bearer {token}".encode()

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != expected:
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await app(scope, receive, send)

    return guarded


async def _serve(port: int, token: str | None) -> None:
    app: ASGIApp = server.streamable_http_app(host="127.0.0.1")
    if token:
        app = _require_token(app, token)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve(sockets=[sock])


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default=None)
    args = parser.parse_args(argv)
    asyncio.run(_serve(args.port, args.token))


if __name__ == "__main__":
    main(sys.argv[1:])
