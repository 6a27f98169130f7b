"""What the MCP tests share (tests/test_mcp.py and test_mcp_http.py).

MCP servers as Chorus tools, against real MCP servers written with the official ``mcp`` SDK.

``tests/mcp_servers/echo_server.py`` runs over stdio (launched with ``sys.executable``) and
``http_server.py`` serves the same tools over streamable HTTP on a free loopback port. Nothing
sleeps to wait: the tests await the server's "PORT" line, the calls themselves and the manager's
close; reconnect backoff goes through an injected ``sleep`` and the cooldown through a clock.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.events import Author, ChatMessage, ConversationKey
from bot.tools.base import Tool, ToolContext
from bot.tools.mcp import MCPManager
from bot.tools.mcp_config import parse_config

SERVERS = Path(__file__).resolve().parent / "mcp_servers"


ECHO = str(SERVERS / "echo_server.py")


HTTP = str(SERVERS / "http_server.py")


LONG_TOOL = "a_tool_with_a_rather_long_name_that_needs_shortening_for_models"


ECHO_TOOLS = sorted(
    [
        "add",
        "crash",
        "fail",
        "getenv",
        "pid",
        "pixel",
        "protocol_error",
        "refuse",
        "shout",
        "slow",
        "stats",
        LONG_TOOL,
    ]
)


WAIT = 60  # upper bound for any single await on a subprocess


def ctx() -> ToolContext:
    message = ChatMessage(
        platform="console",
        id="m1",
        conversation=ConversationKey(platform="console", channel="c1"),
        author=Author(id="u1", display_name="Ann"),
        text="hi",
    )
    return ToolContext(message=message)


def echo(*args: str, **extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [ECHO, *args], **extra}


def manager(servers: dict[str, Any], **kwargs: Any) -> MCPManager:
    return MCPManager(parse_config(json.dumps({"mcpServers": servers})), **kwargs)


@asynccontextmanager
async def running(servers: dict[str, Any], **kwargs: Any) -> AsyncIterator[MCPManager]:
    mgr = manager(servers, **kwargs)
    try:
        await asyncio.wait_for(mgr.start(), WAIT)
        yield mgr
    finally:
        await asyncio.wait_for(mgr.aclose(), WAIT)


def by_name(mgr: MCPManager) -> dict[str, Tool]:
    return {t.spec.name: t for t in mgr.tools()}


async def call(mgr: MCPManager, tool: str, /, **arguments: Any) -> str:
    return await asyncio.wait_for(by_name(mgr)[tool].call(arguments, ctx()), WAIT)


def children() -> set[int]:
    """Processes whose parent is this one, zombies included (Linux ``/proc``)."""
    kids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
                kids.add(int(entry.name))
    return kids


def exists(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


class FakeTime:
    """Records backoff sleeps (returning at once) and serves a clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    def clock(self) -> float:
        return self.now


@dataclass
class HttpServer:
    proc: asyncio.subprocess.Process
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
        await asyncio.wait_for(self.proc.communicate(), WAIT)


async def start_http(port: int = 0, token: str | None = None) -> HttpServer:
    args = [HTTP, "--port", str(port), *(["--token", token] if token else [])]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *args, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), WAIT)
    assert line.startswith(b"PORT "), line
    return HttpServer(proc, int(line.split()[1]))
