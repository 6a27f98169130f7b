"""A small stdio MCP server for the MCP client tests, written with the official ``mcp`` package.

Tools: ``add``, ``shout``, ``fail`` and ``crash`` (raise: the SDK turns that into an
``isError`` result), ``protocol_error`` (a JSON-RPC error), ``refuse`` (returns an ``isError``
result itself), ``pid`` (so a test can kill this process), ``getenv`` (to check the configured
environment), ``slow`` (for call timeouts), ``pixel`` (an image plus text), ``stats``
(structured content only) and
``a_tool_with_a_rather_long_name_that_needs_shortening_for_models`` (for the 64-character cap).

``--exit-now`` makes it exit before speaking MCP, like a server that crashes on start.
"""

from __future__ import annotations

import os
import sys

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ImageContent, TextContent

server = MCPServer("echo", log_level="WARNING")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def shout(text: str) -> str:
    """Upper-case the text and add an exclamation mark."""
    return text.upper() + "!"


@server.tool()
def fail(reason: str = "boom") -> str:
    """Always raises a tool error (the SDK sends its message as an ``isError`` result)."""
    raise ToolError(f"failed on purpose: {reason}")


@server.tool()
def crash() -> str:
    """Raises an unexpected exception (the SDK hides its message)."""
    raise RuntimeError("internal detail")


@server.tool()
def protocol_error() -> str:
    """Answers with a JSON-RPC error instead of a result."""
    raise MCPError(code=-32602, message="bad request on purpose")


@server.tool()
def refuse() -> CallToolResult:
    """Returns a tool-level error result."""
    return CallToolResult(content=[TextContent(text="not allowed today")], is_error=True)


@server.tool()
def pid() -> int:
    """This server's process id."""
    return os.getpid()


@server.tool()
def getenv(name: str) -> str:
    """A variable of this server's environment (empty when unset)."""
    return os.environ.get(name, "")


@server.tool()
async def slow(seconds: float) -> str:
    """Answers after ``seconds``: for the client's call timeout."""
    await anyio.sleep(seconds)
    return "finally"


@server.tool()
def pixel() -> CallToolResult:
    """A tiny image and a caption."""
    return CallToolResult(
        content=[
            TextContent(text="a pixel"),
            ImageContent(data="iVBORw0KGgo=", mime_type="image/png"),
        ]
    )


@server.tool(structured_output=True)
def stats() -> CallToolResult:
    """Structured content without text."""
    return CallToolResult(content=[], structured_content={"count": 3, "ok": True})


@server.tool()
def a_tool_with_a_rather_long_name_that_needs_shortening_for_models(x: str = "") -> str:
    """A tool whose namespaced name is longer than 64 characters."""
    return f"long:{x}"


def main(argv: list[str]) -> None:
    if "--exit-now" in argv:
        print("echo_server: exiting on purpose", file=sys.stderr)
        sys.exit(3)
    print("echo_server: starting", file=sys.stderr)
    server.run("stdio")


if __name__ == "__main__":
    main(sys.argv[1:])
