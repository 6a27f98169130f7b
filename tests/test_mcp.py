"""MCP servers as Chorus tools over stdio, against a real MCP server written with the official ``mcp`` SDK (``tests/mcp_servers/echo_server.py``, launched with ``sys.executable``): namespacing, results, errors, timeouts, start-up failures, stderr, crash and reconnect, clean shutdown. Nothing sleeps to wait: reconnect backoff goes through an injected sleep."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Iterator

import pytest

from bot.tools.base import Permission, Tool, ToolError
from bot.tools.mcp import MCPTool, namespaced_name
from tests.mcp_rig import ECHO_TOOLS, WAIT, by_name, call, children, echo, exists, manager, running

pytestmark = pytest.mark.e2e  # every test here starts processes


@pytest.fixture
def no_leftover_children() -> Iterator[None]:
    before = children()
    yield
    assert children() <= before, "an MCP server process outlived the manager"


# -- stdio ------------------------------------------------------------------------------------
async def test_stdio_tools_are_namespaced_sorted_and_keep_the_server_schema() -> None:
    async with running({"echo": echo(timeout=12, permission="moderator")}) as mgr:
        tools = mgr.tools()
        assert mgr.status() == {"echo": "connected"}
        assert [t.spec.name for t in tools] == sorted(
            namespaced_name("echo", n) for n in ECHO_TOOLS
        )
        add = by_name(mgr)["echo__add"]
        assert isinstance(add, MCPTool) and isinstance(add, Tool)
        assert add.spec.description == "Add two integers."
        assert add.spec.parameters["required"] == ["a", "b"]
        assert list(add.spec.parameters["properties"]) == ["a", "b"]  # the server's key order
        assert add.spec.parameters["properties"]["a"]["type"] == "integer"
        assert add.permission is Permission.MODERATOR and add.timeout == 12
        assert all(len(t.spec.name) <= 64 for t in tools)


async def test_stdio_calls_return_text_images_and_structured_content() -> None:
    async with running({"echo": echo()}) as mgr:
        assert await call(mgr, "echo__add", a=2, b=3) == "5"
        assert await call(mgr, "echo__shout", text="hi") == "HI!"
        assert await call(mgr, "echo__pixel") == "a pixel\n[image: image/png, 8 bytes]"
        assert await call(mgr, "echo__stats") == '{"count":3,"ok":true}'


async def test_tool_errors_become_tool_errors_and_keep_the_connection() -> None:
    async with running({"echo": echo()}) as mgr:
        pid = await call(mgr, "echo__pid")
        with pytest.raises(ToolError, match="failed on purpose: boom"):
            await call(mgr, "echo__fail")
        with pytest.raises(ToolError, match="Error executing tool crash"):
            await call(mgr, "echo__crash")
        with pytest.raises(ToolError, match="not allowed today"):  # isError from the tool itself
            await call(mgr, "echo__refuse")
        with pytest.raises(ToolError, match="rejected protocol_error: bad request on purpose"):
            await call(mgr, "echo__protocol_error")
        assert await call(mgr, "echo__pid") == pid  # no reconnect for any of those


async def test_a_slow_call_times_out_without_dropping_the_server() -> None:
    async with running({"echo": echo(timeout=0.2)}) as mgr:
        pid = await call(mgr, "echo__pid")
        with pytest.raises(ToolError, match="slow on MCP server echo did not answer within 0.2 s"):
            await call(mgr, "echo__slow", seconds=60)
        assert await call(mgr, "echo__pid") == pid


async def test_servers_that_cannot_start_are_reported_and_skipped(
    caplog: pytest.LogCaptureFixture, no_leftover_children: None
) -> None:
    caplog.set_level(logging.INFO, logger="chorus.mcp")
    servers = {
        "good": echo(),
        "missing": {"command": "/nonexistent/chorus-mcp-server"},
        "quitter": echo("--exit-now"),
        "mute": {"command": sys.executable, "args": ["-c", "import sys; sys.stdin.read()"]},
    }
    servers["mute"]["startTimeout"] = 0.5
    async with running(servers) as mgr:
        assert await call(mgr, "good__add", a=1, b=1) == "2"
        assert {t.spec.name.split("__")[0] for t in mgr.tools()} == {"good"}
        status = mgr.status()
    assert status["good"] == "connected"
    assert status["missing"] == "failed: command not found: /nonexistent/chorus-mcp-server"
    assert status["quitter"].startswith("failed: the server closed the connection")
    assert "stderr: echo_server: exiting on purpose" in status["quitter"]
    assert status["mute"] == "failed: no answer within 0.5 s"
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert sorted(r.getMessage().split()[2] for r in errors) == ["missing", "mute", "quitter"]
    assert all("failed to start" in r.getMessage() and r.exc_info is None for r in errors)


async def test_server_stderr_goes_to_a_debug_logger_not_our_stderr(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG, logger="chorus.mcp.server.echo")
    async with running({"echo": echo()}) as mgr:
        await call(mgr, "echo__add", a=1, b=2)
    lines = [r for r in caplog.records if r.name == "chorus.mcp.server.echo"]
    assert any(r.getMessage() == "echo_server: starting" for r in lines)
    assert all(r.levelno == logging.DEBUG for r in lines)
    assert "echo_server: starting" not in capfd.readouterr().err


async def test_killed_stdio_server_is_restarted_and_the_call_retried(
    caplog: pytest.LogCaptureFixture, no_leftover_children: None
) -> None:
    caplog.set_level(logging.INFO, logger="chorus.mcp")
    async with running({"echo": echo()}) as mgr:
        specs = [t.spec for t in mgr.tools()]
        pid = int(await call(mgr, "echo__pid"))
        os.kill(pid, signal.SIGKILL)
        assert await call(mgr, "echo__add", a=20, b=22) == "42"
        assert int(await call(mgr, "echo__pid")) != pid
        assert [t.spec for t in mgr.tools()] == specs  # the cached prefix did not move
        assert mgr.status() == {"echo": "connected"}
    messages = [r.getMessage() for r in caplog.records]
    assert any("MCP server echo dropped during add" in m for m in messages)
    assert messages.count("MCP server echo reconnected") == 1


async def test_concurrent_calls_after_a_crash_share_one_reconnect(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="chorus.mcp")
    async with running({"echo": echo()}) as mgr:
        os.kill(int(await call(mgr, "echo__pid")), signal.SIGKILL)
        results = await asyncio.gather(*(call(mgr, "echo__add", a=i, b=1) for i in range(4)))
        assert results == ["1", "2", "3", "4"]
    assert [r.getMessage() for r in caplog.records].count("MCP server echo reconnected") == 1


async def test_aclose_stops_every_server_process(no_leftover_children: None) -> None:
    mgr = manager({"one": echo(), "two": echo()})
    await asyncio.wait_for(mgr.start(), WAIT)
    pids = {int(await call(mgr, f"{s}__pid")) for s in ("one", "two")}
    assert pids <= children()
    await asyncio.wait_for(mgr.aclose(), WAIT)
    assert not pids & children()
    assert not any(exists(pid) for pid in pids)  # reaped, not zombies
    with pytest.raises(ToolError, match="MCP server one is closed"):
        await call(mgr, "one__add", a=1, b=2)
